package stateful_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/examples/stateful"
)

// member is one running processor: its consumer, its changelog producer, its clients.
type member struct {
	name       string
	cons, prod *client.Client
	cn         *client.Consumer
	proc       *stateful.Processor
	stop       context.CancelFunc
	done       chan error
}

// pauses records every key's apply times, to find the longest gap between two applies.
type pauses struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (p *pauses) apply(key string, at time.Time) {
	p.mu.Lock()
	p.times[key] = append(p.times[key], at)
	p.mu.Unlock()
}

// longest is the longest gap between consecutive applies of one key that ends in [from, to].
func (p *pauses) longest(from, to time.Time) (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var max time.Duration
	var who string
	for k, ts := range p.times {
		for i := 1; i < len(ts); i++ {
			if ts[i].Before(from) || ts[i].After(to) {
				continue
			}
			if d := ts[i].Sub(ts[i-1]); d > max {
				max, who = d, k
			}
		}
	}
	return max, who
}

// TestStatefulScaleOut is issue 15's proof: the running-total processor goes from 2 to 4 members
// (sticky assignor), its input and changelog topics from 4 to 8 partitions (linear hashing, input
// first, changelog after), then both swap their function (to jump), and a member crashes (its
// connections close without a release: its uncommitted records are delivered again). Records flow
// throughout. At the end every key's total and count, as the changelog has them, equal the sums
// computed directly from the input topic's streams: nothing lost, nothing counted twice. Then, as a
// baseline in the same run, every member is stopped and fresh ones restore the state from the
// changelog (stop-and-restore); the longest per-key pause of each phase is printed with their
// ratio (no wall-clock assertion).
func TestStatefulScaleOut(t *testing.T) {
	if bad := scaleOut(t, true); bad > 0 {
		t.Fatalf("%d keys have a wrong total", bad)
	}
}

// The checker of TestStatefulScaleOut catches lost state: the same processor without the state
// handover (each member starts the keys it gets from zero) ends with wrong totals after only
// the first phase (2 -> 4 members).
func TestStatefulScaleOutCheckerCatchesLostState(t *testing.T) {
	if bad := scaleOut(t, false); bad == 0 {
		t.Fatalf("without the state handover every total came out right: the checker cannot see lost state")
	} else {
		t.Logf("without the state handover %d keys have a wrong total (the checker works)", bad)
	}
}

