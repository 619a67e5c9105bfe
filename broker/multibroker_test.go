package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// thinRun sends n records of `keys` keys through a pipelining thin producer and returns the
// results by producer sequence. during, if not nil, runs once after `at` records were sent.
func thinRun(t *testing.T, ctx context.Context, tp *client.ThinProducer, n, keys, at int, during func()) map[uint64]client.Result {
	t.Helper()
	var mu sync.Mutex
	results := map[uint64]client.Result{}
	for i := 0; i < n; i++ {
		if i == at && during != nil {
			during()
		}
		rec := client.Record{Key: []byte(fmt.Sprint("k", i%keys)), Value: []byte(strconv.Itoa(i + 1))}
		if err := tp.Send(ctx, rec, func(r client.Result) {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := results[r.ProducerSeq]; dup {
				t.Errorf("record %d got two results", r.ProducerSeq)
			}
			results[r.ProducerSeq] = r
		}); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			time.Sleep(time.Millisecond) // a steady stream rather than one burst
		}
	}
	if err := tp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return results
}

// checkStoredOrder reads every partition stream of the topic and checks, for the records of
// producer id, that each key's records are stored in increasing producer sequence, and that each
// sequence is stored once. It returns the number of distinct records of the producer stored.
func checkStoredOrder(t *testing.T, ctx context.Context, c *client.Client, topic string, partitions int, id string) int {
	t.Helper()
	last := map[string]uint64{}
	seen := map[uint64]bool{}
	for q := 0; q < partitions; q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		count := s.CachedInfo().State.Msgs
		if count == 0 {
			continue
		}
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); i < count; i++ {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			h := m.Headers()
			if h.Get(wire.HeaderProducer) != id {
				continue
			}
			seq, _ := strconv.ParseUint(h.Get(wire.HeaderSeq), 10, 64)
			key := h.Get(wire.HeaderKey)
			if seen[seq] {
				t.Errorf("partition %d: producer sequence %d stored twice", q, seq)
			}
			seen[seq] = true
			if seq <= last[key] {
				t.Errorf("partition %d: key %s: sequence %d stored after %d: per-producer order broken", q, key, seq, last[key])
			}
			last[key] = seq
		}
		it.Stop()
	}
	return len(seen)
}

