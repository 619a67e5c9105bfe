package broker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestBackfillCountsEachRecordOnceWithTwoRunners: the broker running a backfill stalls after
// recording some progress (its checkpointer held at the "backfilling" step, its copiers going on),
// so the other broker's retry loop takes the backfill up and copies from the recorded progress
// while the first one also copies everything. Both decide the same records; the descriptor's
// counters must still count each record once: copied == the keys (nothing else was written, every
// key's copy is stored), newer == expired == 0. Counting per flush rather than per recorded
// position made copied the sum of both brokers' work (CI under load: 296–321 copies of 240 keys).
func TestBackfillCountsEachRecordOnceWithTwoRunners(t *testing.T) {
	skipShortCluster(t)
	const keys = 160 // the same size under -race (a few seconds either way)
	c := startSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "two-runners"
	var (
		holder   atomic.Int32 // 1 + the index of the broker held at its first checkpoint
		copiesBy [2]atomic.Int32
		atFlush  [2]int32 // copiesBy at a broker's last checkpoint (its checkpointer's goroutine only)
		release  = make(chan struct{})
		once     sync.Once
	)
	bs := make([]*broker.Broker, 2)
	for i := range bs {
		cfg := cfgDefault()
		cfg.Replicas = 1
		cfg.RetryInterval = 100 * time.Millisecond
		cfg.Testing = testhook.Steps(func(tp, s string) error {
			if tp != topic {
				return nil
			}
			switch s {
			case "backfill-copy":
				copiesBy[i].Add(1)
				time.Sleep(2 * time.Millisecond) // slow enough for the two to overlap
			case "backfilling":
				if holder.CompareAndSwap(0, int32(i+1)) {
					select { // this broker's progress stops changing: it looks stuck
					case <-release:
					case <-ctx.Done():
					}
				} else if int(holder.Load()) != i+1 {
					// The other runner: once a flush of its own follows two of its copies (the
					// first of them handled before the second began, so recorded by this
					// flush), let the first go on, to record the same records' decisions.
					if atFlush[i] >= 2 {
						once.Do(func() { close(release) })
					}
					atFlush[i] = copiesBy[i].Load()
				}
			}
			return nil
		})
		bs[i] = startClusterBroker(t, c, cfg)
	}
	defer func() {
		once.Do(func() { close(release) })
		for _, b := range bs {
			b.Close()
		}
	}()
	admin := clusterClient(t, c, "")
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("k%d", k)
		if err := p.Send(ctx, client.Record{Key: []byte(key), Value: []byte(key + "=1")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-release:
	case <-time.After(time.Minute):
		t.Fatalf("the other broker did not take up the stalled backfill (copies by broker: %d, %d; held: %d)",
			copiesBy[0].Load(), copiesBy[1].Load(), holder.Load())
	}
	desc := waitBackfilled(t, ctx, admin, topic)
	bf := desc.Current().Backfill
	t.Logf("backfill %+v; copy steps by broker: %d, %d (broker %d held)", *bf, copiesBy[0].Load(), copiesBy[1].Load(), holder.Load())
	if copiesBy[0].Load() == 0 || copiesBy[1].Load() == 0 {
		t.Fatalf("only one broker copied (%d, %d): the test did not make two runners", copiesBy[0].Load(), copiesBy[1].Load())
	}
	stored := 0
	for _, r := range readStreams(t, ctx, admin, topic) {
		if _, e, _, _, err := wire.SplitRecordSubject(r.subject); err == nil && e == 2 && !r.fence && r.origin != "" {
			stored++
		}
	}
	if stored != keys {
		t.Errorf("epoch 2 holds %d backfilled copies; want one per key (%d)", stored, keys)
	}
	if bf.Copied != int64(keys) || bf.Newer != 0 || bf.Expired != 0 {
		t.Errorf("backfill counted %d copies, %d newer, %d expired; want %d, 0, 0 (each key's record decided by both brokers, counted once)",
			bf.Copied, bf.Newer, bf.Expired, keys)
	}
}
