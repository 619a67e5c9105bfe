package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/internal/natscluster"
)

// TestDemoCluster runs 'pctl demo --cluster' (the pctl binary as the nodes and the brokers): it
// must exit 0 with the checker's OK after killing a node and a broker in the middle of the epoch
// changes, and show that both faults were injected.
func TestDemoCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and 2 brokers as processes")
	}
	bin, err := natscluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "PCTL_BIN" {
			return bin // the test binary is not pctl: the nodes run the built one
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := runCLI(ctx, getenv, strings.NewReader(""), "demo", "--cluster", "--records", "800", "--keys", "60", "--duration", "8s")
	if r.code != 0 {
		t.Fatalf("pctl demo --cluster: %s", r)
	}
	for _, want := range []string{"OK: per-key order held across 4 epoch changes", "kill-stream-leader", "kill-broker", "0 lost, 0 order violations"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "not injected") {
		t.Errorf("a fault was not injected:\n%s", r.stdout)
	}
	r = runCLI(ctx, getenv, strings.NewReader(""), "demo", "--cluster", "--faults")
	expect(t, r, 2, "--faults and --cluster")
}
