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
	"pctl.dev/pctl/partitioner"
)

// TestKeyLevelCallbacks checks DESIGN.md §4's hand-over order for every key that moves at an
// epoch change: the old owner delivers all of the old partition's old-epoch records, then its
// "keys revoked" callback runs, then the new owner's "keys assigned" callback runs, then the new
// owner delivers the key's first new-epoch record; and the Moved predicates tell moved keys apart.
func TestKeyLevelCallbacks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	// linear-murmur2 from 2 to 3 partitions splits partition 0 into 0 and 2.
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "cb", Partitions: 2, Partitioner: "linear-murmur2"}); err != nil {
		t.Fatal(err)
	}
	p, err := connect(t, b, broker.RoleProducer).NewProducer(ctx, "cb", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := 40
	send := func() {
		for i := 0; i < 200; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%keys))}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	send()
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "cb", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	send()
	f, _ := partitioner.Native("linear-murmur2")
	old := func(k []byte) int { r, _ := f.Partition(k, 2); return int(r) }
	nu := func(k []byte) int { r, _ := f.Partition(k, 3); return int(r) }

	type event struct {
		kind      string // deliver, revoked, assigned
		member    string
		partition int
		parent    int
		epoch     int
		key       string
		moved     func([]byte) bool
	}
	var mu sync.Mutex
	var log []event
	add := func(e event) {
		mu.Lock()
		log = append(log, e)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	delivered := make(chan struct{}, 1000)
	rctx, rcancel := context.WithCancel(ctx)
	for _, id := range []string{"a", "b", "c"} {
		c := connect(t, b, broker.RoleConsumer)
		cn, err := c.NewConsumer(ctx, "cb", client.ConsumerOptions{Group: "g", Member: id, FromBeginning: true, Heartbeat: 50 * time.Millisecond,
			OnKeysRevoked: func(kc client.KeyChange) {
				add(event{kind: "revoked", member: id, partition: kc.Partition, epoch: kc.FromEpoch, moved: kc.Moved})
			},
			OnKeysAssigned: func(kc client.KeyChange) {
				add(event{kind: "assigned", member: id, partition: kc.Partition, parent: kc.Parent, epoch: kc.ToEpoch, moved: kc.Moved})
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
				add(event{kind: "deliver", member: id, partition: m.Partition, epoch: m.Epoch, key: string(m.Key)})
				delivered <- struct{}{}
				return nil
			})
		}()
	}
	for i := 0; i < 400; i++ {
		select {
		case <-delivered:
		case <-ctx.Done():
			t.Fatalf("delivered %d of 400", i)
		}
	}
	rcancel()
	wg.Wait()

	moved := 0
	for k := 0; k < keys; k++ {
		key := []byte(fmt.Sprint("k", k))
		q, pn := old(key), nu(key)
		if q == pn {
			continue
		}
		moved++
		lastOld, revoked, assigned, firstNew := -1, -1, -1, -1
		for i, e := range log {
			switch {
			case e.kind == "deliver" && e.key == string(key) && e.epoch == 1:
				lastOld = i
			case e.kind == "revoked" && e.partition == q && e.epoch == 1 && revoked < 0:
				revoked = i
				if !e.moved(key) {
					t.Errorf("key %s moves from %d to %d but keys-revoked's Moved says no", key, q, pn)
				}
			case e.kind == "assigned" && e.partition == pn && e.parent == q && assigned < 0:
				assigned = i
				if !e.moved(key) {
					t.Errorf("key %s moves from %d to %d but keys-assigned's Moved says no", key, q, pn)
				}
			case e.kind == "deliver" && e.key == string(key) && e.epoch == 2 && firstNew < 0:
				firstNew = i
			}
		}
		if !(lastOld >= 0 && lastOld < revoked && revoked < assigned && assigned < firstNew) {
			t.Errorf("key %s (%d -> %d): last old delivery at %d, revoked at %d, assigned at %d, first new delivery at %d: want strictly increasing",
				key, q, pn, lastOld, revoked, assigned, firstNew)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved: the test checked nothing")
	}
	// A key that stays is not "moved" for its partition's revocation.
	for _, e := range log {
		if e.kind == "revoked" {
			for k := 0; k < keys; k++ {
				key := []byte(fmt.Sprint("k", k))
				if old(key) == e.partition && nu(key) == e.partition && e.moved(key) {
					t.Errorf("key %s stays in %d but keys-revoked's Moved says it moves", key, e.partition)
				}
			}
		}
	}
	t.Logf("%d keys moved; %d events", moved, len(log))
}
