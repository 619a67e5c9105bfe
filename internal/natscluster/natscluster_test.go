package natscluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/internal/natscluster"
)

// TestFaultsAreReal starts a 3-node cluster of processes, puts an R3 stream on it and checks each
// fault (kill -9, SIGSTOP, a clean restart, a node cut off by its routes) against what an
// independent observer sees: the JetStream API and the monitoring endpoint of the other nodes,
// and the operating system (a killed node's port refuses connections).
func TestFaultsAreReal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, ProxiedRoutes: true})
	// A bound on the whole test, not a speed check: under -race on a loaded 2-core machine the
	// faults' recoveries took 3 minutes once (stop 22's CI), with nothing wrong.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Each attempt has its own timeout: a reply lost on its way (as routes settle) must cost one
	// attempt, not the whole test's bound. Creating the same stream again is not an error.
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3})
		cancel()
		if err == nil {
			break
		}
		if attempt == 5 {
			t.Fatalf("create stream: %v", err)
		}
	}
	publish := func(from, n int) {
		t.Helper()
		// Each attempt has its own timeout: the connection may be to the node that a fault just
		// paused, which the client only notices by its pings.
		for i := from; i < from+n; i++ {
			for attempt := 1; ; attempt++ {
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := js.Publish(actx, "s.x", []byte(fmt.Sprint(i)), jetstream.WithMsgID(fmt.Sprint(i)), jetstream.WithRetryAttempts(20), jetstream.WithRetryWait(100*time.Millisecond))
				cancel()
				if err == nil {
					break
				}
				if attempt == 20 {
					t.Fatalf("publish: %v", err)
				}
			}
		}
	}
	publish(0, 10)

	// Kill -9 the stream leader: a different node leads, nothing acknowledged is lost, and the
	// killed node's client port is closed.
	leader, err := c.StreamLeader(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name(leader) == "" || c.Index(c.Name(leader)) != leader {
		t.Fatalf("leader index %d has no name", leader)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if c.Running(leader) || c.PID(leader) != 0 {
		t.Fatalf("%s still runs after Kill", c.Name(leader))
	}
	if conn, err := nats.Connect(c.NodeURL(leader), nats.Timeout(time.Second)); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after Kill", c.Name(leader))
	}
	next, err := c.StreamLeader(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("the killed node %s is still the stream leader", c.Name(leader))
	}
	publish(10, 10)
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, "S", 20)

	// SIGSTOP the meta leader: the others elect another; after SIGCONT the cluster is healthy.
	meta, err := c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(meta); err != nil {
		t.Fatal(err)
	}
	if !c.Stopped(meta) || !c.Running(meta) {
		t.Fatalf("Stopped/Running of a paused node: %v/%v", c.Stopped(meta), c.Running(meta))
	}
	if ok, _ := c.Healthy(ctx, meta); ok {
		t.Fatalf("a paused node answers its health check")
	}
	var other int
	for {
		other, err = c.MetaLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if other != meta {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	publish(20, 5)
	if err := c.Cont(meta); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, "S", 25)
	// A clean shutdown and a restart on the same data keep the stream.
	if err := c.Shutdown(other); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(other); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, "S", 25)

	// Isolate the meta leader behind its route proxies: the other two elect a new one and keep
	// accepting writes, no route reaches the isolated node (gossip opens none around the
	// proxies), and after Heal the cluster is whole again with every write on every replica.
	meta, err = c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	side := (meta + 1) % 3
	snc, err := nats.Connect(c.NodeURL(side), nkeyOpt(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	sjs, _ := jetstream.New(snc)
	if err := c.Isolate(meta); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.MetaLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m != meta {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 25; i < 35; i++ {
		for {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := sjs.Publish(actx, "s.x", []byte(fmt.Sprint(i)), jetstream.WithMsgID(fmt.Sprint(i)))
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("publish on the majority side: %v", err)
			}
		}
	}
	for j := range 3 {
		if j != meta {
			if routes := routesTo(t, c, j, c.Name(meta)); routes != 0 {
				t.Fatalf("%s has %d routes to the isolated %s", c.Name(j), routes, c.Name(meta))
			}
		}
	}
	if err := c.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, "S", 35)
	if routes := routesTo(t, c, side, c.Name(meta)); routes == 0 {
		t.Fatalf("after Heal %s has no route to %s", c.Name(side), c.Name(meta))
	}
}

// waitState waits until every replica of the stream is current and the leader holds want messages.
func waitState(ctx context.Context, t *testing.T, c *natscluster.Cluster, stream string, want uint64) {
	t.Helper()
	nc, err := c.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil {
			info := s.CachedInfo()
			cur := info.Cluster != nil && len(info.Cluster.Replicas) == 2
			for _, r := range info.Cluster.Replicas {
				cur = cur && r.Current
			}
			if cur && info.State.Msgs == want {
				return
			}
			if info.State.Msgs > want {
				t.Fatalf("stream %s has %d messages, want %d", stream, info.State.Msgs, want)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("stream %s never had %d messages on current replicas: %v", stream, want, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestBadBinary checks that a binary that is not pctl fails with a clear error naming it.
func TestBadBinary(t *testing.T) {
	_, err := natscluster.New(natscluster.Options{Nodes: 1, Bin: "/nonexistent/pctl"})
	if err == nil {
		t.Fatal("a missing binary started a cluster")
	}
	t.Log(err)
}

// TestIsolateNeedsProxiedRoutes: cutting routes that do not go through proxies is refused.
func TestIsolateNeedsProxiedRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server process")
	}
	if err := natscluster.Start(t, natscluster.Options{Nodes: 1}).Isolate(0); err == nil {
		t.Fatal("Isolate without proxied routes did not fail")
	}
}

func nkeyOpt(t *testing.T, c *natscluster.Cluster) nats.Option {
	opt, err := nats.NkeyOptionFromSeed(c.Creds())
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// routesTo counts node i's routes to the server named remote, from its /routez.
func routesTo(t *testing.T, c *natscluster.Cluster, i int, remote string) int {
	t.Helper()
	resp, err := http.Get(c.MonitorURL(i) + "/routez")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rz struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rz); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rz.Routes {
		if r.RemoteName == remote {
			n++
		}
	}
	return n
}
