package broker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

// TestBackfillCopyWhoseAnswerNeverComes: a backfill copy whose publish is stored but never
// answered (a stream leader that stepped down with it in flight, a frozen node) must be
// published again after the broker's ProduceTimeout, not waited for forever. The answers are
// withheld for real: at the backfill's start every partition stream of the topic is switched to
// NoAck (JetStream stores and does not answer) for two seconds.
//
// On the old broker (no async publish timeout on its JetStream context) the copies sent in those
// two seconds waited forever, and the backfill with them: this test then fails at "did not end"
// (CI, 2026-12-01: a resumed backfill stuck at Done [142 179 0] after leader changes).
func TestBackfillCopyWhoseAnswerNeverComes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, keys = "lostack", 120
	var (
		b        *broker.Broker
		withheld atomic.Bool
		restored = make(chan struct{})
	)
	setNoAck := func(noAck bool) error {
		js, err := jetstream.New(b.Conn())
		if err != nil {
			return err
		}
		for q := 0; q < 4; q++ {
			s, err := js.Stream(ctx, wire.StreamName(topic, q))
			if err != nil {
				return fmt.Errorf("stream %d: %w", q, err)
			}
			cfg := s.CachedInfo().Config
			cfg.NoAck = noAck
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("update stream %d: %w", q, err)
			}
		}
		return nil
	}
	hook := func(tp, step string) error {
		if tp != topic || step != "backfill-start" || !withheld.CompareAndSwap(false, true) {
			return nil
		}
		if err := setNoAck(true); err != nil {
			t.Errorf("withholding the answers: %v", err)
			close(restored)
			return nil
		}
		go func() {
			defer close(restored)
			time.Sleep(2 * time.Second)
			if err := setNoAck(false); err != nil {
				t.Errorf("answering again: %v", err)
			}
		}()
		return nil
	}
	var err error
	b, err = broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
		Testing: testhook.Steps(hook), ProduceTimeout: 300 * time.Millisecond, RetryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, "admin")
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	latest := writeRounds(t, ctx, admin, topic, keys, 3)
	// The streams 2 and 3 must exist before the hook switches them: the change creates them
	// before the backfill starts.
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 4, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	desc := waitBackfilled(t, ctx, admin, topic)
	<-restored
	if !withheld.Load() {
		t.Fatal("the backfill never started: no answer was withheld")
	}
	bf := desc.Current().Backfill
	t.Logf("backfill %+v", *bf)
	if bf.State != wire.BackfillDone {
		t.Fatalf("backfill state %q; want done", bf.State)
	}
	// Nothing was written in epoch 2: every key's copy is its own, found stored when the copy
	// that lost its answer was published again (counted as copied, not as refused by a newer).
	if bf.Copied != keys || bf.Newer != 0 {
		t.Errorf("backfill counted %d copies and %d refusals; want %d and 0", bf.Copied, bf.Newer, keys)
	}
	native, err := partitioner.Native("jump")
	if err != nil {
		t.Fatal(err)
	}
	want := latest.snapshot()
	checkStoredState(t, ctx, admin, topic, want, native, false)
	checkLatest(t, "fresh group at the current epoch", readCurrentEpoch(t, ctx, admin, topic, "fresh", time.Second), want)
}
