package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// thinBroker runs a real embedded broker (NATS + JetStream) on a random port in a temp dir, with
// a topic "t" of 4 partitions (kafka-murmur2).
func thinBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := thinConnect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(context.Background(), wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	return b
}

func thinConnect(t *testing.T, b *broker.Broker, role string) *client.Client {
	t.Helper()
	c, err := client.Connect(context.Background(), client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestProduceBrokerSide(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := thinConnect(t, b, broker.RoleProducer)
	desc, _, err := c.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.Partitioner(ctx, desc.Current().Partitioner)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		rec  client.Record
	}{
		{"keyed", client.Record{Key: []byte("alice"), Value: []byte("v1")}},
		{"empty key is a key", client.Record{Key: []byte{}, Value: []byte("v2")}},
		{"binary key", client.Record{Key: []byte{0, 0xff, 0x80}, Value: []byte{1, 2, 3}}},
		{"keyless", client.Record{NoKey: true, Value: []byte("v3")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.ProduceBrokerSide(ctx, "t", tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if r.Epoch != 1 || r.Seq == 0 || r.Partition < 0 || r.Partition >= 4 {
				t.Fatalf("reply %+v: want epoch 1, a sequence, partition in [0,4)", r)
			}
			if !tc.rec.NoKey {
				want, err := f.Partition(tc.rec.Key, 4)
				if err != nil {
					t.Fatal(err)
				}
				if r.Partition != int(want) {
					t.Errorf("the broker put key %q in partition %d; the topic's module says %d", tc.rec.Key, r.Partition, want)
				}
			}
			s, err := c.JetStream().Stream(ctx, wire.StreamName("t", r.Partition))
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetMsg(ctx, r.Seq)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Data, tc.rec.Value) {
				t.Errorf("stored value %q, want %q", m.Data, tc.rec.Value)
			}
			gotKey := m.Header.Get(wire.HeaderKey)
			if tc.rec.NoKey && gotKey != "" {
				t.Errorf("keyless record stored with key header %q", gotKey)
			}
			if !tc.rec.NoKey && gotKey != wire.EncodeKey(tc.rec.Key) {
				t.Errorf("stored key header %q, want %q", gotKey, wire.EncodeKey(tc.rec.Key))
			}
		})
	}
}

// TestThinProducerPipelinedOrder: 5000 records of 50 keys sent as fast as Send takes them are
// acknowledged once each and stored in per-key order with the producer's identity. A monitor on
// the produce subjects checks that most went in batched requests (spec/protocol.md §5.2: records
// wait while 4 requests are out), so the order is checked across batches.
func TestThinProducerPipelinedOrder(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var requests, batched, inBatches atomic.Int64
	mon, err := thinConnect(t, b, broker.RoleAdmin).Conn().Subscribe(wire.ProducePrefix+".>", func(m *nats.Msg) {
		requests.Add(1)
		if v := m.Header.Get(wire.HeaderBatch); v != "" {
			n, _ := strconv.Atoi(v)
			batched.Add(1)
			inBatches.Add(int64(n))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = mon.SetPendingLimits(-1, -1)
	c := thinConnect(t, b, broker.RoleProducer)
	tp, err := c.NewThinProducer("t", client.ThinOptions{MaxInFlight: 256})
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 5000, 50
	var mu sync.Mutex
	var failed []error
	acked := 0
	seen := map[uint64]bool{}
	for i := 0; i < n; i++ {
		rec := client.Record{Key: []byte(fmt.Sprintf("k%d", i%keys)), Value: []byte(strconv.Itoa(i))}
		err := tp.Send(ctx, rec, func(r client.Result) {
			mu.Lock()
			defer mu.Unlock()
			if r.Err != nil {
				failed = append(failed, r.Err)
				return
			}
			if seen[r.ProducerSeq] {
				failed = append(failed, fmt.Errorf("result for producer seq %d delivered twice", r.ProducerSeq))
			}
			seen[r.ProducerSeq] = true
			acked++
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(failed) > 0 || acked != n {
		t.Fatalf("%d acknowledged of %d; failures: %v", acked, n, failed)
	}
	// Per-key order: each key's values appear in increasing order in its partition stream.
	c = thinConnect(t, b, broker.RoleAdmin) // reading streams directly needs more than the producer role
	last := map[string]int{}
	total := 0
	for q := 0; q < 4; q++ {
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName("t", q), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.JetStream().Stream(ctx, wire.StreamName("t", q))
		if err != nil {
			t.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		count := s.CachedInfo().State.Msgs
		for i := uint64(0); i < count; i++ {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			key, _ := wire.DecodeKey(m.Headers().Get(wire.HeaderKey))
			v, _ := strconv.Atoi(string(m.Data()))
			if id, seq := m.Headers().Get(wire.HeaderProducer), m.Headers().Get(wire.HeaderSeq); id != tp.ID() || seq != strconv.Itoa(v+1) {
				t.Fatalf("record %d stored as producer %q seq %q; want the thin producer's identity %q and seq %d", v, id, seq, tp.ID(), v+1)
			}
			if prev, ok := last[string(key)]; ok && v <= prev {
				t.Fatalf("key %s: value %d stored after %d: per-producer order broken", key, v, prev)
			}
			last[string(key)] = v
			total++
		}
		it.Stop()
	}
	if total != n {
		t.Fatalf("streams hold %d records, want %d", total, n)
	}
	_ = mon.Unsubscribe()
	t.Logf("%d requests, %d of them batched with %d records", requests.Load(), batched.Load(), inBatches.Load())
	if inBatches.Load() < n/2 {
		t.Fatalf("%d of %d records went in batched requests (%d requests); the producer does not batch", inBatches.Load(), n, requests.Load())
	}
}

// TestThinProducerDeduplicates: the produce service stores a thin producer's identity and
// deduplicates by it, so a producer that re-sends after losing its replies (here: a second
// producer with the same ID and the same records) stores no second copy.
func TestThinProducerDeduplicates(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := thinConnect(t, b, broker.RoleProducer)
	for run := 0; run < 2; run++ {
		tp, err := c.NewThinProducer("t", client.ThinOptions{ID: "loader-7"})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			r, err := tp.Produce(ctx, client.Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			if r.Duplicate != (run == 1) || r.ProducerSeq != uint64(i+1) {
				t.Fatalf("run %d, record %d: %+v", run, i, r)
			}
		}
		if err := tp.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.NewThinProducer("t", client.ThinOptions{ID: "a.b"}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("producer id with a dot: got %v, want wire.ErrBadRequest", err)
	}
}

func TestThinProducerErrors(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := thinConnect(t, b, broker.RoleProducer)

	t.Run("unknown topic", func(t *testing.T) {
		_, err := prod.ProduceBrokerSide(ctx, "nope", client.Record{Key: []byte("k")})
		if !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("got %v, want wire.ErrNotFound", err)
		}
		tp, err := prod.NewThinProducer("nope", client.ThinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close(ctx)
		if _, err := tp.Produce(ctx, client.Record{Key: []byte("k")}); !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("got %v, want wire.ErrNotFound", err)
		}
	})
	t.Run("bad topic name", func(t *testing.T) {
		if _, err := prod.NewThinProducer("a.b", client.ThinOptions{}); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
	})
	t.Run("keyless record with a key", func(t *testing.T) {
		if _, err := prod.ProduceBrokerSide(ctx, "t", client.Record{NoKey: true, Key: []byte("k")}); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
	})
	t.Run("record over the stream's max size", func(t *testing.T) {
		big := make([]byte, 1<<20+1)
		_, err := prod.ProduceBrokerSide(ctx, "t", client.Record{Key: []byte("k"), Value: big})
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
		tp, err := prod.NewThinProducer("t", client.ThinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close(ctx)
		if _, err := tp.Produce(ctx, client.Record{Key: []byte("k"), Value: big}); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
		// The producer goes on after a refused record.
		if _, err := tp.Produce(ctx, client.Record{Key: []byte("k"), Value: []byte("small")}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("record over max_payload", func(t *testing.T) {
		huge := make([]byte, 17<<20)
		if _, err := prod.ProduceBrokerSide(ctx, "t", client.Record{Key: []byte("k"), Value: huge}); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
		tp, err := prod.NewThinProducer("t", client.ThinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close(ctx)
		if err := tp.Send(ctx, client.Record{Key: []byte("k"), Value: huge}, nil); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("got %v, want wire.ErrBadRequest", err)
		}
	})
	t.Run("consumer role may not produce", func(t *testing.T) {
		// The refusal's class (not a reply timeout's) is what must come back, at once and later.
		cons := thinConnect(t, b, broker.RoleConsumer)
		_, err := cons.ProduceBrokerSide(ctx, "t", client.Record{Key: []byte("k")})
		if !errors.Is(err, wire.ErrPermission) {
			t.Fatalf("got %v, want wire.ErrPermission", err)
		}
		tp, err := cons.NewThinProducer("t", client.ThinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close(ctx)
		_, err = tp.Produce(ctx, client.Record{Key: []byte("k")})
		if !errors.Is(err, wire.ErrPermission) {
			t.Fatalf("got %v, want wire.ErrPermission", err)
		}
		if err := tp.Send(ctx, client.Record{Key: []byte("k")}, nil); !errors.Is(err, wire.ErrPermission) {
			t.Fatalf("Send after a refusal: got %v, want wire.ErrPermission", err)
		}
	})
}

// TestThinProducerNoService runs the thin client against a plain NATS server without pctl's
// broker: a topic nobody serves fails at once (no responders); a request that a subscriber
// receives but never answers fails after the reply timeout.
func TestThinProducerNoService(t *testing.T) {
	srv := plainNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: srv.ClientURL(), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Conn().SubscribeSync(wire.ProduceSubject("silent"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = c.Conn().Flush()

	tests := []struct {
		name, topic, want string
	}{
		{"no responders", "unserved", "no produce service answers"},
		{"reply timeout", "silent", "did not answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ProduceBrokerSide(ctx, tc.topic, client.Record{Key: []byte("k")})
			if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ProduceBrokerSide: got %v, want wire.ErrUnavailable saying %q", err, tc.want)
			}
			tp, err := c.NewThinProducer(tc.topic, client.ThinOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close(ctx)
			for i := 0; i < 3; i++ {
				_, err = tp.Produce(ctx, client.Record{Key: []byte("k")})
				if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("ThinProducer: got %v, want wire.ErrUnavailable saying %q", err, tc.want)
				}
			}
			if err := tp.Flush(ctx); err != nil {
				t.Fatalf("Flush after per-record failures: %v", err)
			}
		})
	}
}

// TestThinProducerSendDuringProbeReply: records sent while the probe (the first request, to the
// shared subject) is out wait; a record sent just as the probe's reply names the broker must not
// overtake them. Here the record is sent from the probe's own result callback, the moment the
// broker is known and before the waiting records go out. The old producer published it at once,
// ahead of records 2..10: record 2 then went out with Pctl-Prev 11 (refused, bad_request) and
// record 11 was stored before 3..10 of its partition.
func TestThinProducerSendDuringProbeReply(t *testing.T) {
	b := thinBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := thinConnect(t, b, broker.RoleProducer)
	tp, err := c.NewThinProducer("t", client.ThinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var mu sync.Mutex
	var failed []error
	var sendErr error
	done := func(r client.Result) {
		mu.Lock()
		defer mu.Unlock()
		if r.Err != nil {
			failed = append(failed, fmt.Errorf("record %d: %w", r.ProducerSeq, r.Err))
		}
	}
	for i := 1; i <= n; i++ {
		cb := done
		if i == 1 {
			cb = func(r client.Result) {
				done(r)
				// All on one key: one partition, so the stored order is the send order.
				err := tp.Send(ctx, client.Record{Key: []byte("k"), Value: []byte(strconv.Itoa(n + 1))}, done)
				mu.Lock()
				sendErr = err
				mu.Unlock()
			}
		}
		if err := tp.Send(ctx, client.Record{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}, cb); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if sendErr != nil || len(failed) > 0 {
		t.Fatalf("send from the callback: %v; failed records: %v", sendErr, failed)
	}
	mu.Unlock()
	admin := thinConnect(t, b, broker.RoleAdmin)
	var got []string
	for q := 0; q < 4; q++ {
		s, err := admin.JetStream().Stream(ctx, wire.StreamName("t", q))
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(m.Data))
		}
	}
	want := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored %v, want %v (send order)", got, want)
	}
}

// plainNATS runs a real embedded nats-server without pctl's broker (no JetStream) on a random
// port, stopped when the test ends.
func plainNATS(t *testing.T) *server.Server { return client.EmbeddedNATS(t, false) }
