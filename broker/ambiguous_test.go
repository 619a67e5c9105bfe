package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestLostAcknowledgementsNeverStoreTwice: with an acknowledgement timeout so short that most
// acknowledgements count as lost, and an epoch change in the middle, every record is acknowledged
// and stored exactly once: retries are deduplicated in the same partition, and a record fenced
// after a lost acknowledgement is found in the old partition instead of being sent again.
func TestLostAcknowledgementsNeverStoreTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "amb", Partitions: 3, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleProducer), AckTimeout: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, "amb", client.ProducerOptions{ID: "amb"})
	if err != nil {
		t.Fatal(err)
	}
	total := 2000
	if raceEnabled {
		total = 500
	}
	var mu sync.Mutex
	acked := 0
	for i := 0; i < total; i++ {
		if i == total/2 {
			go func() {
				if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "amb", Partitions: 7}); err != nil {
					t.Error(err)
				}
			}()
		}
		err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%100)), Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
			if r.Err == nil {
				mu.Lock()
				acked++
				mu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if acked != total {
		t.Fatalf("%d of %d acknowledged", acked, total)
	}
	// Count every stored copy of every record across all partition streams.
	copies := map[string]int{}
	desc, _, err := admin.Topic(ctx, "amb")
	if err != nil {
		t.Fatal(err)
	}
	for q := 0; q < desc.MaxPartitions(); q++ {
		cons, err := admin.JetStream().OrderedConsumer(ctx, wire.StreamName("amb", q), jetstream.OrderedConsumerConfig{HeadersOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := admin.JetStream().Stream(ctx, wire.StreamName("amb", q))
		last := s.CachedInfo().State.LastSeq
		if last == 0 {
			continue
		}
		it, _ := cons.Messages()
		for {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if m.Headers().Get(wire.HeaderFence) == "" { // fence markers are not records
				copies[m.Headers().Get(wire.HeaderMsgID)]++
			}
			md, _ := m.Metadata()
			if md.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
	}
	dups := 0
	for id, n := range copies {
		if n > 1 {
			dups++
			if dups < 5 {
				t.Errorf("record %s stored %d times", id, n)
			}
		}
	}
	if len(copies) != total || dups > 0 {
		t.Fatalf("%d distinct records stored (want %d), %d stored more than once", len(copies), total, dups)
	}
	t.Logf("resent after the fence: %d", p.Resent())
}
