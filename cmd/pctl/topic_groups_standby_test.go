package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestTopicGroupsShowsStandbys: 'pctl topic groups' lists the members warming up before they
// join (spec/protocol.md §6.10) under their group, in queue order, each warming with the lag it
// reported or queued: a sticky group with member a, and three standbys c, d, e whose warm-ups
// report the lags 1234 and 5678 (never under the threshold, so they stay standbys); at most two
// warm at once, so e is queued. --json carries the same. On the old code neither shows standbys.
func TestTopicGroupsShowsStandbys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "t", "--partitions", "4", "--partitioner", "linear-murmur2"), exitOK)
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleConsumer)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	run := func(member string, wu *client.WarmUp) {
		cn, err := c.NewConsumer(ctx, "t", client.ConsumerOptions{Group: "g", Member: member, Assignor: wire.AssignorSticky,
			Heartbeat: 100 * time.Millisecond, SessionTimeout: 3 * time.Second, WarmUp: wu, Logf: func(string, ...any) {}})
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
	lagOf := func(lag int64) *client.WarmUp {
		return &client.WarmUp{MaxLag: 10, Warm: func(context.Context, []int) (int64, error) { return lag, nil }}
	}
	run("a", nil)
	cons := cliFor(t, b, broker.RoleConsumer)
	deadline := time.Now().Add(20 * time.Second)
	for r := cons.run("", "topic", "groups", "t"); !strings.Contains(r.stdout, "1 live member(s): a"); r = cons.run("", "topic", "groups", "t") {
		if time.Now().After(deadline) {
			t.Fatalf("member a never listed: %s", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	run("c", lagOf(1234))
	time.Sleep(50 * time.Millisecond) // a queue order: c, d, e
	run("d", lagOf(5678))
	time.Sleep(50 * time.Millisecond)
	run("e", lagOf(99))
	want := []string{
		"  standby c: warming up, lag 1234 record(s)",
		"  standby d: warming up, lag 5678 record(s)",
		"  standby e: queued (waits for a warm-up slot, reads nothing)",
	}
	// A listing of the group bucket can miss a key re-put while it runs (standbys re-put theirs
	// every heartbeat): poll until one listing shows all three.
	var r cliResult
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = cons.run("", "topic", "groups", "t")
		ok := r.code == exitOK && strings.Contains(r.stdout, "1 live member(s): a;")
		last := -1
		for _, w := range want {
			i := strings.Index(r.stdout, w)
			ok = ok && i > last
			last = i
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic groups never showed the standbys in queue order %q: %s", want, r)
		}
	}
	t.Logf("%s", r.stdout)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = cons.run("", "topic", "groups", "t", "--json")
		var views []client.GroupLag
		if err := json.Unmarshal([]byte(r.stdout), &views); err != nil || len(views) != 1 {
			t.Fatalf("--json: %v %s", err, r)
		}
		sb := views[0].Standbys
		if len(sb) == 3 && sb[0].Member == "c" && sb[0].Warming && sb[0].Lag == 1234 && sb[1].Member == "d" && sb[1].Lag == 5678 &&
			sb[2].Member == "e" && !sb[2].Warming && sb[2].Lag == 0 && equalMembers(views[0].Members, "a") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--json never showed c, d warming (lags 1234, 5678) and e queued: %+v", views[0])
		}
	}
}

func equalMembers(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
