package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// missedMarker is the group bucket as a lagging follower answers it: the first get of the
// group's g.created finds nothing, whether or not it exists. Everything else is the real bucket
// on the real server.
type missedMarker struct {
	jetstream.KeyValue
	marker string
	mu     sync.Mutex
	missed bool
}

func (m *missedMarker) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	m.mu.Lock()
	miss := key == m.marker && !m.missed
	if miss {
		m.missed = true
	}
	m.mu.Unlock()
	if miss {
		return nil, jetstream.ErrKeyNotFound
	}
	return m.KeyValue.Get(ctx, key)
}

// joinMissingMarker makes a member of group g whose first get of g.created answers "not found",
// and runs its join.
func joinMissingMarker(t *testing.T, ctx context.Context, c *Client, topic string, opts ConsumerOptions) (*Consumer, error) {
	t.Helper()
	cn, err := c.NewConsumer(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := cn.kv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cn.kvh = &missedMarker{KeyValue: kv, marker: wire.GroupPrefix(cn.topicID, opts.Group) + "g.created"}
	_, err = cn.join(ctx)
	return cn, err
}

// TestJoinCreatesOnlyAProvenAbsentGroup: a member takes the create path only when a write that
// JetStream stores only while g.created has no message proves the group absent (spec/protocol.md
// §6.1, "Proving that the group does not exist"), not on a get that finds nothing (a lagging
// follower answers direct gets). Against a real broker, with every member's first get of g.created
// answering "not found" (what a follower that lags answers):
//   - later-epoch: a group created before a grow (from now) reads the new partition streams from
//     their first record; the member must not create their keys (the old rule created them at the
//     streams' last sequence: the group would skip the 60 records already in them);
//   - from-beginning: a group created from the beginning has no g.start; a member that asks for
//     the current epoch must not create one (the old rule did: the group's start changed);
//   - new group: a group that does not exist is created, with a key for every existing stream;
//   - race: four members create one new group at once; all join, with the one assignor stored.
//
// It fails on the old rule (the get's "not found" taken as absence): later-epoch finds keys for
// partitions 2 and 3, from-beginning finds a g.start.
func TestJoinCreatesOnlyAProvenAbsentGroup(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(role string) *Client {
		c, err := Connect(ctx, Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin, cons := connect(broker.RoleAdmin), connect(broker.RoleConsumer)
	for _, tp := range []string{"grown", "fresh"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: tp, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	produce := func(topic string, n int) {
		p, err := connect(broker.RoleProducer).NewProducer(ctx, topic, ProducerOptions{ID: "p-" + topic})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Close(ctx) }()
		for i := 0; i < n; i++ {
			if _, err := p.Produce(ctx, Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kv, err := admin.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	desc := func(topic string) *wire.Topic {
		d, _, err := admin.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	exists := func(key string) bool {
		_, err := kv.Get(ctx, key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	// The grown topic: groups "now" (from now) and "begin" (from the beginning) exist before the
	// grow to 4 partitions; 60 records go to the new epoch after it.
	produce("grown", 40)
	for _, o := range []ConsumerOptions{{Group: "now", Member: "creator"}, {Group: "begin", Member: "creator", Start: StartBeginning}} {
		cn, err := cons.NewConsumer(ctx, "grown", o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cn.join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "grown", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	produce("grown", 60)
	gd := desc("grown")

	t.Run("later-epoch", func(t *testing.T) {
		if _, err := joinMissingMarker(t, ctx, cons, "grown", ConsumerOptions{Group: "now", Member: "late"}); err != nil {
			t.Fatal(err)
		}
		for q := 2; q < 4; q++ {
			if k := wire.PartitionKey(gd.ID, "now", q); exists(k) {
				e, _ := kv.Get(ctx, k)
				t.Errorf("partition %d (created by the grow, after the group) has a key %s: the group would skip the records before it", q, e.Value())
			}
		}
	})
	t.Run("from-beginning", func(t *testing.T) {
		cn, err := joinMissingMarker(t, ctx, cons, "grown", ConsumerOptions{Group: "begin", Member: "late", Start: StartCurrentEpoch})
		if err != nil {
			t.Fatal(err)
		}
		if k := wire.StartKey(gd.ID, "begin"); exists(k) {
			e, _ := kv.Get(ctx, k)
			t.Errorf("a group created from the beginning has a g.start %s: its start changed", e.Value())
		}
		if cn.startEpoch != 0 {
			t.Errorf("the member reads the group as starting at epoch %d, want the beginning", cn.startEpoch)
		}
	})

	produce("fresh", 30)
	fd := desc("fresh")
	t.Run("new group", func(t *testing.T) {
		if _, err := joinMissingMarker(t, ctx, cons, "fresh", ConsumerOptions{Group: "new", Member: "first", Assignor: wire.AssignorSticky}); err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 2; q++ {
			e, err := kv.Get(ctx, wire.PartitionKey(fd.ID, "new", q))
			if err != nil {
				t.Fatalf("partition %d: %v", q, err)
			}
			var ps wire.PartitionState
			_ = json.Unmarshal(e.Value(), &ps)
			s, err := admin.js.Stream(ctx, wire.StreamName("fresh", q))
			if err != nil {
				t.Fatal(err)
			}
			if want := s.CachedInfo().State.LastSeq; ps.Position != want || want == 0 {
				t.Errorf("partition %d starts at %d, want its last sequence %d (from now)", q, ps.Position, want)
			}
		}
		if !exists(wire.GroupPrefix(fd.ID, "new") + "g.created") {
			t.Error("no g.created")
		}
		if e, err := kv.Get(ctx, wire.AssignorKey(fd.ID, "new")); err != nil || string(e.Value()) != `{"assignor":"sticky"}` {
			t.Errorf("g.assignor: %v %v", e, err)
		}
	})
	t.Run("race", func(t *testing.T) {
		var wg sync.WaitGroup
		got := make([]string, 4)
		errs := make([]error, 4)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := ""
				if i%2 == 1 {
					a = wire.AssignorSticky // two ask for sticky, two take the group's
				}
				cn, err := joinMissingMarker(t, ctx, cons, "fresh", ConsumerOptions{Group: "raced", Member: fmt.Sprint("m", i), Assignor: a})
				if err != nil && !errors.Is(err, wire.ErrConflict) {
					errs[i] = err
					return
				}
				cn.mu.Lock()
				got[i] = cn.assignor
				cn.mu.Unlock()
				if err != nil {
					got[i] = "conflict"
				}
			}()
		}
		wg.Wait()
		e, err := kv.Get(ctx, wire.AssignorKey(fd.ID, "raced"))
		if err != nil {
			t.Fatal(err)
		}
		var st wire.AssignorState
		_ = json.Unmarshal(e.Value(), &st)
		for i, err := range errs {
			if err != nil {
				t.Errorf("member %d: %v", i, err)
			}
			// A member that asked for sticky in a modulo group refuses with conflict; every other
			// member took the stored assignor.
			if want := st.Assignor; got[i] != want && (got[i] != "conflict" || i%2 == 0 || want == wire.AssignorSticky) {
				t.Errorf("member %d joined with %q, the group stored %q", i, got[i], want)
			}
		}
		for q := 0; q < 2; q++ {
			if !exists(wire.PartitionKey(fd.ID, "raced", q)) {
				t.Errorf("partition %d has no key", q)
			}
		}
	})
}
