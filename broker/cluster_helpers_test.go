package broker_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// testCluster is a JetStream cluster of real nats-server instances in this process, each with its
// own store directory, client port and route port on loopback. It is the minimum the broker's
// cluster tests need (stale reads, a node down, brokers dying); the fault suite uses processes
// (internal/natscluster) for kill -9 and SIGSTOP.
type testCluster struct {
	t       testing.TB
	opts    []*server.Options
	servers []*server.Server
	creds   string // an NKey seed with full permissions (the broker's and the tests' clients)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts n nodes and waits until JetStream has a meta leader.
func startCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	c := &testCluster{t: t, creds: filepath.Join(dir, "broker.nk")}
	if err := os.WriteFile(c.creds, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	// Ports are picked free and then released, so another test process can take one before the
	// node listens on it (the race step runs packages side by side): a node that does not start
	// makes the whole cluster start again on fresh ports, up to three times.
	for attempt := 1; ; attempt++ {
		c.opts, c.servers = nil, nil
		routePorts := make([]int, n)
		clientPorts := make([]int, n)
		for i := range routePorts {
			routePorts[i] = freePort(t)
			clientPorts[i] = freePort(t)
		}
		var routes []string
		for _, p := range routePorts {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
		for i := 0; i < n; i++ {
			o := &server.Options{
				ServerName: fmt.Sprintf("n%d", i),
				Host:       "127.0.0.1",
				Port:       clientPorts[i],
				JetStream:  true,
				StoreDir:   filepath.Join(dir, fmt.Sprintf("a%d-n%d", attempt, i)),
				MaxPayload: 16 << 20,
				Cluster:    server.ClusterOpts{Name: "pctl-test", Host: "127.0.0.1", Port: routePorts[i]},
				Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
				NoSigs:     true,
				NoLog:      true,
				Nkeys:      []*server.NkeyUser{{Nkey: pub}},
				Tags:       []string{fmt.Sprintf("node:n%d", i)},
			}
			c.opts = append(c.opts, o)
			c.servers = append(c.servers, nil)
		}
		started := true
		for i := 0; i < n && started; i++ {
			started = c.tryStart(i)
		}
		if started {
			break
		}
		c.shutdown()
		if attempt == 3 {
			t.Fatalf("a %d-node cluster did not start in 3 attempts (a node not ready within 30s each time)", n)
		}
		t.Logf("cluster start, attempt %d: a node did not start; again on fresh ports", attempt)
	}
	t.Cleanup(c.shutdown)
	c.waitMeta()
	return c
}

func (c *testCluster) start(i int) {
	c.t.Helper()
	if !c.tryStart(i) {
		c.t.Fatalf("node %d did not start", i)
	}
}

// tryStart starts node i and reports whether it was ready for connections within 30s.
func (c *testCluster) tryStart(i int) bool {
	c.t.Helper()
	s, err := server.NewServer(c.opts[i].Clone())
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return false
	}
	c.servers[i] = s
	return true
}

// Stop shuts node i down (its JetStream state stays on disk for Restart).
func (c *testCluster) Stop(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

// Restart starts a stopped node again on the same ports and store.
func (c *testCluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
	c.waitMeta()
}

func (c *testCluster) shutdown() {
	for i := range c.servers {
		c.Stop(i)
	}
}

// URL is node i's client URL.
func (c *testCluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port)
}

// URLs lists every node's client URL, comma-separated.
func (c *testCluster) URLs() string {
	var us []string
	for i := range c.opts {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

func (c *testCluster) waitMeta() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.servers {
			if s != nil && s.JetStreamIsLeader() {
				// Every running node must know the leader too.
				ok := true
				for _, o := range c.servers {
					if o != nil && !o.JetStreamIsCurrent() {
						ok = false
					}
				}
				if ok {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("the cluster elected no JetStream meta leader within 30s")
}

// startClusterBroker starts a broker against the cluster (through node `node`'s URL first).
func startClusterBroker(t testing.TB, c *testCluster, cfg broker.Config) *broker.Broker {
	t.Helper()
	if cfg.NATSURL == "" {
		cfg.NATSURL = c.URLs()
	}
	cfg.Creds = c.creds
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.ConformanceKeys == 0 {
		cfg.ConformanceKeys = 2000
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 3
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// clusterClient connects a client (full permissions) to the given URLs.
func clusterClient(t testing.TB, c *testCluster, url string) *client.Client {
	t.Helper()
	if url == "" {
		url = c.URLs()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, client.Options{URL: url, Creds: c.creds, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// cfgDefault is a broker configuration for cluster tests (the helpers fill in the rest).
func cfgDefault() broker.Config { return broker.Config{} }

func skipShortCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster test: skipped with -short")
	}
}
