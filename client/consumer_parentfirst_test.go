package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/testhook"
)

// TestParentFirstReplayKeepsOrder tries to break parent-first scheduling (parentfirst.go): a
// topic written through two epoch changes (2 partitions, grown to 4, then the function swapped
// to jump), replayed from the beginning by a group whose members hold parents and their children
// at once (partition 0 and its child 2), with a slow parent (every epoch-1 record of partition 0
// takes a millisecond), so that the children are ready long before their parents drain. The
// members start their partitions parent-first and together; the test checks, with client/verify,
// per-key order and that nothing was lost, and, from the deliveries alone, that no record of a
// key was delivered before every record of that key's older partitions (the partition the key's
// records of an older epoch were stored in, as delivered) had been: children never deliver a
// moved key before its parent drained. The control: the same group with gating off (the
// mutant that ignores the gate) fails both checks.
func TestParentFirstReplayKeepsOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const keys = 40
	b, admin := groupBroker(t, "pf", 2)
	kp := newKeyProducer(t, ctx, b, "pf", "p1")
	kp.send(t, ctx, keys, 40)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "pf", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, keys, 15)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "pf", Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	kp.send(t, ctx, keys, 15)
	total := 70 * keys

	for _, tc := range []struct {
		name    string
		members int
		mutant  bool
	}{{"one-member", 1, false}, {"two-members", 2, false}, {"mutant-ignores-the-gate", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			group := "g-" + tc.name
			var d deliveries
			var mu sync.Mutex
			var msgs []*client.Message
			for m := 0; m < tc.members; m++ {
				id := fmt.Sprint("m", m)
				opts := client.ConsumerOptions{Group: group, Member: id, FromBeginning: true, Testing: &testhook.Consumer{DisableGating: tc.mutant}}
				record := d.handler(group, id)
				h := func(ctx context.Context, msg *client.Message) error {
					if msg.Partition == 0 && msg.Epoch == 1 {
						time.Sleep(time.Millisecond) // the slow parent
					}
					mu.Lock()
					msgs = append(msgs, msg)
					err := record(ctx, msg) // under mu: msgs and the deliveries share one order
					mu.Unlock()
					return err
				}
				startMemberWith(t, ctx, b, "pf", opts, h)
			}
			waitFor(t, 3*time.Minute, "the replay", func() bool { return d.count() >= total })
			time.Sleep(300 * time.Millisecond) // anything delivered twice shows up too
			got, _ := d.since(0, group)
			mu.Lock()
			early := deliveredBeforeParents(msgs)
			mu.Unlock()
			r := verify.Check(kp.log(), got, verify.Options{Groups: []string{group}, NoDuplicates: tc.members == 1})
			if tc.mutant {
				if r.OK() || len(early) == 0 {
					t.Fatalf("gating off: the checks must fail and did not (verify ok=%v, %d records before their parents drained)", r.OK(), len(early))
				}
				t.Logf("control: gating off fails the checks as it must: %d records delivered before their parents drained, e.g. %s", len(early), early[0])
				return
			}
			if !r.OK() {
				t.Fatalf("per-key order: %v", r)
			}
			if len(early) > 0 {
				t.Fatalf("%d records delivered before their parents drained, e.g. %s", len(early), early[0])
			}
		})
	}
}

// deliveredBeforeParents returns the deliveries (in delivery order) of a record of key k, epoch
// x, partition c that came before the last first delivery of some epoch e < x record stored in
// partition q != c where k's epoch-e records were stored: q is k's parent in e, and it had not
// drained yet. Everything is taken from the deliveries (where the broker stored each record),
// nothing from a partitioner.
func deliveredBeforeParents(msgs []*client.Message) []string {
	type ek struct {
		epoch int
		key   string
	}
	type ep struct{ epoch, partition int }
	home := map[ek]int{}
	last := map[ep]int{}
	seen := map[[3]uint64]bool{}
	var first []*client.Message
	for _, m := range msgs {
		id := [3]uint64{uint64(m.Epoch), uint64(m.Partition), m.Seq}
		if seen[id] {
			continue // a redelivery: order is about first deliveries
		}
		seen[id] = true
		first = append(first, m)
	}
	for i, m := range first {
		home[ek{m.Epoch, string(m.Key)}] = m.Partition
		last[ep{m.Epoch, m.Partition}] = i
	}
	var out []string
	for i, m := range first {
		for e := 1; e < m.Epoch; e++ {
			q, ok := home[ek{e, string(m.Key)}]
			if ok && q != m.Partition && i < last[ep{e, q}] {
				out = append(out, fmt.Sprintf("key %s epoch %d partition %d seq %d, delivered before partition %d drained epoch %d", m.Key, m.Epoch, m.Partition, m.Seq, q, e))
				break
			}
		}
	}
	return out
}

// startMemberWith runs a group member with handler h until the test ends.
func startMemberWith(t *testing.T, ctx context.Context, b *broker.Broker, topic string, opts client.ConsumerOptions, h client.Handler) {
	t.Helper()
	opts.Heartbeat, opts.SessionTimeout = 200*time.Millisecond, 3*time.Second
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, h) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("member %s: %v", opts.Member, err)
		}
	})
}
