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

// TestStatusShowsBackfillProgress: the broker's status snapshot (what the status page shows)
// carries a backfill's progress, from the descriptor topic describe reads: while the backfill is
// held at its start, running with nothing handled of the 50 stored messages of epoch 1 in 2 old
// partitions; once it has ended, done, every old partition complete, 50 of 50 handled, 50 copies
// (one per key: nothing else was written), and a rate.
func TestStatusShowsBackfillProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(topic, state string) error {
		if state == "backfill-start" {
			first := false
			once.Do(func() { first = true })
			if first {
				close(held)
				select {
				case <-release:
				case <-ctx.Done():
				}
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
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "kv", Partitions: 2, Partitioner: "jump", Compact: true}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewProducer(ctx, "kv", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 50
	for i := 0; i < keys; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "kv", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	<-held
	backfill := func() wire.BackfillProgress {
		t.Helper()
		st, err := b.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range st.Topics {
			if ts.Topic.Name == "kv" {
				if len(ts.Backfills) != 1 {
					t.Fatalf("status shows %d backfills of kv, want 1: %+v", len(ts.Backfills), ts.Backfills)
				}
				return ts.Backfills[0]
			}
		}
		t.Fatal("status has no topic kv")
		return wire.BackfillProgress{}
	}
	bp := backfill()
	if bp.Epoch != 2 || bp.From != 1 || bp.State != wire.BackfillRunning || len(bp.Partitions) != 2 || bp.PartitionsDone != 0 || bp.Handled != 0 || bp.Total != keys {
		t.Fatalf("held backfill in the status: %+v; want into epoch 2 from 1, running, 0 of 2 partitions, 0 of %d messages", bp, keys)
	}
	close(release)
	waitBackfilled(t, ctx, admin, "kv")
	bp = backfill()
	if bp.State != wire.BackfillDone || bp.PartitionsDone != 2 || bp.Handled != keys || bp.Total != keys || bp.Copied != keys || bp.Ended == nil || bp.KeysPerSecond <= 0 {
		t.Fatalf("ended backfill in the status: %+v; want done, 2 of 2 partitions, %d of %d messages, %d copies, a rate", bp, keys, keys, keys)
	}
	var sum uint64
	for _, pp := range bp.Partitions {
		if !pp.Complete || pp.Handled != pp.Total {
			t.Errorf("old partition %d: %+v, want complete", pp.Partition, pp)
		}
		sum += pp.Total
	}
	if sum != keys {
		t.Errorf("the old partitions hold %d messages in the status, want %d", sum, keys)
	}
}
