package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/netproxy"
	"pctl.dev/pctl/internal/testhook"
)

// TestTombstoneResentIntoNewEpochIsHeld (spec/protocol.md §10.2): a tombstone created under the
// descriptor of epoch 1 (delete retention D = 60 s) is still unacknowledged when a repartition
// fences its partition: the producer's connection is frozen while it is sent, the epoch changes,
// then the connection thaws and the publish finds no stream. The producer re-sends it into epoch
// 2 while the backfill is held at its start, under a descriptor that gives tombstones the hold H.
// The stored tombstone in epoch 2 must carry Nats-TTL = H (in seconds), the TTL of the descriptor
// it was re-sent under: with D it would expire during a long backfill, and the copier would then
// copy the key's old value back. Before the fix the re-send kept the first send's headers (D).
func TestTombstoneResentIntoNewEpochIsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const topic = "tz"
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(tp, state string) error {
		if tp != topic || state != "backfill-start" {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: testhook.Steps(hook), Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // before b.Close: the hook must not hold the broker's shutdown
	admin := thinConnect(t, b, broker.RoleAdmin)
	const retentionMS = 60_000
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "jump", Compact: true, DeleteRetentionMS: retentionMS}); err != nil {
		t.Fatal(err)
	}

	px, err := netproxy.New(hostPort(b.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	c := connectVia(t, b, px.Addr(), broker.RoleProducer, 5*time.Second)
	p, err := c.NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	key := []byte("k")
	if _, err := p.Produce(ctx, client.Record{Key: key, Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}

	// The tombstone is created under epoch 1's descriptor and sent into a frozen connection.
	px.Freeze()
	res := make(chan client.Result, 1)
	if err := p.Send(ctx, client.Record{Key: key, Tombstone: true}, func(r client.Result) { res <- r }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the sink writes it into the (frozen) connection
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the backfill did not start")
	}
	desc, _, err := admin.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Current().Epoch != 2 || desc.Compact == nil || desc.Compact.DeleteRetentionMS != wire.TombstoneHoldMS || desc.Compact.HeldRetentionMS != retentionMS {
		t.Fatalf("while the backfill runs the descriptor is epoch %d with %+v, want epoch 2 holding tombstones (%d ms, %d held)", desc.Current().Epoch, desc.Compact, int64(wire.TombstoneHoldMS), retentionMS)
	}
	px.Thaw()

	var r client.Result
	select {
	case r = <-res:
	case <-ctx.Done():
		t.Fatal("the tombstone was never acknowledged")
	}
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Epoch != 2 {
		t.Fatalf("the tombstone was stored in epoch %d (partition %d), want it re-sent into epoch 2: the test did not catch it unacknowledged at the fence", r.Epoch, r.Partition)
	}
	if p.Resent() == 0 {
		t.Fatal("the producer re-sent nothing after the fence")
	}

	_, js := rawConnect(t, b.ClientURL(), b.CredsPath(broker.RoleAdmin))
	s, err := js.Stream(ctx, wire.StreamName(topic, r.Partition))
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, wire.RecordSubject(topic, 2, r.Partition, true, key))
	if err != nil {
		t.Fatalf("the tombstone of epoch 2 is not stored: %v", err)
	}
	if m.Header.Get(wire.HeaderTombstone) != "true" {
		t.Fatalf("the last record of key k in epoch 2 is not a tombstone: %v", m.Header)
	}
	want := "3153600000" // spec/protocol.md §10.2: H = 3,153,600,000,000 ms, in seconds
	if got := m.Header.Get(wire.HeaderTTL); got != want {
		t.Fatalf("the tombstone re-sent into epoch 2 (while its backfill runs) has Nats-TTL %q, want %s (the hold of the descriptor it was re-sent under, not the delete retention %d s it was created with): it can expire before the backfill reaches its key", got, want, retentionMS/1000)
	}
	releaseOnce()
}
