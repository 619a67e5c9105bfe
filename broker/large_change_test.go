package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestChangeResumesAfterFailingMidStep stops an epoch change half way through a step over many
// partitions, run many at a time: the work of some partitions fails (testhook.Broker.Partition) while others
// in flight finish, as when a broker dies in the middle of creating or fencing thousands of
// streams. The request's error names the failed partitions; a broker started again on the data
// directory finishes the change, every boundary counts exactly the acknowledged records, and a
// group reads every record once, in order.
func TestChangeResumesAfterFailingMidStep(t *testing.T) {
	const from, to = 24, 40
	for _, tc := range []struct {
		step   string
		failAt []int // partitions whose work fails
	}{
		{"create", []int{29, 33}},
		{"fence", []int{7, 11, 12, 13, 19}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			dir := t.TempDir()
			var mu sync.Mutex
			ran := map[int]bool{}
			fail := map[int]bool{}
			for _, q := range tc.failAt {
				fail[q] = true
			}
			hook := func(topic, step string, q int) error {
				if step != tc.step {
					return nil
				}
				mu.Lock()
				ran[q] = true
				mu.Unlock()
				if fail[q] {
					return fmt.Errorf("%w: injected failure of partition %d", wire.ErrInternal, q)
				}
				return nil
			}
			b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: &testhook.Broker{Partition: hook}, StreamOpsInFlight: 4})
			if err != nil {
				t.Fatal(err)
			}
			admin := connect(t, b, broker.RoleAdmin)
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: from, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			prod := connect(t, b, broker.RoleProducer)
			p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var log sentLog
			acked := 0
			for i := 0; i < 400; i++ {
				rec := client.Record{Key: []byte(fmt.Sprint("k", i%90)), Value: []byte(fmt.Sprint(i))}
				r, err := p.Produce(ctx, rec)
				if err != nil {
					t.Fatal(err)
				}
				log.add(p.ID(), rec, r)
				acked++
			}
			_ = p.Close(ctx)
			_, err = admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: to})
			if err == nil {
				t.Fatal("the injected failures should have stopped the change")
			}
			// The error names the first failed partition, and keeps its code.
			if !errors.Is(err, wire.ErrInternal) || !strings.Contains(err.Error(), fmt.Sprintf("partition %d: ", tc.failAt[0])) {
				t.Fatalf("error %q (code %s) should name partition %d and keep the internal code", err, wire.Code(err), tc.failAt[0])
			}
			mu.Lock()
			if len(ran) < 2 {
				t.Fatalf("the step ran %d partitions before stopping", len(ran))
			}
			mu.Unlock()
			desc, _, err := admin.Topic(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if desc.Change == nil || len(desc.Epochs) != 1 {
				t.Fatalf("after the failure the change must be recorded and unfinished: %+v", desc.Change)
			}
			admin.Close()
			prod.Close()
			b.Close()

			b2, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			admin2 := connect(t, b2, broker.RoleAdmin)
			desc, _, err = admin2.Topic(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if desc.Change != nil || len(desc.Epochs) != 2 || desc.Current().Partitions != to {
				t.Fatalf("the restarted broker must finish the change: change=%+v epochs=%d", desc.Change, len(desc.Epochs))
			}
			var total uint64
			for _, bd := range desc.Epochs[0].Boundaries {
				total += bd
			}
			if total != uint64(acked) {
				t.Fatalf("boundaries %v add up to %d, want the %d acknowledged records", desc.Epochs[0].Boundaries, total, acked)
			}
			prod2 := connect(t, b2, broker.RoleProducer)
			p2, err := prod2.NewProducer(ctx, "t", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 50; i++ {
				rec := client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint("after", i))}
				r, err := p2.Produce(ctx, rec)
				if err != nil || r.Epoch != 2 {
					t.Fatalf("produce after resume: %+v %v", r, err)
				}
				log.add(p2.ID(), rec, r)
			}
			_ = p2.Close(ctx)
			consumeVerify(t, ctx, connect(t, b2, broker.RoleConsumer), admin2, "t", "g", &log)
		})
	}
}

