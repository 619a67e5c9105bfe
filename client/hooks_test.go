package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// recorder is a hook implementing every client hook interface.
type recorder struct {
	mu        sync.Mutex
	produced  map[string]int // key -> acknowledged results seen
	failed    int
	repart    []int // epochs
	consumed  int
	gateWaits int
	acquired  map[int]int
	released  map[int]int
}

func (r *recorder) OnProduceRecordUnbuffered(topic string, rec *client.Record, res client.Result, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.Err != nil {
		r.failed++
		return
	}
	r.produced[string(rec.Key)]++
}
func (r *recorder) OnProduceRepartitioned(topic string, epoch, resent int) {
	r.mu.Lock()
	r.repart = append(r.repart, epoch)
	r.mu.Unlock()
}
func (r *recorder) OnConsumeRecord(topic, group string, m *client.Message, took time.Duration) {
	r.mu.Lock()
	r.consumed++
	r.mu.Unlock()
}
func (r *recorder) OnGateWait(topic, group string, partition, epoch int, waited time.Duration) {
	r.mu.Lock()
	r.gateWaits++
	r.mu.Unlock()
}
func (r *recorder) OnLeaseChange(topic, group, member string, partition int, acquired bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if acquired {
		r.acquired[partition]++
	} else {
		r.released[partition]++
	}
}

// TestHooks: a producer's hook sees every record's fate exactly once, before its callback; a
// consumer's hook sees every delivered record, as many gate waits as its stats count, and each
// partition's lease acquired and, on stop, released.
func TestHooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "h", Partitions: 3, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{produced: map[string]int{}, acquired: map[int]int{}, released: map[int]int{}}
	p, err := c.NewProducer(ctx, "h", client.ProducerOptions{Hooks: []client.Hook{rec}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var mu sync.Mutex
	before := 0 // callbacks that ran before the hook saw their record
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("k%d", i)
		if i == n/2 {
			if _, err := c.Repartition(ctx, wire.RepartitionRequest{Topic: "h", Partitions: 5}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Send(ctx, client.Record{Key: []byte(key), Value: []byte("v")}, func(r client.Result) {
			rec.mu.Lock()
			seen := rec.produced[key]
			rec.mu.Unlock()
			if seen != 1 {
				mu.Lock()
				before++
				mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rec.produced) != n || rec.failed != 0 || before != 0 {
		t.Fatalf("hook saw %d keys, %d failures; %d callbacks ran before the hook saw their record", len(rec.produced), rec.failed, before)
	}
	for k, v := range rec.produced {
		if v != 1 {
			t.Fatalf("key %s: the hook saw %d results, want 1", k, v)
		}
	}

	cn, err := c.NewConsumer(ctx, "h", client.ConsumerOptions{Group: "g", FromBeginning: true, Hooks: []client.Hook{rec}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	var got sync.WaitGroup
	got.Add(n)
	count := 0
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(cctx, func(context.Context, *client.Message) error {
			mu.Lock()
			count++
			if count <= n {
				got.Done()
			}
			mu.Unlock()
			return nil
		})
	}()
	got.Wait()
	stop()
	<-done
	st := cn.Stats()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if int64(rec.consumed) != st.Delivered || rec.consumed < n {
		t.Fatalf("hook saw %d records consumed, stats %d, want >= %d", rec.consumed, st.Delivered, n)
	}
	if int64(rec.gateWaits) != st.Gated {
		t.Fatalf("hook saw %d gate waits, stats %d", rec.gateWaits, st.Gated)
	}
	for q := 0; q < 5; q++ {
		if rec.acquired[q] < 1 || rec.released[q] < 1 {
			t.Fatalf("partition %d: acquired %d, released %d times; want both", q, rec.acquired[q], rec.released[q])
		}
	}
}
