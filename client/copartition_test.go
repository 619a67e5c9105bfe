package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// coLog records what a co-partitioned run did: every delivery (per topic, for client/verify, and
// which members handled each key) and every assignment record of either topic, in the group
// bucket's order.
type coLog struct {
	mu        sync.Mutex
	order     int64
	delivered map[string][]verify.Delivered // topic -> deliveries
	who       map[string]map[string]bool    // key -> members that handled it, in any topic
	records   []coRecord
}

type coRecord struct {
	topic string
	a     wire.Assignment
}

func (l *coLog) handler(member string) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.order++
		l.delivered[m.Topic] = append(l.delivered[m.Topic], verify.Delivered{Group: m.Topic, Member: member, Order: l.order,
			Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key})
		k := string(m.Key)
		if l.who[k] == nil {
			l.who[k] = map[string]bool{}
		}
		l.who[k][member] = true
		return nil
	}
}

func (l *coLog) count(topic string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.delivered[topic])
}

// watchRecords appends every assignment record of the topics' group to l, in the bucket's order
// (one stream: a total order of the writes of both topics).
func (l *coLog) watchRecords(t *testing.T, ctx context.Context, admin *client.Client, group string, topics ...string) {
	t.Helper()
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]string{}
	var keys []string
	for _, tp := range topics {
		d, _, err := admin.Topic(ctx, tp)
		if err != nil {
			t.Fatal(err)
		}
		k := wire.AssignmentKey(d.ID, group)
		byKey[k] = tp
		keys = append(keys, k)
	}
	w, err := kv.WatchFiltered(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			var a wire.Assignment
			if json.Unmarshal(e.Value(), &a) != nil {
				continue
			}
			l.mu.Lock()
			l.records = append(l.records, coRecord{topic: byKey[e.Key()], a: a})
			l.mu.Unlock()
		}
	}()
}

// checkCoRecords is the co-partitioning checker: after every recorded assignment, with each
// topic's latest record so far, every partition p that both records hold, at the same partition
// count (each record's own epoch, per the final descriptors) and over the same members, must have
// one owner in both. (A membership change is written to the lead first and reaches the follower
// at its leader's next rebalance: a pair over different members is a change in flight.) It
// returns the violations and how many record pairs were comparable.
func checkCoRecords(records []coRecord, descs map[string]*wire.Topic, a, b string) (bad []string, compared int) {
	latest := map[string]*wire.Assignment{}
	for i := range records {
		r := records[i]
		latest[r.topic] = &r.a
		ra, rb := latest[a], latest[b]
		if ra == nil || rb == nil {
			continue
		}
		ea, eb := descs[a].Epoch(ra.Epoch), descs[b].Epoch(rb.Epoch)
		if ea == nil || eb == nil || ea.Partitions != eb.Partitions || !equalStrings(ra.Members, rb.Members) {
			continue
		}
		compared++
		for _, p := range ra.Partitions {
			oa, ob := ra.Owner(p), rb.Owner(p)
			if ob == "" {
				continue
			}
			if oa != ob {
				bad = append(bad, fmt.Sprintf("after record %d (%s round %d): partition %d of %s is %s's, of %s %s's (both at %d partitions)",
					i, r.topic, r.a.Round, p, a, oa, b, ob, ea.Partitions))
			}
		}
	}
	return bad, compared
}

// checkKeysStay reports every key handled by more than one member (in either topic).
func (l *coLog) checkKeysStay() (moved []string, keys int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, ms := range l.who {
		keys++
		if len(ms) > 1 {
			var names []string
			for m := range ms {
				names = append(names, m)
			}
			sort.Strings(names)
			moved = append(moved, fmt.Sprintf("%s by %v", k, names))
		}
	}
	sort.Strings(moved)
	return moved, keys
}

// coRun is one co-partitioned run on a real broker: `members` members of group g over topics
// "in" (the lead) and "cl", both linear hashing at 4 partitions; the topics are grown to 8 in the
// given order, with a round of records of every key in both topics before, between and after.
type coRun struct {
	t       *testing.T
	ctx     context.Context
	b       *broker.Broker
	admin   *client.Client
	log     *coLog
	pin     *keyProducer
	pcl     *keyProducer
	keys    int
	stops   []func()
	sentTo  map[string]int
	mod     func(client.ConsumerOptions) client.ConsumerOptions
	conns   map[string]*client.Client
	dead    map[string]bool
	session time.Duration
}

