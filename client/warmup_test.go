package client_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// warmers records the warm-up calls of several standbys; a standby's lag stays above the
// threshold until the test releases it.
type warmers struct {
	mu       sync.Mutex
	called   map[string][]int // member -> the partitions of its last call
	first    map[string]time.Time
	released map[string]bool
}

func (w *warmers) warm(member string) *client.WarmUp {
	return &client.WarmUp{MaxLag: 10, Warm: func(_ context.Context, parts []int) (int64, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.first[member]; !ok {
			w.first[member] = time.Now()
		}
		w.called[member] = append([]int(nil), parts...)
		if w.released[member] {
			return 0, nil
		}
		return 1 << 40, nil
	}}
}

func (w *warmers) warming() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for m := range w.called {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Warm-up before cut-over (spec/protocol.md §6.10) on a real broker: a sticky group of members a
// and b, and three standbys c, d, e that warm up (their lag stays above the threshold until
// released). At most two standbys warm at once, and the one that warms is told the partition it
// will own (4 partitions, members a, b plus itself: partition 3, worked out by hand from §6.2.1);
// no standby writes a member key or takes a partition, and the record keeps a and b. Released, c
// joins (the record gets it), and the third standby gets c's slot. On the old code there is no
// warm-up: a member joins at once.
func TestWarmUpStandbysQueueAndTakeNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "wu", 4)
	desc, _, err := admin.Topic(ctx, "wu")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	w := &warmers{called: map[string][]int{}, first: map[string]time.Time{}, released: map[string]bool{}}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	run := func(member string, wu *client.WarmUp) {
		cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "wu", client.ConsumerOptions{Group: "g", Member: member, Assignor: wire.AssignorSticky,
			Heartbeat: 100 * time.Millisecond, SessionTimeout: 3 * time.Second, WarmUp: wu, Logf: quietLogf(t)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cn.Run(rctx, func(context.Context, *client.Message) error { return nil }) }()
		stops = append(stops, func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("member %s: %v", member, err)
			}
		})
	}
	run("a", nil)
	run("b", nil)
	settle(t, ctx, admin, "wu", "g", 2)
	for _, m := range []string{"c", "d", "e"} {
		run(m, w.warm(m))
		time.Sleep(50 * time.Millisecond) // a queue order: c, d, e
	}
	waitFor(t, 20*time.Second, "two standbys warming", func() bool { return len(w.warming()) >= 2 })
	time.Sleep(time.Second) // ten heartbeats: the third must still wait
	if got := w.warming(); len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("standbys that warmed: %v, want [c d] (at most 2 at once, in the order they came)", got)
	}
	w.mu.Lock()
	parts := w.called["c"]
	w.mu.Unlock()
	if len(parts) != 1 || parts[0] != 3 {
		t.Errorf("standby c warms partitions %v, want [3] (a: 0, 2; b: 1; c: 3 by §6.2.1 from a: 0, 2 and b: 1, 3)", parts)
	}
	for _, m := range []string{"c", "d", "e"} {
		if _, err := kv.Get(ctx, wire.MemberKey(desc.ID, "g", m)); err == nil {
			t.Errorf("standby %s wrote a member key while warming", m)
		}
	}
	if rec := readRecord(t, ctx, admin, "wu", "g"); len(rec.Members) != 2 {
		t.Errorf("the record while standbys warm has members %v, want [a b]", rec.Members)
	}
	w.mu.Lock()
	w.released["c"] = true
	w.mu.Unlock()
	settle(t, ctx, admin, "wu", "g", 3)
	if rec := readRecord(t, ctx, admin, "wu", "g"); rec.Owner(3) != "c" {
		t.Errorf("after c's cut-over partition 3 is %q's, want c's (the partition it warmed)", rec.Owner(3))
	}
	waitFor(t, 20*time.Second, "the third standby taking c's slot", func() bool { return len(w.warming()) == 3 })
	t.Logf("warmed in turn: %v; c joined and owns partition 3", w.warming())
}
