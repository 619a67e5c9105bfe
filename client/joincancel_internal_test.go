package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestStoppedJoinSaysCanceled: a read of the group's keys whose context ends returns an error that
// is both context.Canceled (errors.Is: a caller must tell a stop from a failure; chaos seed 29
// reported a member stopped during its join as failed) and wire.ErrUnavailable (Run retries a
// join that ran out of its own deadline; without it, chaos seed 59's live members both ended).
func TestStoppedJoinSaysCanceled(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := Connect(ctx, Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	c, err := Connect(ctx, Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleConsumer)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cn, err := c.NewConsumer(ctx, "t", ConsumerOptions{Group: "g", Member: "m"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := cn.kv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	// The group does not exist: without the stop this would wait for its g.created key.
	_, err = cn.readGroupKeys(stopped, kv)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("readGroupKeys after the stop: %v; want an error that is context.Canceled", err)
	}
	// And still unavailable: the join's own deadline (ensureGroup's) ending the read must be
	// retried by Run, not end it.
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("readGroupKeys after its context ended: %v; want an error that is also wire.ErrUnavailable", err)
	}
}
