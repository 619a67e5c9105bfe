package broker_test

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
	for i := 0; i < 1000; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i%50)), Value: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cons := connect(t, b, broker.RoleConsumer)
	cn, err := cons.NewConsumer(ctx, "orders", client.ConsumerOptions{Group: "g", FromBeginning: true, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := 0
	rctx, rcancel := context.WithCancel(ctx)
	go func() {
		for {
			mu.Lock()
			n := got
			mu.Unlock()
			if n >= 1000 {
				rcancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	err = cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
		mu.Lock()
		got++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("consumed %d", got)
}
