package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// TestReadGroupKeysWaitsForTheMarker: a member takes g.start and g.assignor only from a state that
// holds g.created (spec/protocol.md §6.1, "Reading the group's keys at join"). Against a real
// JetStream server: while only g.start and g.assignor exist (a creator between its writes, or a
// replica that lags behind them) the read goes on; once g.created exists it returns both; a
// deleted key reads as absent. The cluster failure this guards against (a fresh current-epoch
// group on an R3 bucket read "no g.start" from a lagging follower and skipped every backfilled
// copy) needs a lagging replica at the right moment; the rule that prevents it is checked here.
// It fails on the old read (a get per key, "not found" taken as absent): the first case returns
// with no g.created.
func TestReadGroupKeysWaitsForTheMarker(t *testing.T) {
	s := EmbeddedNATS(t, true)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "pctl-groups", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	const tid = "T1"
	start := []byte(`{"from":"current-epoch","epoch":3}`)
	assignor := []byte(`{"assignor":"sticky"}`)

	t.Run("waits for g.created", func(t *testing.T) {
		cn := &Consumer{topicID: tid, opts: ConsumerOptions{Group: "g1"}}
		for _, kvp := range []struct{ k, v []byte }{{[]byte(wire.StartKey(tid, "g1")), start}, {[]byte(wire.AssignorKey(tid, "g1")), assignor}} {
			if _, err := kv.Create(ctx, string(kvp.k), kvp.v); err != nil {
				t.Fatal(err)
			}
		}
		type res struct {
			gk  groupKeys
			err error
		}
		done := make(chan res, 1)
		go func() {
			gk, err := cn.readGroupKeys(ctx, kv)
			done <- res{gk, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("returned %+v (%v) while g.created did not exist", r.gk, r.err)
		case <-time.After(300 * time.Millisecond): // several reads, each without g.created
		}
		if _, err := kv.Create(ctx, wire.GroupPrefix(tid, "g1")+"g.created", []byte("now")); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if string(r.gk.start) != string(start) || string(r.gk.assignor) != string(assignor) {
			t.Fatalf("read start %q assignor %q, want %q and %q", r.gk.start, r.gk.assignor, start, assignor)
		}
	})
	t.Run("absent and deleted keys", func(t *testing.T) {
		cn := &Consumer{topicID: tid, opts: ConsumerOptions{Group: "g2"}}
		if _, err := kv.Create(ctx, wire.AssignorKey(tid, "g2"), assignor); err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(ctx, wire.AssignorKey(tid, "g2")); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, wire.GroupPrefix(tid, "g2")+"g.created", []byte("now")); err != nil {
			t.Fatal(err)
		}
		gk, err := cn.readGroupKeys(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		if gk.start != nil || gk.assignor != nil {
			t.Fatalf("read start %q assignor %q, want neither", gk.start, gk.assignor)
		}
	})
	t.Run("gives up with unavailable", func(t *testing.T) {
		cn := &Consumer{topicID: tid, opts: ConsumerOptions{Group: "g3"}}
		sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer scancel()
		if _, err := cn.readGroupKeys(sctx, kv); !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("err = %v, want unavailable", err)
		}
	})
}
