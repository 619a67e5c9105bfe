package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

// liveLog records a group's deliveries for client/verify, and whether it delivered copies.
type liveLog struct {
	mu     sync.Mutex
	order  int64
	deliv  []verify.Delivered
	copies int
	last   map[string]uint64 // key -> highest producer sequence delivered
}

func (l *liveLog) handler(group string) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.order++
		l.deliv = append(l.deliv, verify.Delivered{Group: group, Order: l.order, Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key, NoKey: m.NoKey})
		if m.Backfill != nil {
			l.copies++
		}
		if l.last == nil {
			l.last = map[string]uint64{}
		}
		if m.ProducerSeq > l.last[string(m.Key)] {
			l.last[string(m.Key)] = m.ProducerSeq
		}
		return nil
	}
}

// caughtUp reports whether the group delivered every key's latest acknowledged record.
func (l *liveLog) caughtUp(want map[string]latestRec) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	behind := 0
	for k, w := range want {
		if l.last[k] < w.pseq {
			behind++
		}
	}
	return behind == 0, behind
}

// TestBackfillKeepsCompactedTopicCorrectAcrossChanges is issue 14's end-to-end test on one broker:
// two producers keep updating 400 keys (100 under -race) of a compacted topic (about a hundred updates per key, and
// tombstones) while it grows (3 to 5 partitions), shrinks (5 to 2) and swaps its function
// (kafka-murmur2 to jump, 4 partitions); the broker "dies" inside the shrink's backfill (the step
// hook stops it after its first recorded progress) and its retry loop resumes it. A live group
// reads throughout. Afterwards:
//   - the live group lost no key's latest record and broke no per-key order (client/verify,
//     compacted), and delivered no backfilled copy (it had delivered their originals);
//   - a fresh group reading only the current epoch gets every key's latest record, once;
//   - the current epoch's subjects hold exactly one record per key, the latest, in the
//     partition the native (not WASM) jump gives it;
//   - after retiring, the old epochs hold nothing, and a group from the beginning still gets
//     every key's latest record.
func TestBackfillKeepsCompactedTopicCorrectAcrossChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var changes atomic.Int32
	var died atomic.Int32
	hook := func(topic, state string) error {
		if state == "active" {
			changes.Add(1)
		}
		if state == "backfilling" && changes.Load() == 2 && died.Add(1) == 1 {
			return errors.New("the broker dies inside the backfill")
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		RetryInterval: 100 * time.Millisecond, Testing: testhook.Steps(hook), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	const topic = "bf"
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}

	var live liveLog
	liveCn, err := connect(t, b, broker.RoleConsumer).NewConsumer(ctx, topic, client.ConsumerOptions{Group: "live", Start: client.StartBeginning, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	liveCtx, liveStop := context.WithCancel(ctx)
	liveDone := make(chan error, 1)
	go func() { liveDone <- liveCn.Run(liveCtx, live.handler("live")) }()

	var latest latestLog
	var sent sentLog
	var stop atomic.Bool
	var wg sync.WaitGroup
	keysPer, pace := 200, 100 // keys per producer; a 5 ms pause every pace records
	if raceEnabled {
		keysPer, pace = 50, 20 // the race detector slows everything about tenfold
	}
	for i := 0; i < 2; i++ {
		p, err := connect(t, b, broker.RoleProducer).NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for round := 0; !stop.Load(); round++ {
				for j := 0; j < keysPer && !stop.Load(); j++ {
					n++
					k := []byte(fmt.Sprintf("p%d-k%d", i, j))
					rec := client.Record{Key: k, Value: []byte(fmt.Sprintf("%s=%d", k, round))}
					if n%53 == 0 {
						rec = client.Record{Key: k, Tombstone: true}
					}
					ld, sd := latest.done(p.ID(), rec), sent.done(p.ID(), rec)
					if err := p.Send(ctx, rec, func(r client.Result) { ld(r); sd(r) }); err != nil {
						t.Error(err)
						return
					}
					if n%pace == 0 {
						time.Sleep(5 * time.Millisecond) // a steady stream, not one burst
					}
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	change := func(req wire.RepartitionRequest) {
		time.Sleep(1500 * time.Millisecond)
		req.Topic = topic
		before, _, err := admin.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Repartition(ctx, req); errors.Is(err, wire.ErrUnavailable) {
			// The answer timed out (a slow machine): the change goes on; follow it.
			t.Logf("repartition %+v: %v; waiting for epoch %d", req, err, before.Current().Epoch+1)
			for {
				d, _, err := admin.Topic(ctx, topic)
				if err == nil && d.Current().Epoch > before.Current().Epoch {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("repartition %+v: epoch %d never became active", req, before.Current().Epoch+1)
				}
				time.Sleep(50 * time.Millisecond)
			}
		} else if err != nil {
			t.Fatalf("repartition %+v: %v", req, err)
		}
		// The next change is refused while the backfill runs.
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 9}); err == nil {
			t.Fatal("a change during a backfill was accepted")
		} else if !errors.Is(err, wire.ErrChangeInProgress) {
			t.Logf("change during the backfill: %v (the backfill may have ended already)", err)
		}
		desc := waitBackfilled(t, ctx, admin, topic)
		t.Logf("epoch %d: backfill %+v", desc.Current().Epoch, *desc.Current().Backfill)
	}
	change(wire.RepartitionRequest{Partitions: 5})
	change(wire.RepartitionRequest{Partitions: 2})
	change(wire.RepartitionRequest{Partitions: 4, Partitioner: "jump"})
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if died.Load() == 0 {
		t.Fatal("the step hook never stopped a backfill")
	}
	want := latest.snapshot()
	t.Logf("%d records acknowledged, %d keys", latest.acked, len(want))

	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, behind := live.caughtUp(want)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live group has not delivered the latest record of %d keys", behind)
		}
		time.Sleep(100 * time.Millisecond)
	}
	liveStop()
	if err := <-liveDone; err != nil {
		t.Fatalf("live group: %v", err)
	}
	s, _ := sent.snapshot()
	live.mu.Lock()
	res := verify.Check(s, live.deliv, verify.Options{Groups: []string{"live"}, Compacted: true})
	copies := live.copies
	live.mu.Unlock()
	if !res.OK() {
		t.Errorf("live group:\n%s", res)
	}
	if copies > 0 {
		t.Errorf("the live group delivered %d backfilled copies of records it had delivered", copies)
	}

	consumer := connect(t, b, broker.RoleConsumer)
	checkLatest(t, "fresh group at the current epoch", readCurrentEpoch(t, ctx, consumer, topic, "fresh", 2*time.Second), want)
	native, err := partitioner.Native("jump")
	if err != nil {
		t.Fatal(err)
	}
	checkStoredState(t, ctx, admin, topic, want, native, false)
	desc, err := admin.RetireEpochs(ctx, topic, 0)
	if err != nil {
		t.Fatalf("retire: %v", err)
	}
	for _, e := range desc.Epochs[:len(desc.Epochs)-1] {
		if !e.Retired {
			t.Errorf("epoch %d not retired", e.Epoch)
		}
	}
	checkStoredState(t, ctx, admin, topic, want, native, true)
	checkLatest(t, "group from the beginning after retiring", readFrom(t, ctx, consumer, topic, "late", client.StartBeginning, 2*time.Second), want)
}