// crash closes a member's connection without a release: its leases expire, the group drops it.
func (r *coRun) crash(member string) {
	r.dead[member] = true
	r.conns[member].Close()
}

// add starts a member.
func (r *coRun) add(member string) {
	t := r.t
	opts := client.ConsumerOptions{Group: "g", Member: member, FromBeginning: true,
		Heartbeat: 100 * time.Millisecond, SessionTimeout: r.session, Logf: quietLogf(t)}
	if r.mod != nil {
		opts = r.mod(opts)
	}
	conn := thinConnect(t, r.b, broker.RoleConsumer)
	r.conns[member] = conn
	cc, err := conn.NewCoConsumer(r.ctx, []string{"in", "cl"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	go func() { done <- cc.Run(cctx, r.log.handler(member)) }()
	r.stops = append(r.stops, func() {
		stop()
		if err := <-done; err != nil && !r.dead[member] {
			t.Errorf("member %s: %v", member, err)
		}
	})
}

func startCoRun(t *testing.T, ctx context.Context, members, keys int, mod func(client.ConsumerOptions) client.ConsumerOptions) *coRun {
	t.Helper()
	b, admin := groupBroker(t, "unused", 1)
	for _, tp := range []string{"in", "cl"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: tp, Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	r := &coRun{t: t, ctx: ctx, b: b, admin: admin, keys: keys, sentTo: map[string]int{}, conns: map[string]*client.Client{}, dead: map[string]bool{},
		log: &coLog{delivered: map[string][]verify.Delivered{}, who: map[string]map[string]bool{}}}
	r.mod = mod
	r.session = 6 * time.Second
	r.log.watchRecords(t, ctx, admin, "g", "in", "cl")
	for i := 0; i < members; i++ {
		r.add(string(rune('a' + i)))
	}
	t.Cleanup(func() {
		for _, s := range r.stops {
			s()
		}
	})
	r.settle(members)
	r.pin = newKeyProducer(t, ctx, b, "in", "pin")
	r.pcl = newKeyProducer(t, ctx, b, "cl", "pcl")
	return r
}

// settle waits until both topics' records name every member and every lease follows them.
func (r *coRun) settle(members int) {
	r.t.Helper()
	settle(r.t, r.ctx, r.admin, "in", "g", members)
	settle(r.t, r.ctx, r.admin, "cl", "g", members)
}

// round sends one record of every key to both topics and waits until both are delivered.
func (r *coRun) round() {
	r.t.Helper()
	r.pin.send(r.t, r.ctx, r.keys, 1)
	r.pcl.send(r.t, r.ctx, r.keys, 1)
	r.sentTo["in"] += r.keys
	r.sentTo["cl"] += r.keys
	waitFor(r.t, 30*time.Second, "a round of records in both topics", func() bool {
		return r.log.count("in") >= r.sentTo["in"] && r.log.count("cl") >= r.sentTo["cl"]
	})
}

func (r *coRun) grow(topic string, n, members int) {
	r.t.Helper()
	if _, err := r.admin.Repartition(r.ctx, wire.RepartitionRequest{Topic: topic, Partitions: n}); err != nil {
		r.t.Fatal(err)
	}
	r.settle(members)
}

// verdict runs every checker and returns what they found.
func (r *coRun) verdict() (recBad []string, compared int, moved []string, keys int, order []*verify.Result) {
	descs := map[string]*wire.Topic{}
	for _, tp := range []string{"in", "cl"} {
		d, _, err := r.admin.Topic(r.ctx, tp)
		if err != nil {
			r.t.Fatal(err)
		}
		descs[tp] = d
	}
	time.Sleep(200 * time.Millisecond) // the record watch's last updates
	r.log.mu.Lock()
	records := append([]coRecord(nil), r.log.records...)
	r.log.mu.Unlock()
	recBad, compared = checkCoRecords(records, descs, "in", "cl")
	moved, keys = r.log.checkKeysStay()
	r.log.mu.Lock()
	din, dcl := append([]verify.Delivered(nil), r.log.delivered["in"]...), append([]verify.Delivered(nil), r.log.delivered["cl"]...)
	r.log.mu.Unlock()
	order = []*verify.Result{verify.Check(r.pin.log(), din, verify.Options{Groups: []string{"in"}}),
		verify.Check(r.pcl.log(), dcl, verify.Options{Groups: []string{"cl"}})}
	return
}

// A co-partitioned group on a real broker: members over an input ("in", the lead) and a
// changelog ("cl"), both linear hashing at 4 partitions, grown to 8 one after the other, in both
// orders (the changelog first with 4 members). At every recorded assignment, partition p of both
// topics has one owner whenever both records are at one count; no key is handled by two members
// in the whole run (no key's state moved: an expansion with linear hashing under the sticky
// record moves none, and the topic that is behind follows); per-key order holds and nothing is
// lost in either topic. PCTL_COPART_KEYS sets the number of keys (default 120).
//
// On the old code there is no co-partitioned group (two sticky groups on two topics agree only
// while their histories do); TestCoPartitionedChecksCatchAWrongAssignment shows the checks fail
// on a follower whose owners are rotated.
func TestCoPartitionedExpansion(t *testing.T) {
	keys := 120
	if s := os.Getenv("PCTL_COPART_KEYS"); s != "" {
		keys, _ = strconv.Atoi(s)
	}
	for _, tc := range []struct {
		name    string
		members int
		order   []string
	}{
		{"input-first", 2, []string{"in", "cl"}},
		{"changelog-first", 4, []string{"cl", "in"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			r := startCoRun(t, ctx, tc.members, keys, nil)
			r.round()
			r.grow(tc.order[0], 8, tc.members)
			r.round()
			r.grow(tc.order[1], 8, tc.members)
			r.round()
			recBad, compared, moved, nkeys, res := r.verdict()
			for _, s := range recBad {
				t.Error(s)
			}
			if compared == 0 {
				t.Errorf("no pair of records at one count was compared: the checker saw nothing")
			}
			if len(moved) > 0 {
				t.Errorf("%d of %d keys were handled by more than one member (their state moved): %v", len(moved), nkeys, moved[:min(5, len(moved))])
			}
			for _, o := range res {
				if !o.OK() {
					t.Errorf("order or loss: %s", o)
				}
			}
			t.Logf("%d record pairs compared, %d keys on one member each, %d records in and %d in cl delivered",
				compared, nkeys, r.sentTo["in"], r.sentTo["cl"])
		})
	}
}

// A member that joins between the two expansions (input grown with 2 members, a third joins,
// then the changelog grows): keys move to the new member, as a join must, and the topics still
// agree partition by partition at every recorded assignment over one membership and count. Two
// independent sticky groups (the old code's only way: IndependentCoPartitioned, the control) have
// different histories here and disagree: the control must fail the record check.
func TestCoPartitionedJoinBetweenExpansions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		independent bool
	}{{"copartitioned", false}, {"control-independent-sticky", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			var mod func(client.ConsumerOptions) client.ConsumerOptions
			if tc.independent {
				mod = client.IndependentCoPartitioned
			}
			r := startCoRun(t, ctx, 2, 60, mod)
			r.round()
			r.grow("in", 8, 2)
			r.add("c")
			r.settle(3)
			r.round()
			r.grow("cl", 8, 3)
			r.round()
			recBad, compared, _, _, res := r.verdict()
			for _, o := range res {
				if !o.OK() {
					t.Errorf("order or loss: %s", o)
				}
			}
			if compared == 0 {
				t.Fatalf("no pair of records at one count was compared: the checker saw nothing")
			}
			switch {
			case tc.independent && len(recBad) == 0:
				t.Errorf("the record checker passed two independent sticky groups whose histories differ")
			case tc.independent:
				t.Logf("control caught: %d violations, e.g. %s", len(recBad), recBad[0])
			default:
				for _, s := range recBad {
					t.Error(s)
				}
				t.Logf("%d record pairs compared", compared)
			}
		})
	}
}

