package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestScopedConsumerRefusedOutsideItsGroup: a member running with a consumer credential for
// (t, g) consumes as g, and a member with the same credential in another group stops at once with
// a permission error (instead of retrying what the server will never allow).
func TestScopedConsumerRefusedOutsideItsGroup(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := thinConnect(t, b, broker.RoleAdmin)
	seed, pub, err := client.NewCredential()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AddCredential(ctx, wire.CredsRequest{NKey: pub, Role: broker.ScopeConsumer, Topic: "t", Group: "g"}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "g.nk")
	if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: file})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run := func(group string, d time.Duration) error {
		cn, err := c.NewConsumer(ctx, "t", client.ConsumerOptions{Group: group, Heartbeat: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		rctx, rcancel := context.WithTimeout(ctx, d)
		defer rcancel()
		return cn.Run(rctx, func(context.Context, *client.Message) error { return nil })
	}
	if err := run("g", time.Second); err != nil {
		t.Fatalf("its own group: %v", err)
	}
	start := time.Now()
	err = run("other", 20*time.Second)
	if !client.IsPermission(err) {
		t.Fatalf("another group: Run returned %v, want a permission error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	t.Logf("another group: %v", err)
}
