package natscluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// httpClient bounds every monitoring request: a paused node accepts the connection and answers
// nothing.
var httpClient = &http.Client{Timeout: 2 * time.Second}

// healthz asks node i's /healthz (with jsOnly, only whether JetStream is enabled; else whether
// every stream and consumer it holds is current) and returns the HTTP status.
func (c *Cluster) healthz(ctx context.Context, nd *node, jsOnly bool) (int, string) {
	q := ""
	if jsOnly {
		q = "?js-enabled-only=true"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz%s", nd.httpPort, q), nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// Healthy reports whether node i's /healthz is OK: it runs, JetStream is on, and every stream and
// consumer it holds a replica of is current. The reason says what is not.
func (c *Cluster) Healthy(ctx context.Context, i int) (bool, string) {
	st, body := c.healthz(ctx, c.nodes[i], false)
	return st == http.StatusOK, body
}

// jsz is the part of /jsz that we read.
type jsz struct {
	Meta *struct {
		Leader      string `json:"leader"`
		ClusterSize int    `json:"cluster_size"`
	} `json:"meta_cluster"`
}

// metaView returns what node i thinks the meta leader is ("" if none).
func (c *Cluster) metaView(ctx context.Context, i int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.MonitorURL(i)+"/jsz", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var j jsz
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return "", fmt.Errorf("%s /jsz: %w", c.Name(i), err)
	}
	if j.Meta == nil {
		return "", nil
	}
	return j.Meta.Leader, nil
}

// reachable returns the nodes that run and are not paused.
func (c *Cluster) reachable() []int {
	var out []int
	for i := range c.nodes {
		if c.Running(i) && !c.Stopped(i) {
			out = append(out, i)
		}
	}
	return out
}

// MetaLeader returns the index of the JetStream meta leader: the node that a majority of the
// cluster names as leader (asked through the monitoring endpoint, /jsz). It waits until there is
// one, or ctx ends. A single node is its own leader.
func (c *Cluster) MetaLeader(ctx context.Context) (int, error) {
	if len(c.nodes) == 1 {
		return 0, nil // a single server is not clustered: it decides alone
	}
	quorum := len(c.nodes)/2 + 1
	var last string
	for {
		votes := map[string]int{}
		for _, i := range c.reachable() {
			l, err := c.metaView(ctx, i)
			if err != nil {
				last = err.Error()
				continue
			}
			if l != "" {
				votes[l]++
			}
		}
		for name, v := range votes {
			if v >= quorum && c.Index(name) >= 0 {
				return c.Index(name), nil
			}
		}
		if len(votes) > 0 {
			last = fmt.Sprintf("no leader named by %d nodes: %v", quorum, votes)
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("natscluster: no meta leader: %w (%s)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StreamInfo is a stream's place in the cluster.
type StreamInfo struct {
	Leader   int       // index of the leader's node, -1 when there is none
	Replicas []Replica // the other replicas
}

// Replica is a follower of a stream.
type Replica struct {
	Node    int
	Current bool
	Offline bool
	Lag     uint64
}

// Stream asks the JetStream API ($JS.API.STREAM.INFO) where a stream's replicas are.
func (c *Cluster) Stream(ctx context.Context, stream string) (StreamInfo, error) {
	nc, err := c.apiConn()
	if err != nil {
		return StreamInfo{Leader: -1}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, nil)
	if err != nil {
		return StreamInfo{Leader: -1}, fmt.Errorf("natscluster: stream info %s: %w", stream, err)
	}
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
		Cluster *struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Name    string `json:"name"`
				Current bool   `json:"current"`
				Offline bool   `json:"offline"`
				Lag     uint64 `json:"lag"`
			} `json:"replicas"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return StreamInfo{Leader: -1}, fmt.Errorf("natscluster: stream info %s: %w", stream, err)
	}
	if r.Error != nil {
		return StreamInfo{Leader: -1}, fmt.Errorf("natscluster: stream info %s: %s (%d)", stream, r.Error.Description, r.Error.Code)
	}
	info := StreamInfo{Leader: -1}
	if r.Cluster == nil {
		return info, nil
	}
	info.Leader = c.Index(r.Cluster.Leader)
	for _, rep := range r.Cluster.Replicas {
		info.Replicas = append(info.Replicas, Replica{Node: c.Index(rep.Name), Current: rep.Current, Offline: rep.Offline, Lag: rep.Lag})
	}
	return info, nil
}

// StreamLeader returns the index of a stream's leader, waiting until it has one or ctx ends.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (int, error) {
	var last error
	for {
		info, err := c.Stream(ctx, stream)
		if err == nil && info.Leader >= 0 {
			return info.Leader, nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("natscluster: stream %s has no leader", stream)
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w (%v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) apiConn() (*nats.Conn, error) {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("natscluster: closed")
	}
	if c.conn != nil {
		return c.conn, nil
	}
	nc, err := c.Connect(nats.Name("natscluster-api"))
	if err != nil {
		return nil, fmt.Errorf("natscluster: connect: %w", err)
	}
	c.conn = nc
	return nc, nil
}

// WaitHealthy waits until every node that runs (and is not paused) answers /healthz OK (every
// stream and consumer replica it holds is current), has a route to every other such node whose
// routes CutRoutes did not cut, and a majority names one meta leader.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for {
		bad := ""
		for _, i := range c.reachable() {
			if ok, why := c.Healthy(ctx, i); !ok {
				bad = fmt.Sprintf("%s: %s", c.Name(i), why)
				break
			}
		}
		if bad == "" {
			bad = c.unmeshed(ctx)
		}
		if bad == "" {
			mctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err := c.MetaLeader(mctx)
			cancel()
			if err == nil {
				return nil
			}
			bad = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natscluster: not healthy: %w (%s)", ctx.Err(), bad)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unmeshed returns why the routes between the reachable nodes are not all up ("" when they are):
// a pair of nodes whose routes CutRoutes did not cut must see each other in /routez. A healthy
// /healthz and an elected meta leader do not mean that: a node that has a route to the leader but
// not yet to a peer drops a reply sent through that peer, and a request waits for its timeout (a
// stream create hung for 8 minutes in stop 24's CI, its reply lost while routes were connecting).
func (c *Cluster) unmeshed(ctx context.Context) string {
	up := c.reachable()
	for _, i := range up {
		peers, err := c.routePeers(ctx, i)
		if err != nil {
			return fmt.Sprintf("%s: /routez: %v", c.Name(i), err)
		}
		for _, j := range up {
			if j == i || c.routesCut(i, j) {
				continue
			}
			if !peers[c.Name(j)] {
				return fmt.Sprintf("%s has no route to %s yet", c.Name(i), c.Name(j))
			}
		}
	}
	return ""
}

// routesCut reports whether CutRoutes (or Isolate) cut the routes between nodes i and j.
func (c *Cluster) routesCut(i, j int) bool {
	if i > j {
		i, j = j, i
	}
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	return c.cut[[2]int{i, j}]
}

// routePeers returns the names of the nodes that node i has a route to, from its /routez.
func (c *Cluster) routePeers(ctx context.Context, i int) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.MonitorURL(i)+"/routez", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&rz); err != nil {
		return nil, err
	}
	peers := map[string]bool{}
	for _, r := range rz.Routes {
		peers[r.RemoteName] = true
	}
	return peers, nil
}

// NodesWithClient returns the nodes (among those running and not paused) that have a client
// connection whose name starts with prefix, from their /connz: the node a broker or a client is
// connected to.
func (c *Cluster) NodesWithClient(ctx context.Context, prefix string) ([]int, error) {
	var out []int
	var lastErr error
	for _, i := range c.reachable() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, c.MonitorURL(i)+"/connz?limit=4096", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			cancel()
			lastErr = err
			continue
		}
		var cz struct {
			Conns []struct {
				Name string `json:"name"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&cz)
		resp.Body.Close()
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		for _, cn := range cz.Conns {
			if strings.HasPrefix(cn.Name, prefix) {
				out = append(out, i)
				break
			}
		}
	}
	if len(out) == 0 && lastErr != nil {
		return nil, fmt.Errorf("natscluster: /connz: %w", lastErr)
	}
	return out, nil
}
