package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// standbyGroup runs a sticky group's members and standbys on a real broker, each on its own
// connection, so that one can be killed (its connection closed, no clean leave).
type standbyGroup struct {
	t       *testing.T
	ctx     context.Context
	b       *broker.Broker
	admin   *client.Client
	topic   string
	session time.Duration
	conns   map[string]*client.Client
	dead    map[string]bool
	stops   []func()
}

func newStandbyGroup(t *testing.T, ctx context.Context, topic string, session time.Duration) *standbyGroup {
	b, admin := groupBroker(t, topic, 4)
	g := &standbyGroup{t: t, ctx: ctx, b: b, admin: admin, topic: topic, session: session, conns: map[string]*client.Client{}, dead: map[string]bool{}}
	t.Cleanup(func() {
		for i := len(g.stops) - 1; i >= 0; i-- {
			g.stops[i]()
		}
	})
	return g
}

func (g *standbyGroup) run(member string, wu *client.WarmUp) {
	t := g.t
	conn := thinConnect(t, g.b, broker.RoleConsumer)
	g.conns[member] = conn
	cn, err := conn.NewConsumer(g.ctx, g.topic, client.ConsumerOptions{Group: "g", Member: member, Assignor: wire.AssignorSticky,
		Heartbeat: 100 * time.Millisecond, SessionTimeout: g.session, WarmUp: wu, Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(g.ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, func(context.Context, *client.Message) error { return nil }) }()
	g.stops = append(g.stops, func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !g.dead[member] {
			t.Errorf("member %s: %v", member, err)
		}
	})
}

// kill closes a member's connection without a clean leave (a crash: its keys stay behind).
func (g *standbyGroup) kill(member string) {
	g.dead[member] = true
	g.conns[member].Close()
}

func (g *standbyGroup) standbys() []client.Standby {
	sb, err := g.admin.Standbys(g.ctx, g.topic)
	if err != nil {
		g.t.Fatal(err)
	}
	return sb["g"]
}

// waitStandbys polls Standbys until ok holds: a key listing of the bucket can miss a key re-put
// while it runs (the standbys re-put theirs every heartbeat), so one listing proves nothing.
func (g *standbyGroup) waitStandbys(what string, ok func([]client.Standby) bool) {
	g.t.Helper()
	var last []client.Standby
	waitFor(g.t, 3*time.Second, what, func() bool { last = g.standbys(); return ok(last) }, func() string { return fmt.Sprintf("%+v", last) })
}

