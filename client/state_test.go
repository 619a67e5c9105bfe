package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// stateLog is a StateHandler that records its calls.
type stateLog struct {
	mu      sync.Mutex
	loads   map[string]int
	flushes map[string]int
}

func (s *stateLog) Load(_ context.Context, ks client.KeySet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range ks.Keys {
		s.loads[string(k)]++
	}
	return nil
}

func (s *stateLog) Flush(_ context.Context, ks client.KeySet) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range ks.Keys {
		s.flushes[string(k)]++
	}
	return nil
}

func (s *stateLog) count(m map[string]int, k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[k]
}

// A member that loses a partition's lease (another member took it) must not trust what it held
// of the partition's keys when the partition comes back: the other member may have changed
// them. It forgets them and loads them again before it delivers one. (The first version kept
// them, so the second record of the key was delivered without a Load.) A clean stop flushes.
func TestStateReloadedAfterLostLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, admin := groupBroker(t, "sl", 1)
	st := &stateLog{loads: map[string]int{}, flushes: map[string]int{}}
	cn, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(ctx, "sl", client.ConsumerOptions{Group: "g", Member: "x", FromBeginning: true,
		Heartbeat: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, State: st, Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(rctx, func(_ context.Context, m *client.Message) error {
			mu.Lock()
			seen[string(m.Value)] = true
			mu.Unlock()
			return nil
		})
	}()
	delivered := func(v string) bool { mu.Lock(); defer mu.Unlock(); return seen[v] }
	p := newKeyProducer(t, ctx, b, "sl", "p")
	p.send(t, ctx, 1, 1) // key k0
	waitFor(t, 20*time.Second, "the first record", func() bool { return delivered("k0:0") })
	if n := st.count(st.loads, "k0"); n != 1 {
		t.Fatalf("k0 loaded %d times before its first record, want 1", n)
	}

	// Another member takes the lease (as if x had paused past its session).
	desc, _, _ := admin.Topic(ctx, "sl")
	kv, err := admin.JetStream().KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := wire.PartitionKey(desc.ID, "g", 0)
	for {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var ps wire.PartitionState
		if err := json.Unmarshal(e.Value(), &ps); err != nil {
			t.Fatal(err)
		}
		ps.Owner, ps.LeaseEnd = "intruder", time.Now().Add(1500*time.Millisecond).UnixMilli()
		body, _ := json.Marshal(ps)
		if _, err := kv.Update(ctx, key, body, e.Revision()); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	// x gets it back once that lease has expired; the next record of k0 needs a new load.
	time.Sleep(2 * time.Second)
	p.send(t, ctx, 1, 1)
	waitFor(t, 20*time.Second, "the second record", func() bool { return delivered("k0:1") })
	if n := st.count(st.loads, "k0"); n != 2 {
		t.Errorf("k0 loaded %d times, want 2: after losing the partition's lease the member delivered k0 without loading it again", n)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if n := st.count(st.flushes, "k0"); n != 1 {
		t.Errorf("k0 flushed %d times at the clean stop, want 1", n)
	}
}

// A state handler needs the gate: the ungated test hook with State is refused.
func TestStateNeedsGating(t *testing.T) {
	b, _ := groupBroker(t, "sg", 1)
	_, err := thinConnect(t, b, broker.RoleConsumer).NewConsumer(context.Background(), "sg", client.ConsumerOptions{Group: "g", Testing: &testhook.Consumer{DisableGating: true}, State: &stateLog{}})
	if !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("State without the gate: %v, want bad request", err)
	}
}
