package stateful

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// ScaleOutConfig configures RunScaleOut. Zero values mean defaults.
type ScaleOutConfig struct {
	// Keys is the number of distinct input keys (default 40); Interval the time between two
	// input records (default 2.5 ms).
	Keys     int
	Interval time.Duration
	// Phase is how long each phase runs after its action (default 1.5 s).
	Phase time.Duration
	// SessionTimeout is the members' (default 2 s: the crash phase waits for it); Drain how long
	// the group may take, after the input stops, to commit every record (default 60 s).
	SessionTimeout, Drain time.Duration
	// NoHandover runs the members without the state handover (each starts the keys it gets
	// from zero) and stops after the first phase: the checker must then find wrong totals.
	NoHandover bool
	// Seed makes the amounts (default 15).
	Seed int64
	// Logf receives progress and the members' decisions (default: none).
	Logf       func(format string, args ...any)
	MemberLogf func(format string, args ...any)
}

// Phase is one phase of the scale-out and the longest per-key pause that ended in it.
type Phase struct {
	Name    string        `json:"name"`
	Longest time.Duration `json:"longest_pause_ns"`
	Key     string        `json:"key"`
}

// ScaleOutReport is what RunScaleOut found.
type ScaleOutReport struct {
	Records int `json:"records"` // input records, all acknowledged
	Keys    int `json:"keys"`
	// Wrong counts keys whose total or count in the changelog differs from the sums computed
	// directly from the input topic's streams; Examples describes the first few.
	Wrong    int      `json:"wrong_keys"`
	Examples []string `json:"examples,omitempty"`
	Phases   []Phase  `json:"phases"`
	// ScaleOut is the longest per-key pause over the phases that change members and topics
	// (not the crash), Baseline over stopping every member and restoring fresh ones from the
	// changelog; Ratio = ScaleOut / Baseline.
	ScaleOut, Baseline time.Duration
	Ratio              float64 `json:"ratio"`
	Stats              Stats   `json:"stats"` // summed over every member
	// MemberErrors are errors members stopped with (other than the crashed one's).
	MemberErrors []string `json:"member_errors,omitempty"`
}

