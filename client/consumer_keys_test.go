package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/partitioner"
)

// groupBroker runs a real embedded broker with a topic of n partitions (kafka-murmur2) and
// returns it with an admin client.
func groupBroker(t *testing.T, topic string, n int) (*broker.Broker, *client.Client) {
	t.Helper()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := thinConnect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(context.Background(), wire.CreateTopicRequest{Topic: topic, Partitions: n, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	return b, admin
}

// keyProducer sends rounds of records for keys k0..k<keys-1> with one producer and remembers
// what it sent, for client/verify.
type keyProducer struct {
	p     *client.Producer
	id    string
	mu    sync.Mutex
	sent  []verify.Sent
	round int
}

func newKeyProducer(t *testing.T, ctx context.Context, b *broker.Broker, topic, id string) *keyProducer {
	t.Helper()
	p, err := thinConnect(t, b, broker.RoleProducer).NewProducer(ctx, topic, client.ProducerOptions{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return &keyProducer{p: p, id: id}
}

// send sends `rounds` rounds of every key and waits for their acknowledgements.
func (kp *keyProducer) send(t *testing.T, ctx context.Context, keys, rounds int) {
	t.Helper()
	for r := 0; r < rounds; r++ {
		for k := 0; k < keys; k++ {
			key := []byte(fmt.Sprint("k", k))
			err := kp.p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprintf("k%d:%d", k, kp.round))}, func(res client.Result) {
				kp.mu.Lock()
				kp.sent = append(kp.sent, verify.Sent{Producer: kp.id, PSeq: res.ProducerSeq, Key: key, Acked: res.Err == nil})
				kp.mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		kp.round++
	}
	if err := kp.p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func (kp *keyProducer) log() []verify.Sent {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return append([]verify.Sent(nil), kp.sent...)
}

// event is one thing a member did, in the order the test saw them.
type event struct {
	kind      string // deliver, revoked-start, revoked-end, assigned
	member    string
	partition int
	parent    int
	epoch     int
	key       string
	moved     func([]byte) bool
}

type eventLog struct {
	mu sync.Mutex
	ev []event
}

func (l *eventLog) add(e event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) deliveries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.kind == "deliver" {
			n++
		}
	}
	return n
}

func (l *eventLog) events() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.ev...)
}

// memberOpts logs a member's deliveries and key-level callbacks; keys-revoked takes `slow`
// (an application flushing the state of the keys it gives up).
func memberOpts(log *eventLog, id string, slow time.Duration) client.ConsumerOptions {
	return client.ConsumerOptions{Group: "g", Member: id, FromBeginning: true, Heartbeat: 200 * time.Millisecond, SessionTimeout: 3 * time.Second,
		OnKeysRevoked: func(kc client.KeyChange) {
			log.add(event{kind: "revoked-start", member: id, partition: kc.Partition, epoch: kc.FromEpoch, moved: kc.Moved})
			time.Sleep(slow)
			log.add(event{kind: "revoked-end", member: id, partition: kc.Partition, epoch: kc.FromEpoch, moved: kc.Moved})
		},
		OnKeysAssigned: func(kc client.KeyChange) {
			log.add(event{kind: "assigned", member: id, partition: kc.Partition, parent: kc.Parent, epoch: kc.ToEpoch, moved: kc.Moved})
		},
	}
}

func (l *eventLog) handler(id string) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		l.add(event{kind: "deliver", member: id, partition: m.Partition, epoch: m.Epoch, key: string(m.Key)})
		return nil
	}
}

// checkHandOver checks DESIGN.md §4's order for every key that moves from epoch 1 to epoch 2
// (old and nu give its partitions, computed with the built-in's native code, not the consumer's
// WASM): the last delivery of its epoch-1 records, then the end of its old partition's
// keys-revoked callback, then its new partition's keys-assigned callback (with that parent),
// then the first delivery of its epoch-2 records. It returns the number of moved keys checked.
func checkHandOver(t *testing.T, ev []event, keys int, old, nu func([]byte) int) int {
	t.Helper()
	moved := 0
	for k := 0; k < keys; k++ {
		key := []byte(fmt.Sprint("k", k))
		q, p := old(key), nu(key)
		if q == p {
			continue
		}
		lastOld, revokedEnd, assigned, firstNew := -1, -1, -1, -1
		for i, e := range ev {
			switch {
			case e.kind == "deliver" && e.key == string(key) && e.epoch == 1:
				lastOld = i
			case e.kind == "revoked-end" && e.partition == q && e.epoch == 1 && revokedEnd < 0:
				revokedEnd = i
				if !e.moved(key) {
					t.Errorf("key %s moves from %d to %d but keys-revoked's Moved says no", key, q, p)
				}
			case e.kind == "assigned" && e.partition == p && e.parent == q && e.epoch == 2 && assigned < 0:
				assigned = i
				if !e.moved(key) {
					t.Errorf("key %s moves from %d to %d but keys-assigned's Moved says no", key, q, p)
				}
			case e.kind == "deliver" && e.key == string(key) && e.epoch == 2 && firstNew < 0:
				firstNew = i
			}
		}
		if firstNew < 0 {
			continue // no epoch-2 record of this key delivered
		}
		moved++
		if !(lastOld < revokedEnd && revokedEnd < assigned && assigned < firstNew) {
			t.Errorf("key %s (%d -> %d): last epoch-1 delivery at event %d, keys-revoked ended at %d, keys-assigned at %d, first epoch-2 delivery at %d: want them in this order",
				key, q, p, lastOld, revokedEnd, assigned, firstNew)
		}
	}
	return moved
}

