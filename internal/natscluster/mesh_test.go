package natscluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWaitHealthyWaitsForEveryRoute breaks the routes between two followers behind the cluster's back
// (their proxies refuse and reset, as when routes are still connecting): /healthz stays OK and a
// meta leader stays elected, but WaitHealthy must not pass until the routes are back or are cut on
// purpose with CutRoutes.
func TestWaitHealthyWaitsForEveryRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	c := Start(t, Options{Nodes: 3, ProxiedRoutes: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if why := c.unmeshed(ctx); why != "" {
		t.Fatalf("a started cluster is not meshed: %s", why)
	}

	// Two followers of the meta leader, so that /healthz stays OK on every node.
	meta, err := c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := (meta+1)%3, (meta+2)%3
	for _, k := range [][2]int{{a, b}, {b, a}} {
		c.proxies[k].Refuse(true)
		c.proxies[k].Cut()
	}
	for {
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		err := c.WaitHealthy(short)
		cancelShort()
		if err == nil {
			t.Fatalf("WaitHealthy passed while %s and %s have no routes to each other", c.Name(a), c.Name(b))
		}
		if strings.Contains(err.Error(), "no route") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("WaitHealthy never named the missing route: %v", err)
		}
	}
	// The same outage, made on purpose, is what the test wants: WaitHealthy passes.
	if err := c.CutRoutes(a, b); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy with %s and %s cut by CutRoutes: %v", c.Name(a), c.Name(b), err)
	}

	if err := c.HealRoutes(a, b); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]int{{a, b}, {b, a}} {
		peers, err := c.routePeers(ctx, p[0])
		if err != nil {
			t.Fatal(err)
		}
		if !peers[c.Name(p[1])] {
			t.Fatalf("after HealRoutes and WaitHealthy %s has no route to %s", c.Name(p[0]), c.Name(p[1]))
		}
	}
}