// A standby that crashes while it warms (spec/protocol.md §6.10, step 1: a w. key older than the
// session timeout is gone) gives its slot up: two standbys c and d warm at the limit (2), e waits;
// c's connection is closed without a clean leave, so its w. key stays in the bucket, and e starts
// warming once that key is older than the session timeout, neither before c could still have
// been alive (half a session after the kill) nor long after (3 sessions). The dead standby takes
// nothing: no member key, no partition, not in the record; Standbys (what `pctl topic groups`
// shows) lists d and e warming and not c. With the staleness rule removed from the queue (the
// `time.Since(e.Created()) >= SessionTimeout` skip in warmRank) e never warms: checked by hand, the
// test then fails with "not within 8s: the queued standby e warming".
func TestWarmUpCrashedStandbyFreesItsSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const session = 2 * time.Second
	g := newStandbyGroup(t, ctx, "wuc", session)
	w := &warmers{called: map[string][]int{}, first: map[string]time.Time{}, released: map[string]bool{}}
	g.run("a", nil)
	g.run("b", nil)
	settle(t, ctx, g.admin, "wuc", "g", 2)
	for _, m := range []string{"c", "d", "e"} {
		g.run(m, w.warm(m))
		time.Sleep(50 * time.Millisecond) // a queue order: c, d, e
	}
	waitFor(t, 20*time.Second, "two standbys warming", func() bool { return len(w.warming()) >= 2 })
	time.Sleep(500 * time.Millisecond) // five heartbeats: e must still wait
	if got := w.warming(); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("standbys that warmed: %v, want [c d]", got)
	}
	g.waitStandbys("Standbys listing c, d warming and e queued", func(sb []client.Standby) bool {
		return len(sb) == 3 && sb[0].Warming && sb[1].Warming && !sb[2].Warming && sb[2].Member == "e"
	})

	desc, _, err := g.admin.Topic(ctx, "wuc")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := g.admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	g.kill("c")
	time.Sleep(200 * time.Millisecond)
	if _, err := kv.Get(ctx, wire.GroupPrefix(desc.ID, "g")+"w.c"); err != nil {
		t.Fatalf("the killed standby's w. key is gone (%v): the kill was a clean leave, the test proves nothing", err)
	}
	waitFor(t, 4*session, "the queued standby e warming", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.first["e"]
		return ok
	})
	w.mu.Lock()
	after := w.first["e"].Sub(killed)
	w.mu.Unlock()
	if after < session/2 {
		t.Errorf("e started warming %v after c was killed: before c's w. key (re-put every 100ms) could be older than the session timeout %v, the limit of 2 was not kept", after, session)
	}
	g.waitStandbys("Standbys listing d and e warming, not the dead c", func(sb []client.Standby) bool {
		return len(sb) == 2 && sb[0].Member == "d" && sb[1].Member == "e" && sb[0].Warming && sb[1].Warming
	})
	if _, err := kv.Get(ctx, wire.MemberKey(desc.ID, "g", "c")); err == nil {
		t.Errorf("the dead standby c has a member key")
	}
	rec := readRecord(t, ctx, g.admin, "wuc", "g")
	if !equalStrings(rec.Members, []string{"a", "b"}) {
		t.Errorf("the record after the crash has members %v, want [a b]", rec.Members)
	}
	for _, q := range rec.Partitions {
		e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, "g", q))
		var ps wire.PartitionState
		if err == nil && json.Unmarshal(e.Value(), &ps) == nil && ps.Owner == "c" {
			t.Errorf("partition %d is owned by the dead standby c", q)
		}
	}
	t.Logf("e started warming %v after c was killed (session timeout %v)", after.Round(time.Millisecond), session)
}

// A standby whose Warm call takes longer than the session timeout (a first call reads the whole
// history) is alive: its w. key is re-put every heartbeat meanwhile, so it keeps its slot and the
// queued standby waits (limit 1 here). On the old code the key was re-put only between Warm calls:
// it went stale during the long call, d started warming beside c (over the limit) and Standbys
// no longer listed c.
func TestWarmUpSlowWarmKeepsItsSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const session = 1500 * time.Millisecond
	g := newStandbyGroup(t, ctx, "wus", session)
	g.run("a", nil)
	settle(t, ctx, g.admin, "wus", "g", 1)
	inWarm := make(chan struct{})
	dWarmed := make(chan struct{}, 1)
	first := true
	g.run("c", &client.WarmUp{MaxConcurrent: 1, Warm: func(ctx context.Context, _ []int) (int64, error) {
		if first {
			first = false
			close(inWarm)
			select { // one call of 3 session timeouts
			case <-time.After(3 * session):
			case <-ctx.Done():
			}
		}
		return 1 << 40, nil
	}})
	<-inWarm
	g.run("d", &client.WarmUp{MaxConcurrent: 1, Warm: func(context.Context, []int) (int64, error) {
		select {
		case dWarmed <- struct{}{}:
		default:
		}
		return 1 << 40, nil
	}})
	deadline := time.Now().Add(3 * session)
	for bad := 0; time.Now().Before(deadline); {
		select {
		case <-dWarmed:
			t.Fatalf("standby d warmed while c (limit 1) was inside a long Warm call: c's w. key went stale though c is alive")
		case <-time.After(100 * time.Millisecond):
		}
		// Three listings in a row (a listing can miss a key re-put meanwhile: waitStandbys).
		if sb := g.standbys(); len(sb) != 2 || sb[0].Member != "c" || !sb[0].Warming || sb[1].Warming {
			if bad++; bad == 3 {
				t.Fatalf("standbys during c's long Warm call, three listings in a row: %+v, want c warming, d queued", sb)
			}
		} else {
			bad = 0
		}
	}
}