// A member of a co-partitioned group crashes (its connection closes, no release) after both
// topics were grown: the lead's record drops it and the follower follows, so the topics agree
// again partition by partition over the two members left; per-key order holds and nothing is
// lost (records the crashed member delivered and did not commit come again, in order).
func TestCoPartitionedMemberCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r := startCoRun(t, ctx, 3, 60, func(o client.ConsumerOptions) client.ConsumerOptions {
		o.SessionTimeout = 4 * time.Second
		return o
	})
	r.round()
	r.grow("in", 8, 3)
	r.grow("cl", 8, 3)
	r.round()
	r.crash("b")
	r.settle(2)
	r.round()
	recBad, compared, _, _, res := r.verdict()
	for _, s := range recBad {
		t.Error(s)
	}
	for _, o := range res {
		if !o.OK() {
			t.Errorf("order or loss: %s", o)
		}
	}
	final := readRecord(t, ctx, r.admin, "cl", "g")
	if len(final.Members) != 2 {
		t.Errorf("the follower's record after the crash names %v, want the two members left", final.Members)
	}
	t.Logf("%d record pairs compared; the follower's last record: members %v, owners %v", compared, final.Members, final.Owners)
}

// The control: the same checks on a run whose follower's owners are rotated by one (a wrong
// assignment) find partitions with two owners and keys handled by two members.
func TestCoPartitionedChecksCatchAWrongAssignment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startCoRun(t, ctx, 2, 60, func(o client.ConsumerOptions) client.ConsumerOptions { return client.SkewCoPartitioned(o, 1) })
	r.round()
	recBad, _, moved, _, _ := r.verdict()
	if len(recBad) == 0 {
		t.Errorf("the record checker passed a follower whose owners are rotated")
	}
	if len(moved) == 0 {
		t.Errorf("the key checker passed a follower whose owners are rotated")
	}
	t.Logf("caught: %d record violations (%s), %d keys on two members", len(recBad), first(recBad), len(moved))
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// A co-partitioned group refuses what cannot be co-partitioned: topics with different partition
// functions (bad_request), a plain member in a co-partitioned group and a co-partitioned member
// in a plain group or over another topic list (conflict), and the assignor name on a plain
// consumer (bad_request). No refused member writes a member key.
func TestCoPartitionedRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "other", 4) // kafka-murmur2
	for _, tp := range []string{"in", "cl", "cl2"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: tp, Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	c := thinConnect(t, b, broker.RoleConsumer)
	opts := func(member string) client.ConsumerOptions {
		return client.ConsumerOptions{Group: "g", Member: member, Heartbeat: 100 * time.Millisecond, Logf: quietLogf(t)}
	}
	briefly := func(run func(context.Context) error) error {
		rctx, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		return run(rctx)
	}
	nop := func(context.Context, *client.Message) error { return nil }

	if _, err := c.NewCoConsumer(ctx, []string{"in", "other"}, opts("m1")); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("co-partitioning linear-murmur2 with kafka-murmur2: %v, want bad_request", err)
	} else {
		t.Logf("refused: %v", err)
	}
	if _, err := c.NewConsumer(ctx, "in", client.ConsumerOptions{Group: "g", Assignor: client.AssignorCopartitioned}); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("a plain consumer asking for the copartitioned assignor: %v, want bad_request", err)
	}
	cc, err := c.NewCoConsumer(ctx, []string{"in", "cl"}, opts("m1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := briefly(func(x context.Context) error { return cc.Run(x, nop) }); err != nil {
		t.Fatalf("a co-partitioned member: %v", err)
	}
	plain, err := c.NewConsumer(ctx, "cl", opts("m2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := briefly(func(x context.Context) error { return plain.Run(x, nop) }); !errors.Is(err, wire.ErrConflict) {
		t.Errorf("a plain member joining the co-partitioned group: %v, want conflict", err)
	} else {
		t.Logf("refused: %v", err)
	}
	other, err := c.NewCoConsumer(ctx, []string{"in", "cl2"}, opts("m3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := briefly(func(x context.Context) error { return other.Run(x, nop) }); !errors.Is(err, wire.ErrConflict) {
		t.Errorf("a co-partitioned member over another topic list: %v, want conflict", err)
	} else {
		t.Logf("refused: %v", err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"in", "cl"} {
		d, _, _ := admin.Topic(ctx, tp)
		if _, err := kv.Get(ctx, wire.MemberKey(d.ID, "g", "m2")); err == nil && tp == "cl" {
			t.Errorf("the refused plain member wrote a member key in %s", tp)
		}
		e, err := kv.Get(ctx, wire.AssignorKey(d.ID, "g"))
		if err != nil || string(e.Value()) != `{"assignor":"copartitioned","topics":["in","cl"]}` {
			t.Errorf("topic %s's assignor key: %v %v", tp, e, err)
		}
	}
}
