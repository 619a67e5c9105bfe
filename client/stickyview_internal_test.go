package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestStickyRebalanceUsesOneView: a sticky rebalance compares, computes and writes the group's
// record from one view of the descriptor (spec/protocol.md §6.2.1, "One view per rebalance"). A
// cross-language CI run saw what happens otherwise: a Node leader took the assignable partitions
// from epoch 1's descriptor, then the epoch from epoch 2's (it arrived while the record was being
// read), and wrote a record of epoch 2 with epoch 1's four partitions; the next record, finding
// the same epoch, spread the four new partitions over the members instead of giving each child to
// its parent's owner, and keys changed member.
//
// Against a real broker: a sticky member of a 4-partition linear-hashing topic takes a view,
// the topic grows to 8 and the member records epoch 2; then a rebalance from the old view runs.
// It must write nothing (its view is older than the record) and want the record's partitions
// among its view's. With the view re-read inside the rebalance (the old shape), it writes a
// record of epoch 2 over 4 partitions.
func TestStickyRebalanceUsesOneView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := internalTestBroker(t, ctx)
	admin, cons := connect(broker.RoleAdmin), connect(broker.RoleConsumer)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "sv", Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
		t.Fatal(err)
	}
	cn, err := cons.NewConsumer(ctx, "sv", ConsumerOptions{Group: "g", Member: "a", Assignor: wire.AssignorSticky, Start: StartBeginning, Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, func(context.Context, *Message) error { return nil }) }()
	defer func() { stop(); <-done }()

	gkv, err := admin.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	record := func() (*wire.Assignment, uint64) {
		e, err := gkv.Get(ctx, wire.AssignmentKey(cn.topicID, "g"))
		if err != nil {
			return nil, 0
		}
		var a wire.Assignment
		if err := json.Unmarshal(e.Value(), &a); err != nil {
			t.Fatalf("g.assignment is not a record: %s", e.Value())
		}
		return &a, e.Revision()
	}
	waitRecord := func(epoch, n int) (*wire.Assignment, uint64) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			a, rev := record()
			if a != nil && a.Epoch == epoch && len(a.Partitions) == n {
				return a, rev
			}
			if time.Now().After(deadline) {
				t.Fatalf("no record of epoch %d over %d partitions within 60s; the record: %+v", epoch, n, a)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitRecord(1, 4)
	oldDesc, oldParts := cn.view()
	if oldDesc.Current().Epoch != 1 || !slices.Equal(oldParts, []int{0, 1, 2, 3}) {
		t.Fatalf("the view before the change: epoch %d, partitions %v", oldDesc.Current().Epoch, oldParts)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "sv", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	_, rev := waitRecord(2, 8)
	if d, _ := cn.view(); d.Current().Epoch != 2 {
		t.Fatalf("the member's descriptor is at epoch %d after it recorded epoch 2", d.Current().Epoch)
	}

	kv, err := cn.kv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := cn.wanted(ctx, kv, []string{"a"}, true, oldDesc, oldParts)
	if err != nil {
		t.Fatalf("a rebalance from the old view: %v", err)
	}
	a, nrev := record()
	if nrev != rev {
		t.Errorf("a rebalance from a view of epoch 1 rewrote the record of epoch 2: now round %d, epoch %d, partitions %v (want no write)", a.Round, a.Epoch, a.Partitions)
	}
	if a.Epoch != 2 || !slices.Equal(a.Partitions, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("the record is epoch %d over %v; want epoch 2 over 0..7", a.Epoch, a.Partitions)
	}
	var got []int
	for q := range want {
		got = append(got, q)
	}
	slices.Sort(got)
	if fmt.Sprint(got) != fmt.Sprint(oldParts) {
		t.Errorf("the old view's rebalance wants %v; want the record's partitions among the view's, %v", got, oldParts)
	}
}
