package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/natscluster"
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := internalTestBroker(t, ctx)
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

// followerMarker is the group bucket with the first get of g.created answered by the member's
// own server: the same direct get as the bucket's, sent until an answer comes within 20 ms. A
// client's request to the direct-get queue group reaches a replica picked at random (its own
// server's or, through a route, another's); with the server's routes frozen only its own answers
// arrive in time. Every other request is the real bucket's.
type followerMarker struct {
	jetstream.KeyValue
	nc     *nats.Conn
	marker string
	mu     sync.Mutex
	first  error // the first get's answer (nil: found)
	got    bool
}

func (m *followerMarker) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	m.mu.Lock()
	first := key == m.marker && !m.got
	m.got = m.got || first
	m.mu.Unlock()
	if !first {
		return m.KeyValue.Get(ctx, key)
	}
	subj := "$JS.API.DIRECT.GET.KV_" + wire.GroupsBucket + ".$KV." + wire.GroupsBucket + "." + key
	for ctx.Err() == nil {
		msg, err := m.nc.Request(subj, nil, 20*time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			continue // a replica behind a frozen route: its answer comes after the thaw
		}
		if err == nil && msg.Header.Get("Status") == "404" {
			err = jetstream.ErrKeyNotFound
		}
		m.mu.Lock()
		m.first = err
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return m.KeyValue.Get(ctx, key)
	}
	return nil, ctx.Err()
}

// TestJoinOnALaggingFollowerCreatesNothing: the same rule on a real 3-node cluster of nats-server
// processes (R3 group bucket, direct gets allowed), with a follower that lags for real. The
// member is connected to follower F, whose routes are frozen (internal/natscluster: bytes held,
// delivered in order on thaw) while another client writes a group created from the beginning
// (partition keys at 0 and g.created, no g.start) on the stream leader and the other follower.
// The member then joins asking for the current epoch: its direct get of g.created is answered by
// F, from F's state, "not found" (followerMarker: the get is sent until F's own answer comes; the
// test checks it was "not found"). The old rule took that for absence
// and created g.start (stored once F's routes thaw: the group's start changed); the rule of
// spec/protocol.md §6.1 writes g.assignor on the condition that g.created has no message, which
// the leader refuses, and the member joins the group as it is.
func TestJoinOnALaggingFollowerCreatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node process cluster")
	}
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, ProxiedRoutes: true, Logf: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connect := func(url string) *Client {
		cl, err := Connect(ctx, Options{URL: url, Creds: c.Creds(), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := connect(c.ClientURLs())
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	desc, _, err := admin.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// F: a follower of the group bucket that is not the meta leader (its consumers, the member's
	// watch among them, are placed by the meta leader, which must stay reachable).
	bucket := "KV_" + wire.GroupsBucket
	leader, err := c.StreamLeader(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := c.MetaLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := -1
	for i := 0; i < 3; i++ {
		if i != leader && i != meta {
			f = i
			break
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	writer := connect(c.NodeURL(leader))
	wkv, err := writer.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	onF := connect(c.NodeURL(f))
	// A follower joins the direct-get queue group on a 2-second tick once it is current: wait
	// until F answers a direct get with its routes frozen (only its own answers can arrive).
	probe := "$JS.API.DIRECT.GET.KV_" + wire.GroupsBucket + ".$KV." + wire.GroupsBucket + "." + wire.GroupPrefix(desc.ID, "probe") + "g.created"
	for serves := false; !serves; {
		if ctx.Err() != nil {
			t.Fatal("the follower never answered a direct get of the group bucket itself")
		}
		if err := c.FreezeRoutes(f); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 25 && !serves; i++ {
			_, err := onF.nc.Request(probe, nil, 20*time.Millisecond)
			serves = err == nil
		}
		if err := c.ThawRoutes(f); err != nil {
			t.Fatal(err)
		}
		if !serves {
			time.Sleep(500 * time.Millisecond)
		}
	}
	group := "g"
	cn, err := onF.NewConsumer(ctx, "t", ConsumerOptions{Group: group, Member: "late", Start: StartCurrentEpoch})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := cn.kv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	marker := wire.GroupPrefix(desc.ID, group) + "g.created"
	rec := &followerMarker{KeyValue: kv, nc: onF.nc, marker: marker}
	cn.kvh = rec
	if err := c.FreezeRoutes(f); err != nil {
		t.Fatal(err)
	}
	// The group, created from the beginning (as a member with Start: StartBeginning creates it),
	// on the leader and the follower that is not frozen.
	for q := 0; q < 2; q++ {
		if _, err := wkv.Create(ctx, wire.PartitionKey(desc.ID, group, q), []byte(`{"position":0}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := wkv.Create(ctx, marker, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cn.join(ctx)
		done <- err
	}()
	time.Sleep(time.Second) // the join's first requests reach F (and, through F, wait for its routes)
	if err := c.ThawRoutes(f); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	first := rec.first
	rec.mu.Unlock()
	if !errors.Is(first, jetstream.ErrKeyNotFound) {
		t.Fatalf("the first get of g.created answered %v, not the lagging follower's \"not found\": the test did not make the case it is about", first)
	}
	if e, err := wkv.Get(ctx, wire.StartKey(desc.ID, group)); err == nil {
		t.Errorf("a group created from the beginning has a g.start %s: its start changed", e.Value())
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	if cn.startEpoch != 0 {
		t.Errorf("the member reads the group as starting at epoch %d, want the beginning", cn.startEpoch)
	}
}
