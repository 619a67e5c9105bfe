package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestProducerIgnoresRelayedTopicEvents: topic events are hints (a re-read of the descriptor,
// from the broker), and a consumer may make JetStream relay stored records to a topic's events
// subject (a push consumer aimed at it; spec/protocol.md §8.4). An idle producer must not re-read
// the descriptor for such relays: the test counts the producer's topic.get requests while 2,000
// records are relayed to the events subject. The old producer re-read it for each (coalesced).
func TestProducerIgnoresRelayedTopicEvents(t *testing.T) {
	const topic = "relay"
	b := testBroker(t, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc := thinConnect(t, b, broker.RoleProducer)
	p, err := pc.NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	for i := 0; i < 2000; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Count the producer's descriptor reads (its connection's name tells them apart).
	admin := thinConnect(t, b, broker.RoleAdmin)
	var reads atomic.Int32
	inbox := pc.Conn().Opts.InboxPrefix
	sub, err := admin.Conn().Subscribe(wire.APITopicGet, func(m *nats.Msg) {
		if inbox == "" || len(m.Reply) >= len(inbox) && m.Reply[:len(inbox)] == inbox {
			reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := admin.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	// The relay: a push consumer of the partition stream delivering to the events subject.
	cons := thinConnect(t, b, broker.RoleConsumer)
	stream, events := wire.StreamName(topic, 0), wire.TopicEventSubject(topic)
	req, _ := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
		"name": "relay", "deliver_subject": events, "deliver_policy": "all", "ack_policy": "none"}})
	m, err := cons.Conn().Request("$JS.API.CONSUMER.CREATE."+stream+".relay", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Error *struct{ Description string } `json:"error"`
	}
	if json.Unmarshal(m.Data, &created); created.Error != nil {
		t.Fatalf("the relay was refused: %s", created.Error.Description)
	}
	// Wait until the relay delivered everything (an observer on the events subject counts).
	var relayed atomic.Int32
	obs, err := admin.Conn().Subscribe(events, func(*nats.Msg) { relayed.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Unsubscribe()
	for relayed.Load() < 1 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // the producer's reaction, if any
	t.Logf("%d relayed events seen by the observer after it subscribed; the producer read the descriptor %d times", relayed.Load(), reads.Load())
	if n := reads.Load(); n != 0 {
		t.Fatalf("an idle producer read the descriptor %d times while JetStream relayed records to %s: it takes relays for topic events", n, events)
	}
}
