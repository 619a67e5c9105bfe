package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

func TestSmokeProduceConsume(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "orders", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	prod := connect(t, b, broker.RoleProducer)
	p, err := prod.NewProducer(ctx, "orders", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log sentLog
	for i := 0; i < 1000; i++ {
		rec := client.Record{Key: []byte(fmt.Sprintf("k%d", i%50)), Value: []byte(fmt.Sprint(i))}
		if err := p.Send(ctx, rec, log.done(p.ID(), rec)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, acked := log.snapshot(); acked != 1000 {
		t.Fatalf("%d of 1000 records acknowledged", acked)
	}
	// Exactly the records sent: each once, in per-key order, with its key, and nothing else stored.
	res := consumeVerify(t, ctx, connect(t, b, broker.RoleConsumer), admin, "orders", "g", &log)
	if g := res.Group("g"); g == nil || g.Deliveries != 1000 || g.Distinct != 1000 {
		t.Fatalf("want exactly the 1000 records sent, each once:\n%s", res)
	}
}
