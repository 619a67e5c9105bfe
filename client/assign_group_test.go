package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// handledBy records, per key and epoch, the members that handled the key's records.
type handledBy struct {
	mu  sync.Mutex
	who map[string]map[int]map[string]bool // key -> epoch -> members
	n   int
}

func (h *handledBy) handler(member string) client.Handler {
	return func(_ context.Context, m *client.Message) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		k := string(m.Key)
		if h.who[k] == nil {
			h.who[k] = map[int]map[string]bool{}
		}
		if h.who[k][m.Epoch] == nil {
			h.who[k][m.Epoch] = map[string]bool{}
		}
		h.who[k][m.Epoch][member] = true
		h.n++
		return nil
	}
}

func (h *handledBy) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// members returns the single member that handled key k's records of epoch e ("" if none, "*"
// if several).
func (h *handledBy) member(k string, e int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ms := h.who[k][e]
	if len(ms) != 1 {
		if len(ms) == 0 {
			return ""
		}
		return "*"
	}
	for m := range ms {
		return m
	}
	return ""
}

// A sticky group on a real broker: two members, a linear-hashing topic expanded from 4 to 8
// partitions. Every key's new-epoch records are handled by the member that handled its old ones
// (no key changed member), and the group's record says so (moved 0). Then a third member joins:
// the record moves about a quarter of the keys, less than what modulo would have. On the old code
// (modulo, no record) the member ignores the assignor and there is no record: the test fails.
func TestStickyGroupExpansionMovesNoKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "unused", 1)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "st", Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
		t.Fatal(err)
	}
	h := &handledBy{who: map[string]map[int]map[string]bool{}}
	run := func(member string) (*client.Consumer, context.CancelFunc, chan error) {
		cctx, stop := context.WithCancel(ctx)
		cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "st", client.ConsumerOptions{Group: "g", Member: member, Assignor: wire.AssignorSticky,
			FromBeginning: true, Heartbeat: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, Logf: quietLogf(t)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cn.Run(cctx, h.handler(member)) }()
		return cn, stop, done
	}
	ca, stopA, doneA := run("a")
	_, stopB, doneB := run("b")
	defer func() { stopA(); stopB(); <-doneA; <-doneB }()

	settle(t, ctx, admin, "st", "g", 2)
	const keys = 200
	p := newKeyProducer(t, ctx, b, "st", "p1")
	p.send(t, ctx, keys, 1)
	waitFor(t, 30*time.Second, "epoch-1 records", func() bool { return h.count() >= keys })
	if got := ca.Assignor(); got != wire.AssignorSticky {
		t.Fatalf("member a follows assignor %q, want sticky", got)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "st", Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	settle(t, ctx, admin, "st", "g", 2)
	p.send(t, ctx, keys, 1)
	waitFor(t, 30*time.Second, "epoch-2 records", func() bool { return h.count() >= 2*keys })
	moved := 0
	for k := 0; k < keys; k++ {
		key := fmt.Sprint("k", k)
		before, after := h.member(key, 1), h.member(key, 2)
		if before == "" || after == "" || before == "*" || after == "*" {
			t.Fatalf("key %s handled by %q in epoch 1 and %q in epoch 2: want exactly one member each", key, before, after)
		}
		if before != after {
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%d of %d keys changed member when linear hashing went from 4 to 8 partitions under the sticky assignor; want 0", moved, keys)
	}
	rec := readRecord(t, ctx, admin, "st", "g")
	if rec.Epoch != 2 || len(rec.Partitions) != 8 || len(rec.Members) != 2 {
		t.Fatalf("record after the expansion: epoch %d, partitions %v, members %v: want epoch 2, 8 partitions, 2 members", rec.Epoch, rec.Partitions, rec.Members)
	}
	// The record of the epoch change itself (a membership change could follow it on a loaded
	// machine): no key moved.
	var change *wire.AssignmentSummary
	for i := range rec.History {
		if h := &rec.History[i]; h.Epoch == 2 && change == nil {
			change = h
		}
	}
	if change == nil || change.Moved == nil || *change.Moved != 0 || change.Members != 2 {
		t.Fatalf("the record of the epoch change: %+v: want 2 members, moved 0", change)
	}

	// A third member: the record moves only what the balance bound needs (8 over 3: 3, 3, 2).
	_, stopC, doneC := run("c")
	defer func() { stopC(); <-doneC }()
	waitFor(t, 20*time.Second, "the record with member c", func() bool {
		r := readRecord(t, ctx, admin, "st", "g")
		return len(r.Members) == 3
	})
	rec = readRecord(t, ctx, admin, "st", "g")
	if rec.Moved == nil || rec.MovedModulo == nil || *rec.Moved > 0.3 || *rec.MovedModulo <= *rec.Moved {
		t.Fatalf("after member c joined: moved %v, modulo %v: want at most 0.3 and less than modulo", fmtp(rec.Moved), fmtp(rec.MovedModulo))
	}
	t.Logf("expansion: moved 0 (modulo %.3f); join: moved %.3f (modulo %.3f)", *change.MovedModulo, *rec.Moved, *rec.MovedModulo)
}

// settle waits until the group's record has the given number of members and every partition's
// lease is held by the member the record names.
func settle(t *testing.T, ctx context.Context, admin *client.Client, topic, group string, members int) {
	t.Helper()
	desc, _, err := admin.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the group to settle on its assignment", func() bool {
		e, err := kv.Get(ctx, wire.AssignmentKey(desc.ID, group))
		if err != nil {
			return false
		}
		var a wire.Assignment
		if json.Unmarshal(e.Value(), &a) != nil || len(a.Members) != members || a.Epoch != desc.Current().Epoch {
			return false
		}
		for _, q := range a.Partitions {
			e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, group, q))
			var ps wire.PartitionState
			if err != nil || json.Unmarshal(e.Value(), &ps) != nil || ps.Owner != a.Owner(q) {
				return false
			}
		}
		return true
	})
}