// TestClusterTwoBrokersKeepThinOrder: two brokers serve one cluster; a thin producer pipelining
// its requests keeps per-key order. Before the produce service's sticky subjects, the queue group
// spread one producer's pipelined requests over both brokers, which stored them in either order.
func TestClusterTwoBrokersKeepThinOrder(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	b1 := startClusterBroker(t, c, cfgDefault())
	defer b1.Close()
	b2 := startClusterBroker(t, c, cfgDefault())
	defer b2.Close()
	admin := clusterClient(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	prod := clusterClient(t, c, c.URL(2))
	tp, err := prod.NewThinProducer("t", client.ThinOptions{MaxInFlight: 512})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	results := thinRun(t, ctx, tp, n, 8, -1, nil)
	for seq, r := range results {
		if r.Err != nil {
			t.Fatalf("record %d: %v", seq, r.Err)
		}
	}
	if got := checkStoredOrder(t, ctx, admin, "t", 4, tp.ID()); got != n {
		t.Fatalf("%d records stored, want %d", got, n)
	}
	_ = tp.Close(ctx)
}

// TestClusterThinProducerSurvivesBrokerDeath: the broker a pipelining thin producer sends to dies
// (as a crash would: no answer to what it holds) with requests in flight; the producer re-sends
// everything unacknowledged through the other broker, in order, and every record is acknowledged
// and stored once, in per-key order. Before the thin client retried, every record in flight
// failed ("no produce service answers" or a reply timeout).
func TestClusterThinProducerSurvivesBrokerDeath(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	brokers := []*broker.Broker{startClusterBroker(t, c, cfgDefault()), startClusterBroker(t, c, cfgDefault())}
	defer func() {
		for _, b := range brokers {
			b.Close()
		}
	}()
	admin := clusterClient(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	prod := clusterClient(t, c, c.URL(2))
	tp, err := prod.NewThinProducer("t", client.ThinOptions{MaxInFlight: 512, AttemptTimeout: 2 * time.Second, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Count the records that travel in batched requests (spec/protocol.md §5.2), so that the test
	// is known to kill a broker with batches in flight, not only single requests.
	var inBatches atomic.Int64
	mon, err := admin.Conn().Subscribe(wire.ProducePrefix+".>", func(m *nats.Msg) {
		if k, err := strconv.Atoi(m.Header.Get(wire.HeaderBatch)); err == nil {
			inBatches.Add(int64(k))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = mon.SetPendingLimits(-1, -1)
	defer mon.Unsubscribe()
	const n = 6000
	var killed string
	results := thinRun(t, ctx, tp, n, 8, n/3, func() {
		// Under load (-race on a busy machine) a reply can take longer than the 2 s attempt
		// timeout, and the producer is then between brokers for a moment: kill the one it
		// sends to once it knows one again.
		for end := time.Now().Add(30 * time.Second); tp.Broker() == "" && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		killed = tp.Broker()
		for i, b := range brokers {
			if b.ID() == killed {
				b.Abort()
				brokers = append(brokers[:i], brokers[i+1:]...)
				return
			}
		}
		t.Fatalf("the producer sends to broker %q, which is neither of the two", killed)
	})
	failed := 0
	for seq, r := range results {
		if r.Err != nil {
			if failed++; failed < 5 {
				t.Errorf("record %d: %v", seq, r.Err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d records failed across the death of broker %s", failed, n, killed)
	}
	// Flush may return while the probe of a late re-send is out (the records it carries were
	// acknowledged by replies to earlier attempts): its reply names the broker.
	for end := time.Now().Add(10 * time.Second); tp.Broker() == "" && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	if now := tp.Broker(); now == killed || now == "" {
		t.Errorf("after the death of %s the producer sends to %q", killed, now)
	}
	if got := checkStoredOrder(t, ctx, admin, "t", 4, tp.ID()); got != n {
		t.Fatalf("%d records stored, want %d", got, n)
	}
	_ = tp.Close(ctx)
	t.Logf("%d records (with re-sends) went in batched requests", inBatches.Load())
	if inBatches.Load() < n/4 {
		t.Fatalf("only %d of %d records went in batched requests: the test does not exercise batches", inBatches.Load(), n)
	}
}

// TestClusterTwoBrokersFinishAChangeWhenOneDies: two brokers serve one cluster; the broker that
// drives an epoch change dies (its connection closed: no more requests, no answers) right after
// each recorded step in turn, "active" included, before it computed the observed ancestry. The
// other broker finishes the change and the ancestry, with boundaries that account for every
// acknowledged record. Its retry loop also takes up the change while the first broker is merely
// slow (each step of the survivor sleeps), so at times both drive the same change: the
// compare-and-set on the descriptor keeps that safe.
func TestClusterTwoBrokersFinishAChangeWhenOneDies(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	for _, step := range []string{"planned", "created", "fenced", "active"} {
		t.Run(step, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			topic := "die-" + step
			var died atomic.Bool
			var bs [2]*broker.Broker
			var dead atomic.Int32 // 1 + the index of the broker that died
			for i := range bs {
				cfg := cfgDefault()
				cfg.RetryInterval = 150 * time.Millisecond
				cfg.Testing = testhook.Steps(func(tp, s string) error {
					if tp != topic {
						return nil
					}
					if s == step && died.CompareAndSwap(false, true) {
						dead.Store(int32(i + 1))
						bs[i].Conn().Close() // dead to the cluster from now on
						return errors.New("dies here")
					}
					time.Sleep(400 * time.Millisecond) // slow: the other broker's loop joins in
					return nil
				})
				bs[i] = startClusterBroker(t, c, cfg)
			}
			defer func() {
				for i, b := range bs {
					if int(dead.Load()) == i+1 {
						b.Abort()
					} else {
						b.Close()
					}
				}
			}()
			admin := clusterClient(t, c, "")
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 3, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			p, err := admin.NewProducer(ctx, topic, client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			for i := 0; i < n; i++ {
				if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%50))}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(ctx, 8*time.Second)
			_, err = admin.Repartition(rctx, wire.RepartitionRequest{Topic: topic, Partitions: 5})
			rcancel()
			t.Logf("repartition answered: %v", err)
			deadline := time.Now().Add(60 * time.Second)
			for {
				desc, _, err := admin.Topic(ctx, topic)
				if err == nil && desc.Change == nil && len(desc.Epochs) == 2 && desc.Epochs[1].Ancestry != nil && desc.Epochs[1].Ancestry.Source == "observed" {
					var total uint64
					for _, bd := range desc.Epochs[0].Boundaries {
						total += bd
					}
					if total != n {
						t.Fatalf("boundaries %v add up to %d; want the %d acknowledged records", desc.Epochs[0].Boundaries, total, n)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("60s after broker %d died at %q the change or its ancestry is unfinished: %+v (%v)", dead.Load(), step, desc, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if dead.Load() == 0 {
				t.Fatalf("no broker reached step %q", step)
			}
		})
	}
}
