package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
)

// TestThinProducerTombstonesOnACompactedTopic: a thin producer (the broker's produce service)
// pipelines updates and tombstones of a compacted topic's keys, so that its requests are batched;
// afterwards every key holds its latest acknowledged record, deleted keys a tombstone. A batched
// request's body has no tombstone flag: before the thin producer sent tombstones alone, a
// tombstone batched with other records was stored as an empty value (the key not deleted).
func TestThinProducerTombstonesOnACompactedTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "tc", Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	tp, err := connect(t, b, broker.RoleProducer).NewThinProducer("tc", client.ThinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log latestLog
	const keys, rounds = 40, 6
	tombstones := 0
	for round := 0; round < rounds; round++ {
		for i := 0; i < keys; i++ {
			k := []byte(fmt.Sprint("key-", i))
			rec := client.Record{Key: k, Value: []byte(fmt.Sprintf("%s=%d", k, round))}
			if (round*keys+i)%7 == 3 {
				rec = client.Record{Key: k, Tombstone: true}
				if round == rounds-1 {
					tombstones++
				}
			}
			if err := tp.Send(ctx, rec, log.done(tp.ID(), rec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := log.snapshot()
	if len(want) != keys || log.acked != keys*rounds {
		t.Fatalf("%d keys, %d acknowledged; want %d and %d", len(want), log.acked, keys, keys*rounds)
	}
	deleted := 0
	for _, w := range want {
		if w.tombstone {
			deleted++
		}
	}
	if deleted != tombstones || deleted == 0 {
		t.Fatalf("%d keys end deleted by the producer's log; the input deletes %d last", deleted, tombstones)
	}
	native, err := partitioner.Native("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	checkStoredState(t, ctx, admin, "tc", want, native, false)
}
