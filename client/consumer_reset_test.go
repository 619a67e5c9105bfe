package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// deliveries records what the members of one test delivered, in one global order.
type deliveries struct {
	mu    sync.Mutex
	order int64
	all   []verify.Delivered
	msgs  []*client.Message
}

func (d *deliveries) handler(group, member string) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		d.mu.Lock()
		d.order++
		d.all = append(d.all, verify.Delivered{Group: group, Member: member, Order: d.order, Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key, NoKey: m.NoKey})
		d.msgs = append(d.msgs, m)
		d.mu.Unlock()
		return nil
	}
}

func (d *deliveries) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.all)
}

// since returns the deliveries from index i on, renamed to group g (a replay is checked as a
// group of its own: every record once, in key order).
func (d *deliveries) since(i int, g string) ([]verify.Delivered, []*client.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := append([]verify.Delivered(nil), d.all[i:]...)
	for j := range out {
		out[j].Group = g
	}
	return out, append([]*client.Message(nil), d.msgs[i:]...)
}

// member runs one group member until stopped.
type member struct {
	cn   *client.Consumer
	stop context.CancelFunc
	done chan error
}

func startMember(t *testing.T, ctx context.Context, b *broker.Broker, topic string, opts client.ConsumerOptions, d *deliveries, group string) *member {
	t.Helper()
	if opts.Heartbeat == 0 {
		opts.Heartbeat = 200 * time.Millisecond
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 3 * time.Second
	}
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	m := &member{cn: cn, stop: cancel, done: make(chan error, 1)}
	go func() { m.done <- cn.Run(rctx, d.handler(group, opts.Member)) }()
	t.Cleanup(func() {
		cancel()
		<-m.done
	})
	return m
}

func (m *member) halt(t *testing.T) {
	t.Helper()
	m.stop()
	if err := <-m.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("member %s: %v", m.cn.Member(), err)
	}
	m.done <- nil // for the cleanup
}

// epochsTopic makes topic `name` with a backlog that spans a grow: 150 rounds of 40 keys in 2
// partitions, then 10 rounds after growing to 6. The new partitions hold only epoch-2 records,
// whose keys' older records are in partitions 0 and 1: a member that does not gate delivers them
// first.
func epochsTopic(t *testing.T, ctx context.Context, name string) (*broker.Broker, *client.Client, *keyProducer) {
	t.Helper()
	b, admin := groupBroker(t, name, 2)
	kp := newKeyProducer(t, ctx, b, name, "p1")
	kp.send(t, ctx, 40, 150)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: name, Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, 40, 10)
	return b, admin, kp
}

// TestSeekToTheBeginningReplaysInKeyOrder: a member drains a backlog that spans a grow, then
// seeks to the beginning: every record of every epoch is delivered again, in key order (the
// gates closed again). The control: a member that keeps its drained-epochs cache across the seek
// (Pulsar's bug) replays the new partitions' records before their keys' older ones, and the same
// check catches it.
func TestSeekToTheBeginningReplaysInKeyOrder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		keepDrained bool
	}{{"gates-reset", false}, {"keeps-drained-set", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			b, _, kp := epochsTopic(t, ctx, "sk")
			total := 160 * 40
			var d deliveries
			opts := client.ConsumerOptions{Group: "g", Member: "m", FromBeginning: true}
			if tc.keepDrained {
				opts = client.KeepDrainedSetAcrossReset(opts)
			}
			m := startMember(t, ctx, b, "sk", opts, &d, "g")
			waitFor(t, 2*time.Minute, "the first pass", func() bool { return d.count() >= total })
			first, _ := d.since(0, "first")
			if r := verify.Check(kp.log(), first, verify.Options{Groups: []string{"first"}, NoDuplicates: true}); !r.OK() {
				t.Fatalf("first pass: %v", r)
			}
			mark := d.count()
			res, err := m.cn.Seek(ctx, client.SeekBeginning)
			if err != nil {
				t.Fatal(err)
			}
			if res.Generation != 1 || len(res.Positions) != 6 {
				t.Fatalf("seek: generation %d, %d positions; want 1 and 6", res.Generation, len(res.Positions))
			}
			waitFor(t, 2*time.Minute, "the replay", func() bool { return d.count() >= mark+total })
			replay, _ := d.since(mark, "replay")
			r := verify.Check(kp.log(), replay, verify.Options{Groups: []string{"replay"}, NoDuplicates: true})
			t.Logf("%v", r)
			if g := m.cn.Generation(); g != 1 {
				t.Errorf("member at generation %d after the seek, want 1", g)
			}
			if !tc.keepDrained && !r.OK() {
				t.Errorf("after a seek the gates close again: the replay must be complete and in key order: %v", r)
			}
			if tc.keepDrained && r.Group("replay").Violations == 0 {
				t.Errorf("a member that keeps its drained set across a seek must replay out of key order, and the check must see it: %v", r)
			}
			if st := m.cn.Stats(); st.Resets != 1 {
				t.Errorf("Stats.Resets = %d, want 1", st.Resets)
			}
		})
	}
}

