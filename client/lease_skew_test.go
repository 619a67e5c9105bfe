package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/proto"
)

// A lease is another member's until its end plus the clock-skew bound (spec/protocol.md §6.3,
// spec/vectors/protocol/lease-expiry.jsonl): a member may not take over a partition whose lease
// ended, by its own clock, less than S = min(1 s, session/6) ago. The member before the bound took
// the partition as soon as lease_end had passed. The assertion is a lower bound on the time of
// the first delivery after the takeover, so a slow machine cannot fail it.
func TestLeaseExpiresOnlyAfterTheSkewBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "skew", 1)
	p := newKeyProducer(t, ctx, b, "skew", "p")
	opts := func(id string) client.ConsumerOptions {
		return client.ConsumerOptions{Group: "g", Member: id, FromBeginning: true, Heartbeat: 50 * time.Millisecond, SessionTimeout: 6 * time.Second, Logf: quietLogf(t)}
	}
	run := func(id string, got func(m *client.Message)) (stop func()) {
		cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "skew", opts(id))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- cn.Run(rctx, func(_ context.Context, m *client.Message) error { got(m); return nil })
		}()
		return func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Error(err)
			}
		}
	}

	// x creates the group, reads a record and releases the partition.
	var mu sync.Mutex
	var firstX bool
	stopX := run("x", func(*client.Message) { mu.Lock(); firstX = true; mu.Unlock() })
	p.send(t, ctx, 1, 1)
	waitFor(t, 20*time.Second, "x's record", func() bool { mu.Lock(); defer mu.Unlock(); return firstX })
	stopX()

	// A member "ghost" holds the lease, which ended 200 ms ago by this host's clock.
	desc, _, _ := admin.Topic(ctx, "skew")
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := wire.PartitionKey(desc.ID, "g", 0)
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var ps wire.PartitionState
	if err := json.Unmarshal(e.Value(), &ps); err != nil {
		t.Fatal(err)
	}
	ps.Owner, ps.LeaseEnd = "ghost", time.Now().Add(-200*time.Millisecond).UnixMilli()
	body, _ := json.Marshal(ps)
	if _, err := kv.Update(ctx, key, body, e.Revision()); err != nil {
		t.Fatal(err)
	}

	var at int64 // when y delivered its first record, unix ms
	stopY := run("y", func(*client.Message) {
		mu.Lock()
		if at == 0 {
			at = time.Now().UnixMilli()
		}
		mu.Unlock()
	})
	defer stopY()
	p.send(t, ctx, 1, 1)
	waitFor(t, 20*time.Second, "y's record", func() bool { mu.Lock(); defer mu.Unlock(); return at != 0 })
	skew := proto.MaxClockSkew(6 * time.Second).Milliseconds()
	if skew != 1000 {
		t.Fatalf("skew bound for a 6 s session: %d ms, want 1000 (spec/protocol.md §6.3)", skew)
	}
	if at < ps.LeaseEnd+skew {
		t.Fatalf("y took the partition %d ms after the ghost's lease ended, before the clock-skew bound of %d ms", at-ps.LeaseEnd, skew)
	}
	t.Logf("taken over %d ms after the lease's end (bound %d ms)", at-ps.LeaseEnd, skew)
}
