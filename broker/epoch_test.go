package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestChangeResumesAfterDyingAtEachStep kills the broker (as far as the change is concerned)
// right after each recorded step of an epoch change, starts it again on the same data directory,
// and checks that the change finishes, with the right boundaries, and that no record is lost.
func TestChangeResumesAfterDyingAtEachStep(t *testing.T) {
	for _, state := range []string{"planned", "created", "fenced"} {
		t.Run(state, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := t.TempDir()
			die := errors.New("dies here")
			hook := func(topic, s string) error {
				if s == state || (state == "planned" && s == "created") {
					return die
				}
				return nil
			}
			if state == "planned" {
				// "planned" is recorded by the request itself; dying right after it means the
				// next step never runs: stop before "created" is recorded instead.
				hook = func(topic, s string) error {
					if s == "created" {
						return die
					}
					return nil
				}
			}
			b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", Testing: testhook.Steps(hook)})
			if err != nil {
				t.Fatal(err)
			}
			admin := connect(t, b, broker.RoleAdmin)
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 3, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			prod := connect(t, b, broker.RoleProducer)
			p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			acked := 0
			var log sentLog
			for i := 0; i < 300; i++ {
				rec := client.Record{Key: []byte(fmt.Sprint("k", i%40)), Value: []byte(fmt.Sprint(i))}
				r, err := p.Produce(ctx, rec)
				if err != nil {
					t.Fatal(err)
				}
				log.add(p.ID(), rec, r)
				acked++
			}
			_ = p.Close(ctx)
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 5}); err == nil {
				t.Fatal("the step hook should have stopped the change")
			}
			desc, _, err := admin.Topic(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if desc.Change == nil || len(desc.Epochs) != 1 {
				t.Fatalf("after dying, the change must be recorded and unfinished: %+v", desc.Change)
			}
			// A second change is refused while this one is unfinished.
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 7}); !errors.Is(err, wire.ErrChangeInProgress) {
				t.Fatalf("concurrent change: got %v, want ErrChangeInProgress", err)
			}
			admin.Close()
			prod.Close()
			b.Close()

			b2, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			admin2 := connect(t, b2, broker.RoleAdmin)
			desc, _, err = admin2.Topic(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if desc.Change != nil || len(desc.Epochs) != 2 || desc.Current().Partitions != 5 {
				t.Fatalf("the restarted broker must finish the change: change=%+v epochs=%d", desc.Change, len(desc.Epochs))
			}
			var total uint64
			for _, bd := range desc.Epochs[0].Boundaries {
				total += bd
			}
			if total != uint64(acked) {
				t.Fatalf("boundaries %v add up to %d, want the %d acknowledged records", desc.Epochs[0].Boundaries, total, acked)
			}
			// Producing continues in epoch 2.
			prod2 := connect(t, b2, broker.RoleProducer)
			p2, err := prod2.NewProducer(ctx, "t", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			after := client.Record{Key: []byte("after")}
			r, err := p2.Produce(ctx, after)
			if err != nil || r.Epoch != 2 {
				t.Fatalf("produce after resume: %+v %v", r, err)
			}
			log.add(p2.ID(), after, r)
			_ = p2.Close(ctx)
			// No record is lost: a group reads every acknowledged record, in order, once.
			consumeVerify(t, ctx, connect(t, b2, broker.RoleConsumer), admin2, "t", "g", &log)
		})
	}
}

// TestShrinkRetiresPartitions: shrinking keeps the removed partitions' records (retired, not
// dropped), a group drains them, and growing again reuses their streams.
func TestShrinkRetiresPartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "s", Partitions: 6, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	p, err := connect(t, b, broker.RoleProducer).NewProducer(ctx, "s", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var log sentLog
	send := func(n int) {
		for i := 0; i < n; i++ {
			rec := client.Record{Key: []byte(fmt.Sprint("k", i))}
			if err := p.Send(ctx, rec, log.done(p.ID(), rec)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	send(300)
	desc, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "s", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if desc.Epochs[1].Ancestry == nil || desc.Epochs[1].Ancestry.Source != "declared" {
		t.Fatalf("jump declares its ancestry (verified): got %+v", desc.Epochs[1].Ancestry)
	}
	send(100)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "s", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	send(100)
	// The retired partitions' records are delivered too: the 500 distinct records, each once
	// (counting deliveries would count a duplicate as one of them).
	res := consumeVerify(t, ctx, connect(t, b, broker.RoleConsumer), admin, "s", "g", &log)
	if g := res.Group("g"); g == nil || g.Distinct != 500 || g.Acked != 500 {
		t.Fatalf("want the 500 records sent, each once:\n%s", res)
	}
}