// scaleOut runs the scenario (only its first phase without handover) and returns the number of
// keys whose total differs from the input's.
func scaleOut(t *testing.T, handover bool) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connect := func(role string) *client.Client {
		c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := connect(broker.RoleAdmin)
	for _, topic := range []string{"in", "cl"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	pz := &pauses{times: map[string][]time.Time{}}
	logf := func(format string, args ...any) {}
	if testing.Verbose() {
		logf = t.Logf
	}
	var mu sync.Mutex
	members := map[string]*member{}
	start := func(name string) *member {
		m := &member{name: name, cons: connect(broker.RoleConsumer), prod: connect(broker.RoleProducer), done: make(chan error, 1)}
		p, err := m.prod.NewProducer(ctx, "cl", client.ProducerOptions{ID: "cl-" + name})
		if err != nil {
			t.Fatal(err)
		}
		m.proc = stateful.New(m.cons, "cl", p)
		m.proc.OnApply = pz.apply
		var state client.StateHandler
		if handover {
			state = m.proc
		}
		m.cn, err = m.cons.NewConsumer(ctx, "in", client.ConsumerOptions{Group: "totals", Member: name, Assignor: wire.AssignorSticky, FromBeginning: true,
			Heartbeat: 200 * time.Millisecond, SessionTimeout: 2 * time.Second, State: state, Logf: logf})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		m.stop = stop
		go func() { m.done <- m.cn.Run(rctx, m.proc.Handle) }()
		mu.Lock()
		members[name] = m
		mu.Unlock()
		return m
	}
	stopClean := func(m *member) {
		m.stop()
		if err := <-m.done; err != nil {
			t.Errorf("member %s stopped with %v", m.name, err)
		}
	}

	// The input: keys k0..k39, random amounts, about 400 records/s, every one acknowledged.
	const keys = 40
	prodIn, err := connect(broker.RoleProducer).NewProducer(ctx, "in", client.ProducerOptions{ID: "input"})
	if err != nil {
		t.Fatal(err)
	}
	var sentMu sync.Mutex
	failed := 0
	sent := 0
	pctx, stopInput := context.WithCancel(ctx)
	inputDone := make(chan struct{})
	go func() {
		defer close(inputDone)
		r := rand.New(rand.NewSource(15))
		tick := time.NewTicker(2500 * time.Microsecond)
		defer tick.Stop()
		for i := 0; pctx.Err() == nil; i++ {
			<-tick.C
			key := []byte(fmt.Sprint("k", i%keys))
			v := []byte(strconv.Itoa(1 + r.Intn(100)))
			if err := prodIn.Send(pctx, client.Record{Key: key, Value: v}, func(res client.Result) {
				sentMu.Lock()
				if res.Err != nil {
					failed++
				}
				sentMu.Unlock()
			}); err != nil {
				return
			}
			sentMu.Lock()
			sent++
			sentMu.Unlock()
		}
	}()

	m1, m2 := start("m1"), start("m2")
	_ = m1
	time.Sleep(2 * time.Second)
	// Each phase's window runs from its action to the next phase's: the longest per-key pause
	// that ends in it is the phase's.
	type window struct {
		what     string
		from, to time.Time
	}
	var windows []window
	phase := func(what string, f func()) {
		t.Logf("%s", what)
		w := window{what: what, from: time.Now()}
		f()
		time.Sleep(1500 * time.Millisecond)
		w.to = time.Now()
		windows = append(windows, w)
	}
	phase("2 -> 4 members", func() { start("m3"); start("m4") })
	if !handover {
		stopInput()
		<-inputDone
		if err := prodIn.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		drained(t, ctx, admin, "in", "totals")
		return compare(t, ctx, admin, nil)
	}
	phase("input 4 -> 8 partitions", func() {
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "in", Partitions: 8}); err != nil {
			t.Fatal(err)
		}
	})
	phase("changelog 4 -> 8 partitions", func() {
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "cl", Partitions: 8}); err != nil {
			t.Fatal(err)
		}
	})
	phase("input and changelog swap to jump", func() {
		for _, topic := range []string{"in", "cl"} {
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 8, Partitioner: "jump"}); err != nil {
				t.Fatal(err)
			}
		}
	})
	scalePause, scaleKey := pz.longest(windows[0].from, windows[len(windows)-1].to)
	phase("member m2 crashes", func() {
		m2.cons.Close()
		m2.prod.Close()
		time.Sleep(3 * time.Second) // its leases expire (session timeout 2 s)
	})

	// Baseline: stop every member, start fresh ones that restore from the changelog.
	baseFrom := time.Now()
	mu.Lock()
	running := []*member{}
	for _, m := range members {
		if m != m2 {
			running = append(running, m)
		}
	}
	mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range running {
		wg.Add(1)
		go func(m *member) { defer wg.Done(); stopClean(m) }(m)
	}
	wg.Wait()
	for _, name := range []string{"r1", "r2", "r3", "r4"} {
		start(name)
	}
	time.Sleep(3 * time.Second)
	baseTo := time.Now()
	basePause, baseKey := pz.longest(baseFrom, baseTo)
	windows = append(windows, window{"stop-and-restore (baseline)", baseFrom, baseTo})

	stopInput()
	<-inputDone
	if err := prodIn.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sentMu.Lock()
	if failed > 0 {
		t.Fatalf("%d of %d input records were not acknowledged", failed, sent)
	}
	total := sent
	sentMu.Unlock()

	drained(t, ctx, admin, "in", "totals")
	bad := compare(t, ctx, admin, func(records int) {
		if records != total {
			t.Fatalf("the input streams hold %d records, the producer had %d acknowledged", records, total)
		}
	})
	var st stateful.Stats
	mu.Lock()
	for _, m := range members {
		s := m.proc.Stats()
		st.Applied += s.Applied
		st.Duplicates += s.Duplicates
		st.Loads += s.Loads
		st.Flushes += s.Flushes
		st.LoadedKeys += s.LoadedKeys
	}
	mu.Unlock()
	t.Logf("%d records, %d keys: applied %d, duplicates skipped %d, loads %d (%d keys), flushes %d", total, keys, st.Applied, st.Duplicates, st.Loads, st.LoadedKeys, st.Flushes)
	for _, w := range windows {
		d, k := pz.longest(w.from, w.to)
		t.Logf("  %-34s longest per-key pause %v (key %s)", w.what, d.Round(time.Millisecond), k)
	}
	t.Logf("longest per-key pause during scale-out (members, expansions, swap) %v (key %s), stop-and-restore %v (key %s): ratio %.2f",
		scalePause.Round(time.Millisecond), scaleKey, basePause.Round(time.Millisecond), baseKey, float64(scalePause)/float64(basePause))
	return bad
}

