package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// TestGroupsBehindReadsTheResetItself: retiring epochs deletes records, so a group whose
// effective position (spec/protocol.md §6.6) is below the boundary must always be found behind.
// After a reset (a seek back) the group's positions are the reset's, and its partition keys of
// the older generation count no more. groupsBehind finds a group's keys by a listing of the
// groups bucket, which keeps one revision per key: a key re-put while the listing runs can be
// missed (nats.go's watcher counts the messages pending when it starts). A missed g.reset made
// the old generation's positions count, and the group looked past the boundary.
//
// Against a real broker: group g of a 1-partition topic was reset to 0 (generation 1) after it
// had committed 100 in generation 0; its g.reset is re-put in a loop while groupsBehind runs 100
// times with the boundary at 50, and every run must find g behind.
func TestGroupsBehindReadsTheResetItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := Start(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	t0 := &wire.Topic{Name: "rl", ID: "rlid"}
	put := func(key string, v any) {
		body, _ := json.Marshal(v)
		if _, err := b.group.Put(ctx, key, body); err != nil {
			t.Error(err)
		}
	}
	put(wire.AssignorKey(t0.ID, "g"), wire.AssignorState{Assignor: "modulo"})
	put(wire.PartitionKey(t0.ID, "g", 0), wire.PartitionState{Position: 100})
	reset := wire.ResetState{Generation: 1, To: "beginning", Positions: []uint64{0}}
	put(wire.ResetKey(t0.ID, "g"), reset)
	// Other groups' keys, re-put too, so that the listing takes a while.
	for i := 0; i < 30; i++ {
		put(wire.PartitionKey(t0.ID, "other", i), wire.PartitionState{Position: 1000})
	}
	bctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; bctx.Err() == nil; i++ {
			put(wire.ResetKey(t0.ID, "g"), reset)
			put(wire.PartitionKey(t0.ID, "other", i%30), wire.PartitionState{Position: 1000})
		}
	}()
	defer func() { stop(); wg.Wait() }()
	missed := 0
	for i := 0; i < 100; i++ {
		behind, err := b.groupsBehind(ctx, t0, []uint64{51})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range behind {
			found = found || len(s) > 8 && s[:8] == "group g "
		}
		if !found {
			missed++
		}
	}
	if missed > 0 {
		t.Errorf("%d of 100 runs of groupsBehind found group g (reset to 0, boundary 50) not behind: its g.reset was missed and generation 0's position 100 counted", missed)
	}
}

// TestGroupKeysListsOneTopicsLiveKeys: groupKeys (the group list, topic delete's clean-up, and
// retire's finding of the groups) returns every live key of the topic's groups, sorted, and no
// key of another topic, even one whose id the first's is a prefix of, nor a deleted key; with no
// key at all, none and no error.
func TestGroupKeysListsOneTopicsLiveKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if keys, err := b.groupKeys(ctx, "none"); err != nil || len(keys) != 0 {
		t.Fatalf("no keys: got %v, %v; want none and no error", keys, err)
	}
	for _, k := range []string{"idA.g.p.0", "idA.g.m.x", "idA.h.g.assignor", "idA.g.m.gone", "idAB.g.p.0", "idB.g.p.1"} {
		if _, err := b.group.Put(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.group.Delete(ctx, "idA.g.m.gone"); err != nil {
		t.Fatal(err)
	}
	keys, err := b.groupKeys(ctx, "idA")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"idA.g.m.x", "idA.g.p.0", "idA.h.g.assignor"}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("groupKeys(idA) = %v, want %v", keys, want)
	}
}
