package client_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// storedInOrder reads every partition stream of a topic back in stream order (not through a
// consumer group) and returns its records as deliveries to the pseudo-group "storage": Order is
// the position in the stream (partition-major), so verify.Check sees storage order per key (a
// key stays in one partition within an epoch). Fence markers are skipped.
func storedInOrder(ctx context.Context, t *testing.T, js jetstream.JetStream, topic string, partitions int) []verify.Delivered {
	t.Helper()
	var out []verify.Delivered
	for q := 0; q < partitions; q++ {
		s, err := js.Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		last := s.CachedInfo().State.LastSeq
		if last == 0 {
			continue
		}
		cons, err := js.OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			md, _ := m.Metadata()
			h := m.Headers()
			if h.Get(wire.HeaderFence) == "" {
				d := verify.Delivered{Group: "storage", Order: int64(q)<<40 | int64(md.Sequence.Stream), Producer: h.Get(wire.HeaderProducer)}
				d.PSeq, _ = strconv.ParseUint(h.Get(wire.HeaderSeq), 10, 64)
				if k := h.Get(wire.HeaderKey); k != "" {
					d.Key, err = wire.DecodeKey(k)
					if err != nil {
						t.Fatal(err)
					}
				} else {
					d.NoKey = true
				}
				out = append(out, d)
			}
			if md.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
	}
	return out
}

// testBroker starts a real embedded broker with one topic.
func testBroker(t *testing.T, topic string, partitions int) *broker.Broker {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := thinConnect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(context.Background(), wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	return b
}

// quietLogf logs unless the test has ended (late broker goroutines must not log after it).
func quietLogf(t *testing.T) func(string, ...any) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(f string, a ...any) {
		select {
		case <-done:
		default:
			t.Logf(f, a...)
		}
	}
}

// seeds returns the random seeds of a randomised test: PCTL_SEEDS=N runs N seeds, else the given
// default set.
func seeds(def ...int64) []int64 {
	if v := os.Getenv("PCTL_SEEDS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			out := make([]int64, n)
			for i := range out {
				out[i] = int64(i + 1)
			}
			return out
		}
	}
	return def
}

// connectVia connects a client to the broker through addr (a proxy), with the given role.
func connectVia(t *testing.T, b *broker.Broker, addr, role string, ackTimeout time.Duration) *client.Client {
	t.Helper()
	c, err := client.Connect(context.Background(), client.Options{URL: "nats://" + addr, Creds: b.CredsPath(role), Timeout: 20 * time.Second,
		AckTimeout: ackTimeout, ReconnectWait: 20 * time.Millisecond, Name: "via-proxy"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func hostPort(url string) string { return strings.TrimPrefix(url, "nats://") }