func murmur(t *testing.T, n int) func([]byte) int {
	f, err := partitioner.Native("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	return func(k []byte) int {
		r, err := f.Partition(k, int32(n))
		if err != nil {
			t.Fatal(err)
		}
		return int(r)
	}
}

// TestKeysAssignedWaitsForKeysRevoked: one member owns the old partition and the new one, and
// its keys-revoked callback takes a second. The new partition's keys-assigned callback must not
// run before keys-revoked has returned (KIP-253: X's keys-revoked, then Y's keys-assigned).
// Failed on the old consumer, which ran keys-assigned as soon as the parent partition's position
// reached the boundary: the commit ticker committed the boundary while keys-revoked still ran.
func TestKeysAssignedWaitsForKeysRevoked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, admin := groupBroker(t, "kc", 1)
	kp := newKeyProducer(t, ctx, b, "kc", "p1")
	const keys = 40
	kp.send(t, ctx, keys, 5)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "kc", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, keys, 5)

	var log eventLog
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "kc", memberOpts(&log, "m", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, log.handler("m")) }()
	waitFor(t, time.Minute, "every record delivered", func() bool { return log.deliveries() >= 10*keys })
	rcancel()
	<-done
	if moved := checkHandOver(t, log.events(), keys, murmur(t, 1), murmur(t, 2)); moved == 0 {
		t.Fatal("no key moved: the test checked nothing")
	}
}

// TestKeysAssignedRunsAfterTheParentIsDrained: the group drains epoch 1 (and passes the fence
// markers) before any record of a moved key arrives in its new partition. The new partition's
// keys-assigned callback must still run before the key's first epoch-2 record. Failed on the old
// consumer, which looked for the key's parent only while the parent epoch was not fully drained,
// and so never ran keys-assigned then.
func TestKeysAssignedRunsAfterTheParentIsDrained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, admin := groupBroker(t, "kd", 1)
	kp := newKeyProducer(t, ctx, b, "kd", "p1")
	const keys = 40
	kp.send(t, ctx, keys, 3)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "kd", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	var log eventLog
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "kd", memberOpts(&log, "m", 0))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, log.handler("m")) }()
	waitFor(t, time.Minute, "epoch 1 delivered", func() bool { return log.deliveries() >= 3*keys })
	// Epoch 1 drained: its boundary (and the marker after it) committed.
	waitFor(t, 30*time.Second, "epoch 1 committed past its boundary", func() bool {
		gs, err := admin.Groups(ctx, "kd")
		if err != nil || len(gs) != 1 {
			return false
		}
		desc, _, err := admin.Topic(ctx, "kd")
		return err == nil && len(gs[0].Positions) > 0 && gs[0].Positions[0] > desc.Epochs[0].Boundaries[0]
	})
	kp.send(t, ctx, keys, 2)
	waitFor(t, time.Minute, "epoch 2 delivered", func() bool { return log.deliveries() >= 5*keys })
	rcancel()
	<-done
	if moved := checkHandOver(t, log.events(), keys, murmur(t, 1), murmur(t, 2)); moved == 0 {
		t.Fatal("no key moved: the test checked nothing")
	}
}

// TestKeyHandOverBetweenMembers: the old partition's owner X and the new partition's owner Y are
// different members (member "a" owns partition 0, "b" partition 1 once both run), X's
// keys-revoked takes a second, and records of both epochs are waiting when the members start.
// KIP-253's order must hold across the members: X delivers all of the old partition's epoch-1
// records, X's keys-revoked returns, Y's keys-assigned runs, Y delivers the key's first epoch-2
// record.
func TestKeyHandOverBetweenMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, admin := groupBroker(t, "kh", 1)
	kp := newKeyProducer(t, ctx, b, "kh", "p1")
	const keys = 40
	kp.send(t, ctx, keys, 5)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "kh", Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, keys, 5)

	var log eventLog
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Until b runs, a owns partition 1 too. a delivers nothing before b has joined and taken
	// partition 1: partition 1's records (all of epoch 2, with keys from partition 0) wait at
	// their gate for a's partition 0 meanwhile, so b delivers them all.
	settled := make(chan struct{})
	for _, id := range []string{"a", "b"} {
		cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "kh", memberOpts(&log, id, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		h := log.handler(id)
		if id == "a" {
			inner := h
			h = func(ctx context.Context, m *client.Message) error {
				select {
				case <-settled:
				case <-ctx.Done():
					return ctx.Err()
				}
				return inner(ctx, m)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cn.Run(rctx, h)
		}()
		time.Sleep(time.Second)
	}
	close(settled)
	waitFor(t, time.Minute, "every record delivered", func() bool { return log.deliveries() >= 10*keys })
	rcancel()
	wg.Wait()
	ev := log.events()
	for _, e := range ev {
		if e.kind == "deliver" && ((e.partition == 0) != (e.member == "a")) {
			t.Fatalf("member %s delivered partition %d: the test wants a on 0 and b on 1", e.member, e.partition)
		}
	}
	if moved := checkHandOver(t, ev, keys, murmur(t, 1), murmur(t, 2)); moved == 0 {
		t.Fatal("no key moved: the test checked nothing")
	}
}