// compare checks every key's total and count in the changelog against the sums computed directly
// from the input topic's streams, and returns the number of keys that differ. records, if set,
// gets the number of input records.
func compare(t *testing.T, ctx context.Context, admin *client.Client, records func(int)) int {
	t.Helper()
	want := inputTotals(t, ctx, admin, "in")
	n := 0
	for _, st := range want {
		n += int(st.Count)
	}
	if records != nil {
		records(n)
	}
	got := changelogTotals(t, ctx, admin)
	bad := 0
	for k, w := range want {
		if g := got[k]; g.Total != w.Total || g.Count != w.Count {
			bad++
			if bad <= 3 {
				t.Logf("key %s: total %d from %d records, want %d from %d (the input's)", k, g.Total, g.Count, w.Total, w.Count)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad++
			t.Logf("key %s is in the changelog, not in the input", k)
		}
	}
	return bad
}

// drained waits until the group has committed every record of the topic (fence markers aside).
func drained(t *testing.T, ctx context.Context, c *client.Client, topic, group string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		desc, _, err := c.Topic(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		groups, err := c.Groups(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		lag := uint64(0)
		for _, g := range groups {
			if g.Group != group {
				continue
			}
			for q := 0; q < desc.MaxPartitions(); q++ {
				s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
				if err != nil {
					t.Fatal(err)
				}
				last := s.CachedInfo().State.LastSeq
				var pos uint64
				if q < len(g.Positions) {
					pos = g.Positions[q]
				}
				if last > pos {
					lag += last - pos - uint64(desc.FenceMarkers(q, pos, last))
				}
			}
		}
		if lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s still %d records behind on %s", group, lag, topic)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// inputTotals sums every keyed record of a topic's streams, read directly.
func inputTotals(t *testing.T, ctx context.Context, c *client.Client, topic string) map[string]stateful.State {
	t.Helper()
	out := map[string]stateful.State{}
	forEachRecord(t, ctx, c, topic, func(key string, data []byte) {
		v, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			t.Fatalf("input record of %s: %q", key, data)
		}
		st := out[key]
		st.Total += v
		st.Count++
		out[key] = st
	})
	return out
}

// changelogTotals is every key's highest-count state in the changelog.
func changelogTotals(t *testing.T, ctx context.Context, c *client.Client) map[string]stateful.State {
	t.Helper()
	out := map[string]stateful.State{}
	forEachRecord(t, ctx, c, "cl", func(key string, data []byte) {
		var st stateful.State
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("changelog record of %s: %q", key, data)
		}
		if st.Count > out[key].Count {
			out[key] = st
		}
	})
	return out
}

func forEachRecord(t *testing.T, ctx context.Context, c *client.Client, topic string, f func(key string, data []byte)) {
	t.Helper()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for q := 0; q < desc.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		last := s.CachedInfo().State.LastSeq
		if last == 0 {
			continue
		}
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		for {
			m, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			md, _ := m.Metadata()
			if kh := m.Headers().Get(wire.HeaderKey); kh != "" {
				key, err := wire.DecodeKey(kh)
				if err != nil {
					t.Fatal(err)
				}
				f(string(key), m.Data())
			}
			if md.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
	}
}