// TestSeekToTheEndAndToATime: after a seek to the end nothing old is delivered, only what is
// produced afterwards; after a seek to a time, exactly the records stored at or after it, across
// the epoch change, in key order. (Which records are after the time is known from when the test
// produced them: every record of a batch sent after it, none of one acknowledged before it.)
func TestSeekToTheEndAndToATime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, admin := groupBroker(t, "st", 2)
	kp := newKeyProducer(t, ctx, b, "st", "p1")
	kp.send(t, ctx, 40, 20) // 800 records, epoch 1
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	before := len(kp.log())
	kp.send(t, ctx, 40, 10) // 400 records, epoch 1, after mid
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "st", Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, 40, 10) // 400 records, epoch 2
	var d deliveries
	m := startMember(t, ctx, b, "st", client.ConsumerOptions{Group: "g", Member: "m", FromBeginning: true}, &d, "g")
	waitFor(t, time.Minute, "the first pass", func() bool { return d.count() >= 1600 })

	// To the end: nothing old again; then only what comes after.
	if _, err := m.cn.Seek(ctx, client.SeekEnd); err != nil {
		t.Fatal(err)
	}
	mark := d.count()
	time.Sleep(1500 * time.Millisecond)
	if n := d.count() - mark; n != 0 {
		t.Fatalf("%d records delivered after a seek to the end, before anything new was produced", n)
	}
	sentBefore := len(kp.log())
	kp.send(t, ctx, 40, 1)
	waitFor(t, time.Minute, "the records produced after the seek to the end", func() bool { return d.count() >= mark+40 })
	time.Sleep(500 * time.Millisecond)
	got, _ := d.since(mark, "end")
	want := kp.log()[sentBefore:]
	if r := verify.Check(want, got, verify.Options{Groups: []string{"end"}, NoDuplicates: true}); !r.OK() || len(got) != 40 {
		t.Fatalf("after a seek to the end: %d deliveries, want the 40 new records: %v", len(got), r)
	}

	// To a time: the records stored at or after it, of both epochs.
	mark = d.count()
	if _, err := m.cn.Seek(ctx, client.SeekTime(mid)); err != nil {
		t.Fatal(err)
	}
	wantN := len(kp.log()) - before
	waitFor(t, time.Minute, "the records after the time", func() bool { return d.count() >= mark+wantN })
	time.Sleep(500 * time.Millisecond)
	got, _ = d.since(mark, "time")
	if r := verify.Check(kp.log()[before:], got, verify.Options{Groups: []string{"time"}, NoDuplicates: true}); !r.OK() || len(got) != wantN {
		t.Fatalf("after a seek to %v: %d deliveries, want %d (every record sent after it, once, in key order): %v", mid, len(got), wantN, r)
	}
	if g := m.cn.Generation(); g != 2 {
		t.Errorf("generation %d after two seeks, want 2", g)
	}
}

// TestResetterCrashesMidway: a resetter writes the reset (its commit point) and only some of the
// partition keys, then stops as if it had crashed. Members that run follow the reset and move
// the other keys themselves; a member that starts later, with no one running, does too. Either
// way every record is delivered again from the beginning, in key order, and every partition key
// ends at the new generation.
func TestResetterCrashesMidway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, admin, kp := epochsTopic(t, ctx, "rc")
	total := 160 * 40
	resetter := thinConnect(t, b, broker.RoleConsumer)

	t.Run("members-running", func(t *testing.T) {
		var d deliveries
		m1 := startMember(t, ctx, b, "rc", client.ConsumerOptions{Group: "run", Member: "a", FromBeginning: true}, &d, "run")
		m2 := startMember(t, ctx, b, "rc", client.ConsumerOptions{Group: "run", Member: "b", FromBeginning: true}, &d, "run")
		waitFor(t, 2*time.Minute, "the first pass", func() bool { return d.count() >= total })
		time.Sleep(300 * time.Millisecond)
		mark := d.count()
		res, err := resetter.ResetGroupPartially(ctx, "rc", "run", client.SeekBeginning, 1)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Minute, "the replay", func() bool { return d.count() >= mark+total })
		time.Sleep(500 * time.Millisecond)
		replay, _ := d.since(mark, "replay")
		if r := verify.Check(kp.log(), replay, verify.Options{Groups: []string{"replay"}, NoDuplicates: true}); !r.OK() {
			t.Errorf("replay after a resetter crashed midway: %v", r)
		}
		checkKeysAt(t, ctx, admin, "rc", "run", res.Generation)
		for _, m := range []*member{m1, m2} {
			if g := m.cn.Generation(); g != res.Generation {
				t.Errorf("member %s at generation %d, want %d", m.cn.Member(), g, res.Generation)
			}
		}
	})

	t.Run("no-member-running", func(t *testing.T) {
		var d deliveries
		m := startMember(t, ctx, b, "rc", client.ConsumerOptions{Group: "idle", Member: "a", FromBeginning: true}, &d, "idle")
		waitFor(t, 2*time.Minute, "the first pass", func() bool { return d.count() >= total })
		time.Sleep(300 * time.Millisecond)
		m.halt(t)
		res, err := resetter.ResetGroupPartially(ctx, "rc", "idle", client.SeekBeginning, 2)
		if err != nil {
			t.Fatal(err)
		}
		mark := d.count()
		m2 := startMember(t, ctx, b, "rc", client.ConsumerOptions{Group: "idle", Member: "b"}, &d, "idle")
		waitFor(t, 2*time.Minute, "the replay", func() bool { return d.count() >= mark+total })
		time.Sleep(500 * time.Millisecond)
		replay, _ := d.since(mark, "replay")
		if r := verify.Check(kp.log(), replay, verify.Options{Groups: []string{"replay"}, NoDuplicates: true}); !r.OK() {
			t.Errorf("replay by a member started after a resetter crashed midway: %v", r)
		}
		checkKeysAt(t, ctx, admin, "rc", "idle", res.Generation)
		if g := m2.cn.Generation(); g != res.Generation {
			t.Errorf("member at generation %d, want %d", g, res.Generation)
		}
	})
}

