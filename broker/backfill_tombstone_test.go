package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestBackfillNeverResurrectsAKeyDeletedWhileItRuns (spec/protocol.md §10.2): keys k0..k9 live in
// the old epoch; the topic grows, and its backfill is held at its start (the step hook, as a
// slow or dead broker would be) while a producer deletes k0..k4 in the new epoch and three times
// the delete retention (1 s) goes by. Before tombstones were held, JetStream removed those
// tombstones, the copier then found the keys' subjects in the new epoch empty and copied the old
// values back: five deleted keys alive again. Now the tombstones written while the backfill runs
// are held until it ends, the copies are refused, and once the backfill has ended a tombstone
// gets the topic's delete retention again. A key deleted in the old epoch (its tombstone expired
// during the hold) stays gone too.
func TestBackfillNeverResurrectsAKeyDeletedWhileItRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "rz"
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(tp, state string) error {
		if tp != topic || state != "backfill-start" {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: testhook.Steps(hook), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "jump", Compact: true, DeleteRetentionMS: 1000}); err != nil {
		t.Fatal(err)
	}
	send := func(recs ...client.Record) {
		t.Helper()
		p, err := admin.NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := p.Send(ctx, r, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var old []client.Record
	for i := 0; i < 10; i++ {
		old = append(old, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("old")})
	}
	old = append(old, client.Record{Key: []byte("gone"), Value: []byte("old")}, client.Record{Key: []byte("gone"), Tombstone: true})
	send(old...)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the backfill did not start")
	}
	var dels []client.Record
	for i := 0; i < 5; i++ {
		dels = append(dels, client.Record{Key: []byte(fmt.Sprint("k", i)), Tombstone: true})
	}
	send(dels...)
	// JetStream removes a tombstone whose TTL (1 s) has run out within about a second of it;
	// three seconds is past that for the tombstones written in either epoch.
	time.Sleep(3 * time.Second)
	close(release)
	desc := waitBackfilled(t, ctx, admin, topic)
	if desc.Compact == nil || desc.Compact.DeleteRetentionMS != 1000 {
		t.Fatalf("after the backfill the descriptor gives tombstones %+v, want the topic's delete retention of 1000 ms back", desc.Compact)
	}
	cur := desc.Current().Epoch

	latest := map[string]stored{}
	for _, s := range readStreams(t, ctx, admin, topic) {
		if s.fence {
			continue
		}
		if _, e, _, _, err := wire.SplitRecordSubject(s.subject); err == nil && e == cur {
			if _, dup := latest[s.key]; dup {
				t.Errorf("key %q has two records in epoch %d", s.key, cur)
			}
			latest[s.key] = s
		}
	}
	for i := 0; i < 10; i++ {
		k := fmt.Sprint("k", i)
		s, ok := latest[k]
		switch {
		case i < 5 && ok && !s.tombstone:
			t.Errorf("key %s was deleted in epoch %d while the backfill ran, yet the epoch holds its old value %q again (a copy from %s): the deleted key is resurrected", k, cur, s.value, s.origin)
		case i < 5 && !ok:
			t.Errorf("key %s: its tombstone of epoch %d is gone before the backfill ended (it must be held until then)", k, cur)
		case i >= 5 && (!ok || s.tombstone || s.value != "old" || s.origin == ""):
			t.Errorf("key %s: epoch %d holds %+v, want the copy of its old value", k, cur, s)
		}
	}
	if s, ok := latest["gone"]; ok && !s.tombstone {
		t.Errorf("key gone, deleted in the old epoch, has its old value %q in epoch %d", s.value, cur)
	}

	// After the backfill, a tombstone gets the topic's delete retention again (1 s).
	send(client.Record{Key: []byte("k5"), Tombstone: true})
	found := false
	for _, s := range readStreams(t, ctx, admin, topic) {
		if s.key == "k5" && s.tombstone {
			found = true
			if s.ttl != "1" {
				t.Errorf("a tombstone written after the backfill has Nats-TTL %q, want 1 (the topic's delete retention)", s.ttl)
			}
		}
	}
	if !found {
		t.Error("the tombstone of k5 written after the backfill is not stored")
	}
}