// RunScaleOut is issue 15's proof, on a running broker b (it creates topics "in" and "cl"): the
// running-total processor goes from 2 to 4 members (sticky assignor), its input and changelog
// topics from 4 to 8 partitions (linear hashing, input first), both swap their function (to
// jump), and a member crashes (its connections close without a release). Records flow
// throughout. Then, as a baseline in the same run, every member is stopped and fresh ones restore
// the state from the changelog. The report compares every key's total with the input's and gives
// the longest per-key pause of each phase.
func RunScaleOut(ctx context.Context, b *broker.Broker, cfg ScaleOutConfig) (*ScaleOutReport, error) {
	if cfg.Keys <= 0 {
		cfg.Keys = 40
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2500 * time.Microsecond
	}
	if cfg.Phase <= 0 {
		cfg.Phase = 1500 * time.Millisecond
	}
	if cfg.Seed == 0 {
		cfg.Seed = 15
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 2 * time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 60 * time.Second
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRig(ctx, b, cfg.SessionTimeout, cfg.MemberLogf)
	if err != nil {
		return nil, err
	}
	defer r.close()
	rep := &ScaleOutReport{Keys: cfg.Keys}
	start := func(names ...string) error {
		for _, n := range names {
			if _, err := r.start(n, func(_ *member, o *client.ConsumerOptions) {
				if cfg.NoHandover {
					o.State = nil // each member starts the keys it gets from zero
				}
			}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := r.startInput(cfg.Keys, cfg.Interval, cfg.Seed); err != nil {
		return nil, err
	}

	if err := start("m1", "m2"); err != nil {
		return nil, err
	}
	crashed := r.running()[1]
	time.Sleep(2 * time.Second)
	type window struct {
		name     string
		from, to time.Time
	}
	var windows []window
	phase := func(name string, f func() error) error {
		logf("%s", name)
		w := window{name: name, from: time.Now()}
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		time.Sleep(cfg.Phase)
		w.to = time.Now()
		windows = append(windows, w)
		return nil
	}
	repartition := func(topic string, n int, fn string) func() error {
		return func() error {
			_, err := r.admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: n, Partitioner: fn})
			return err
		}
	}
	if err := phase("2 -> 4 members", func() error { return start("m3", "m4") }); err != nil {
		return nil, err
	}
	if !cfg.NoHandover {
		steps := []struct {
			name string
			f    func() error
		}{
			{"input 4 -> 8 partitions", repartition("in", 8, "")},
			{"changelog 4 -> 8 partitions", repartition("cl", 8, "")},
			{"input and changelog swap to jump", func() error {
				if err := repartition("in", 8, "jump")(); err != nil {
					return err
				}
				return repartition("cl", 8, "jump")()
			}},
		}
		for _, s := range steps {
			if err := phase(s.name, s.f); err != nil {
				return nil, err
			}
		}
		rep.ScaleOut, _ = r.pz.longest(windows[0].from, windows[len(windows)-1].to)
		if err := phase("member m2 crashes", func() error {
			crashed.cons.Close()
			crashed.prod.Close()
			time.Sleep(cfg.SessionTimeout + time.Second) // its leases expire
			return nil
		}); err != nil {
			return nil, err
		}
		// Baseline: stop every member, start fresh ones that restore from the changelog.
		w := window{name: "stop-and-restore (baseline)", from: time.Now()}
		logf("%s", w.name)
		var wg sync.WaitGroup
		var errMu sync.Mutex
		for _, m := range r.running() {
			if m == crashed {
				continue
			}
			wg.Add(1)
			go func(m *member) {
				defer wg.Done()
				if e := stopMember(m); e != "" {
					errMu.Lock()
					rep.MemberErrors = append(rep.MemberErrors, e)
					errMu.Unlock()
				}
			}(m)
		}
		wg.Wait()
		if err := start("r1", "r2", "r3", "r4"); err != nil {
			return nil, err
		}
		time.Sleep(2 * cfg.Phase)
		w.to = time.Now()
		windows = append(windows, w)
		rep.Baseline, _ = r.pz.longest(w.from, w.to)
		if rep.Baseline > 0 {
			rep.Ratio = float64(rep.ScaleOut) / float64(rep.Baseline)
		}
	}
	if rep.Records, err = r.finishInput(); err != nil {
		return nil, err
	}
	if rep.Wrong, rep.Examples, err = r.check(rep.Records, cfg.Drain, nil); err != nil {
		return nil, err
	}
	for _, w := range windows {
		d, k := r.pz.longest(w.from, w.to)
		rep.Phases = append(rep.Phases, Phase{Name: w.name, Longest: d, Key: k})
	}
	rep.Stats = r.stats()
	return rep, nil
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

// inputTotals sums every keyed record of a topic's streams, read directly.
func inputTotals(ctx context.Context, c *client.Client, topic string) (map[string]State, error) {
	out := map[string]State{}
	err := readRecords(ctx, c, topic, func(key string, data []byte) error {
		v, err := strconv.ParseInt(string(data), 10, 64)
		if err != nil {
			return fmt.Errorf("input record of %s: %q", key, data)
		}
		st := out[key]
		st.Total += v
		st.Count++
		out[key] = st
		return nil
	})
	return out, err
}

// changelogTotals is every key's highest-count state in a changelog, read directly (the checker
// does not use the processor's own reader).
func changelogTotals(ctx context.Context, c *client.Client, topic string) (map[string]State, error) {
	out := map[string]State{}
	err := readRecords(ctx, c, topic, func(key string, data []byte) error {
		var st State
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("changelog record of %s: %q", key, data)
		}
		if st.Count > out[key].Count {
			out[key] = st
		}
		return nil
	})
	return out, err
}

// readRecords calls f for every keyed record of every stream of a topic.
func readRecords(ctx context.Context, c *client.Client, topic string, f func(key string, data []byte) error) error {
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		return err
	}
	for q := 0; q < desc.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			return err
		}
		last := s.CachedInfo().State.LastSeq
		if last == 0 {
			continue
		}
		cons, err := c.JetStream().OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{MaxResetAttempts: 3}) // not for ever (stateful.go)
		if err != nil {
			return err
		}
		it, err := cons.Messages()
		if err != nil {
			return err
		}
		for {
			m, err := it.Next()
			if err != nil {
				it.Stop()
				return fmt.Errorf("%s: %w", wire.StreamName(topic, q), err)
			}
			md, err := m.Metadata()
			if err != nil {
				it.Stop()
				return err
			}
			if kh := m.Headers().Get(wire.HeaderKey); kh != "" {
				key, err := wire.DecodeKey(kh)
				if err == nil {
					err = f(string(key), m.Data())
				}
				if err != nil {
					it.Stop()
					return err
				}
			}
			if md.Sequence.Stream >= last {
				break
			}
		}
		it.Stop()
	}
	return nil
}

// drained waits until the group has committed every record of the topic (fence markers aside).
func drained(ctx context.Context, c *client.Client, topic, group string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		desc, _, err := c.Topic(ctx, topic)
		if err != nil {
			return err
		}
		groups, err := c.Groups(ctx, topic)
		if err != nil {
			return err
		}
		lag := uint64(0)
		var per []string
		for _, g := range groups {
			if g.Group != group {
				continue
			}
			for q := 0; q < desc.MaxPartitions(); q++ {
				s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
				if err != nil {
					return err
				}
				last := s.CachedInfo().State.LastSeq
				var pos uint64
				if q < len(g.Positions) {
					pos = g.Positions[q]
				}
				if l := desc.Lag(q, pos, last); l > 0 {
					lag += l
					per = append(per, fmt.Sprintf("partition %d at %d of %d", q, pos, last))
				}
			}
		}
		if lag == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s still %d records behind on %s after %v: %v", group, lag, topic, d, per)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