// checkKeysAt checks that every partition key of a group is at generation gen.
func checkKeysAt(t *testing.T, ctx context.Context, c *client.Client, topic, group string, gen uint64) {
	t.Helper()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := c.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every partition key at the new generation", func() bool {
		for q := 0; q < desc.MaxPartitions(); q++ {
			e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, group, q))
			if err != nil {
				return false
			}
			var ps wire.PartitionState
			if json.Unmarshal(e.Value(), &ps) != nil || ps.Generation != gen {
				return false
			}
		}
		return true
	}, func() string {
		s := ""
		for q := 0; q < desc.MaxPartitions(); q++ {
			if e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, group, q)); err == nil {
				s += fmt.Sprintf(" p%d=%s", q, e.Value())
			}
		}
		return s
	})
}

// TestSeekFromAHandlerAndConcurrentResets: a handler calls Seek (it must not deadlock: the member
// stops its other deliveries, the handler returns), and two resetters race; the group ends at
// the higher generation, and what it delivers after the last reset is complete and in order.
func TestSeekFromAHandlerAndConcurrentResets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, admin := groupBroker(t, "sh", 3)
	kp := newKeyProducer(t, ctx, b, "sh", "p1")
	kp.send(t, ctx, 30, 20)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "sh", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, 30, 20)
	total := 40 * 30
	var d deliveries
	var seeked atomic.Bool
	var seekErr error
	inner := d.handler("g", "m")
	var gmu sync.Mutex
	var gens3 []bool // per delivery: made at generation 3
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "sh", client.ConsumerOptions{Group: "g", Member: "m", FromBeginning: true, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mark atomic.Int64
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
			g := cn.Generation()
			gmu.Lock()
			if err := inner(ctx, m); err != nil {
				gmu.Unlock()
				return err
			}
			gens3 = append(gens3, g == 3)
			gmu.Unlock()
			if d.count() >= 100 && seeked.CompareAndSwap(false, true) {
				_, seekErr = cn.Seek(ctx, client.SeekBeginning)
				mark.Store(int64(d.count()))
			}
			return nil
		})
	}()
	waitFor(t, time.Minute, "the seek from the handler", func() bool { return mark.Load() > 0 })
	if seekErr != nil {
		t.Fatal(seekErr)
	}
	// Two resets at once, from two clients: both commit, one on top of the other.
	r1 := thinConnect(t, b, broker.RoleConsumer)
	r2 := thinConnect(t, b, broker.RoleConsumer)
	var wg sync.WaitGroup
	gens := make([]uint64, 2)
	for i, r := range []*client.Client{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.ResetGroup(ctx, "sh", "g", client.SeekBeginning)
			if err != nil {
				t.Error(err)
				return
			}
			gens[i] = res.Generation
		}()
	}
	wg.Wait()
	if !(gens[0] != gens[1] && max(gens[0], gens[1]) == 3) {
		t.Fatalf("concurrent resets got generations %v; want 2 and 3", gens)
	}
	at3 := func() int {
		gmu.Lock()
		defer gmu.Unlock()
		n := 0
		for _, ok := range gens3 {
			if ok {
				n++
			}
		}
		return n
	}
	waitFor(t, time.Minute, "the replay after the last reset", func() bool { return at3() >= total })
	time.Sleep(500 * time.Millisecond)
	rcancel()
	<-done
	// Deliveries between the last commit point and the member seeing it belong to the time
	// before it; what the member delivered at generation 3 is the whole topic, once, in order.
	all, _ := d.since(0, "last")
	var got []verify.Delivered
	gmu.Lock()
	for i, ok := range gens3 {
		if ok {
			got = append(got, all[i])
		}
	}
	gmu.Unlock()
	if r := verify.Check(kp.log(), got, verify.Options{Groups: []string{"last"}, NoDuplicates: true}); !r.OK() {
		t.Errorf("after the last reset: %v", r)
	}
}