func fmtp(f *float64) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("%.3f", *f)
}

func readRecord(t *testing.T, ctx context.Context, admin *client.Client, topic, group string) *wire.Assignment {
	t.Helper()
	desc, _, err := admin.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.AssignmentKey(desc.ID, group))
	if err != nil {
		t.Fatalf("group %s has no assignment record: %v", group, err)
	}
	var a wire.Assignment
	if err := json.Unmarshal(e.Value(), &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

// A member refuses a group whose assignor it does not implement (ErrUnsupported), and a group
// whose assignor differs from the one it asked for (ErrConflict), before it writes a member key.
// The old code ignored g.assignor and joined both.
func TestAssignorRefusal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "ar", 2)
	desc, _, err := admin.Topic(ctx, "ar")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// A group created by a client with another assignor: g.assignor, then g.created (a group
	// without g.created is being created, and a member may still write its own assignor, §6.1).
	if _, err := kv.Create(ctx, wire.AssignorKey(desc.ID, "future"), []byte(`{"assignor":"range-2030"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, wire.GroupPrefix(desc.ID, "future")+"g.created", []byte("now")); err != nil {
		t.Fatal(err)
	}
	c := thinConnect(t, b, broker.RoleConsumer)
	join := func(group, assignor string) error {
		cn, err := c.NewConsumer(ctx, "ar", client.ConsumerOptions{Group: group, Member: "m1", Assignor: assignor, Heartbeat: 100 * time.Millisecond, Logf: quietLogf(t)})
		if err != nil {
			return err
		}
		rctx, stop := context.WithTimeout(ctx, 3*time.Second)
		defer stop()
		return cn.Run(rctx, func(context.Context, *client.Message) error { return nil })
	}
	if err := join("future", ""); !errors.Is(err, wire.ErrUnsupported) {
		t.Errorf("joining a group with an unknown assignor: %v, want an error with code unsupported", err)
	} else {
		t.Logf("refused: %v", err)
	}
	if _, err := kv.Get(ctx, wire.MemberKey(desc.ID, "future", "m1")); err == nil {
		t.Errorf("the refused member wrote a member key: it took part in the assignment")
	}
	// A group made sticky refuses a member that asks for modulo, and takes one that asks for
	// nothing (it follows the group's assignor).
	if err := join("s", wire.AssignorSticky); err != nil {
		t.Fatalf("creating a sticky group: %v", err)
	}
	if err := join("s", wire.AssignorModulo); !errors.Is(err, wire.ErrConflict) {
		t.Errorf("asking for modulo in a sticky group: %v, want conflict", err)
	}
	if err := join("s", ""); err != nil {
		t.Errorf("joining a sticky group without asking for an assignor: %v", err)
	}
	if _, err := c.NewConsumer(ctx, "ar", client.ConsumerOptions{Group: "x", Assignor: "bogus"}); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("an unknown assignor asked for: %v, want bad request", err)
	}
	// Default groups record modulo.
	if err := join("plain", ""); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.AssignorKey(desc.ID, "plain"))
	if err != nil || string(e.Value()) != `{"assignor":"modulo"}` {
		t.Errorf("a default group's assignor key: %v %v, want {\"assignor\":\"modulo\"}", e, err)
	}
}
