package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestStartUpKeepsSubjectsMovedByAChange: a broker stops right after an epoch change fenced the
// topic's streams (moved them to the new epoch's subjects) and before activation, with the
// streams' fast batches turned off (a stream of an older pctl). The next start updates old
// streams to allow_batched and resumes the change; the update must not write back a subject the
// change moved on from: every stream ends bound to epoch 2, with fast batches, and a producer
// stores records under epoch 2.
func TestStartUpKeepsSubjectsMovedByAChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic, partitions = "startup", 2
	dir := t.TempDir()
	var admin *client.Client
	stop := errors.New("test: the broker stops after the fence step")
	b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
		Testing: testhook.Steps(func(name, state string) error {
			if name != topic || state != "fenced" {
				return nil
			}
			for q := 0; q < partitions; q++ {
				s, err := admin.JetStream().Stream(ctx, wire.StreamName(topic, q))
				if err != nil {
					return err
				}
				cfg := s.CachedInfo().Config
				cfg.AllowBatchPublish = false
				if _, err := admin.JetStream().UpdateStream(ctx, cfg); err != nil {
					return err
				}
			}
			return stop
		})})
	if err != nil {
		t.Fatal(err)
	}
	admin = connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitioner: "linear-murmur2"}); err == nil {
		t.Fatal("the change was not stopped by the step hook")
	}
	admin.Close()
	b.Close()

	b = startBroker(t, dir)
	defer b.Close()
	admin = connect(t, b, broker.RoleAdmin)
	var d *wire.Topic
	for {
		d, _, err = admin.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if d.Change == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the change was not resumed: %+v", d.Change)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d.Current().Epoch != 2 {
		t.Fatalf("current epoch %d, want 2", d.Current().Epoch)
	}
	for q := 0; q < partitions; q++ {
		var cfg jetstream.StreamConfig
		for {
			s, err := admin.JetStream().Stream(ctx, wire.StreamName(topic, q))
			if err != nil {
				t.Fatal(err)
			}
			cfg = s.CachedInfo().Config
			if cfg.AllowBatchPublish || ctx.Err() != nil {
				break
			}
			time.Sleep(50 * time.Millisecond) // the start-up update runs after the resumed change
		}
		if want := wire.DataSubject(topic, 2, q); len(cfg.Subjects) != 1 || cfg.Subjects[0] != want {
			t.Errorf("partition %d: bound to %v, want [%s] (the fence moved it there)", q, cfg.Subjects, want)
		}
		if !cfg.AllowBatchPublish {
			t.Errorf("partition %d: fast batches still off after the start", q)
		}
	}
	p, err := connect(t, b, broker.RoleProducer).NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Produce(ctx, client.Record{Key: []byte("k"), Value: []byte("v")})
	if err != nil || r.Epoch != 2 {
		t.Fatalf("produce after the start: %+v, %v", r, err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