// TestChangePublishesStepProgress: an epoch change's create and fence steps publish their
// progress on pctl.events.change.<topic> (spec/protocol.md §7), ending at every partition of the
// step; the descriptor itself is written once per step.
func TestChangePublishesStepProgress(t *testing.T) {
	const from, to = 8, 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "p", Partitions: from, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := map[string]wire.ChangeEvent{}
	sub, err := admin.Conn().Subscribe(wire.ChangeSubject("p"), func(m *nats.Msg) {
		var ev wire.ChangeEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Errorf("progress event %q: %v", m.Data, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := last[ev.Step]; ok && ev.Done < prev.Done {
			t.Errorf("progress of %s went back: %d after %d", ev.Step, ev.Done, prev.Done)
		}
		last[ev.Step] = ev
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := admin.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "p", Partitions: to}); err != nil {
		t.Fatal(err)
	}
	want := map[string]wire.ChangeEvent{
		"create": {Topic: "p", To: 2, Step: "create", Done: to - from, Of: to - from, Broker: b.ID()},
		"fence":  {Topic: "p", To: 2, Step: "fence", Done: from, Of: from, Broker: b.ID()},
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := fmt.Sprint(last)
		ok := fmt.Sprint(want) == got
		mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("last progress events %s, want %s", got, fmt.Sprint(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOtherBrokerLeavesAMovingStepAlone: two brokers share a cluster; while one runs a long step
// (16 partitions created one at a time, a quarter second each: the descriptor unchanged for
// seconds), the other's retry loop (rounds every second, work taken up after two rounds without
// progress) sees the step's progress events and does not run the same change beside it. Before
// the events it took the change up after two seconds and created the same streams in parallel.
func TestOtherBrokerLeavesAMovingStepAlone(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	ranOn := map[int]int{} // broker index -> partitions it worked on
	var bs [2]*broker.Broker
	for i := range bs {
		cfg := cfgDefault()
		cfg.Replicas = 1
		cfg.RetryInterval = time.Second
		cfg.StreamOpsInFlight = 1
		cfg.Testing = &testhook.Broker{Partition: func(topic, step string, q int) error {
			mu.Lock()
			ranOn[i]++
			mu.Unlock()
			time.Sleep(250 * time.Millisecond)
			return nil
		}}
		bs[i] = startClusterBroker(t, c, cfg)
		defer bs[i].Close()
	}
	admin := clusterClient(t, c, "")
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "m", Partitions: 4, Partitioner: "jump", Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "m", Partitions: 20}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranOn) != 1 {
		t.Fatalf("both brokers worked on the change's partitions (%v): the second took up a step that was moving", ranOn)
	}
	for _, n := range ranOn {
		if n != 16+4 {
			t.Fatalf("the change's partitions were worked on %d times, want 20 (16 created, 4 fenced)", n)
		}
	}
}

// TestSlowPartitionIsRetriedAlone: a partition whose work fails once with unavailable (a stream
// request past its bound on a busy server) is tried again by itself; the step is not run again
// for every partition. Before, the whole step ran again: every partition worked on twice.
func TestSlowPartitionIsRetriedAlone(t *testing.T) {
	const from, to = 6, 14
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	calls := map[string]int{} // "step/q" -> calls
	hook := func(topic, step string, q int) error {
		mu.Lock()
		defer mu.Unlock()
		k := fmt.Sprintf("%s/%d", step, q)
		calls[k]++
		if (k == "create/9" || k == "fence/2") && calls[k] == 1 {
			return fmt.Errorf("%w: injected: stream request timed out", wire.ErrUnavailable)
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: &testhook.Broker{Partition: hook}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "s", Partitions: from, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "s", Partitions: to}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range calls {
		want := 1
		if k == "create/9" || k == "fence/2" {
			want = 2
		}
		if n != want {
			t.Errorf("partition work %s ran %d times, want %d (all: %v)", k, n, want, calls)
		}
	}
	if len(calls) != (to-from)+from {
		t.Errorf("%d partitions' work ran, want %d: %v", len(calls), to, calls)
	}
}

// TestUnavailablePartitionsShrinkTheWorkInFlight: after partitions' work fails with unavailable
// (stream requests past their bound on a server that answers slowly), a step keeps fewer in
// flight: half its bound, once per wave of failures. Before, it kept its full bound, and on a
// server holding thousands of streams the requests queued behind each other went on timing out.
func TestUnavailablePartitionsShrinkTheWorkInFlight(t *testing.T) {
	const from, to, inFlight = 4, 60, 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	failedWave := false // the first full wave of creates has had a failure
	var failedAt time.Time
	running, late, mostLate := 0, 0, 0 // late: creates that started well after the failure
	hook := func(topic, step string, q int) error {
		if step != "create" {
			return nil
		}
		mu.Lock()
		running++
		fail := !failedWave && running == inFlight // a full wave in flight: its last one fails
		// Work admitted before the failure takes 40 ms: 100 ms later only work admitted under
		// the shrunk bound runs.
		isLate := failedWave && time.Since(failedAt) > 100*time.Millisecond
		if isLate {
			late++
			mostLate = max(mostLate, late)
		}
		if fail {
			failedWave, failedAt = true, time.Now()
		}
		mu.Unlock()
		time.Sleep(40 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		running--
		if isLate {
			late--
		}
		if fail {
			return fmt.Errorf("%w: injected: stream request timed out", wire.ErrUnavailable)
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: &testhook.Broker{Partition: hook}, StreamOpsInFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "l", Partitions: from, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "l", Partitions: to}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !failedWave {
		t.Fatal("no wave of creates was in flight at once: the test tested nothing")
	}
	if mostLate > inFlight/2 || mostLate < 1 {
		t.Fatalf("after the failure %d creates were in flight at once, want 1 to %d", mostLate, inFlight/2)
	}
}
