package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// sentLog collects what producers sent, for client/verify.
type sentLog struct {
	mu   sync.Mutex
	sent []verify.Sent
}

// done returns a Send callback that logs rec's fate under producer id.
func (l *sentLog) done(id string, rec client.Record) func(client.Result) {
	return func(r client.Result) { l.add(id, rec, r) }
}

func (l *sentLog) add(id string, rec client.Record, r client.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, verify.Sent{Producer: id, PSeq: r.ProducerSeq, Key: rec.Key, NoKey: rec.NoKey, Acked: r.Err == nil})
}

func (l *sentLog) snapshot() (sent []verify.Sent, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sent {
		if s.Acked {
			acked++
		}
	}
	return append([]verify.Sent(nil), l.sent...), acked
}

// consumeVerify reads the topic with a new group from the beginning until every acknowledged
// record of the log was delivered (or ctx ends), and requires from client/verify that nothing
// was lost, no per-key order broken, every key delivered as sent, nothing unexpected and no
// duplicate (no member crashes here). It also requires that the streams hold exactly the
// acknowledged records (fence markers aside), so that no extra record waits behind the last
// one the group was asked for (admin reads the streams).
func consumeVerify(t *testing.T, ctx context.Context, c, admin *client.Client, topic, group string, log *sentLog) *verify.Result {
	t.Helper()
	sent, acked := log.snapshot()
	cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: group, FromBeginning: true, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deliv []verify.Delivered
	distinct := map[string]bool{}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	err = cn.Run(rctx, func(_ context.Context, m *client.Message) error {
		mu.Lock()
		defer mu.Unlock()
		deliv = append(deliv, verify.Delivered{Group: group, Order: int64(len(deliv) + 1), Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key, NoKey: m.NoKey})
		distinct[fmt.Sprint(m.Producer, "/", m.ProducerSeq)] = true
		if len(distinct) >= acked {
			stop()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	mu.Lock()
	res := verify.Check(sent, deliv, verify.Options{Groups: []string{group}, NoDuplicates: true})
	mu.Unlock()
	if !res.OK() {
		t.Errorf("consumed topic %s with group %s:\n%s", topic, group, res)
	}
	if n := storedRecords(t, ctx, admin, topic); n != acked {
		t.Errorf("topic %s stores %d records, %d were acknowledged", topic, n, acked)
	}
	return res
}

// storedRecords counts the records (not fence markers) in every partition stream of the topic.
func storedRecords(t *testing.T, ctx context.Context, c *client.Client, topic string) int {
	t.Helper()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for q := 0; q < desc.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		if st.Msgs == 0 {
			continue
		}
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{HeadersOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		for left := st.Msgs; left > 0; left-- {
			m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				t.Fatalf("stream %s: %v", wire.StreamName(topic, q), err)
			}
			if m.Headers().Get(wire.HeaderFence) == "" {
				n++
			}
		}
	}
	return n
}
