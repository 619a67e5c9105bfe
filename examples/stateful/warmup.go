package stateful

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// WarmUpConfig configures RunWarmUp. Zero values mean defaults.
type WarmUpConfig struct {
	// Keys is the number of distinct input keys (default 40); Interval the time between two
	// input records (default 2.5 ms); Phase how long each phase runs (default 2 s).
	Keys     int
	Interval time.Duration
	Phase    time.Duration
	// Prefill is the number of changelog records written before the run, for keys the input
	// never has (default 30000): the history every joining member must read, which warm-up
	// reads before the cut-over.
	Prefill int
	// MaxLag is the warm-up's threshold (default: the client's, 10000 records).
	MaxLag int64
	// SessionTimeout is the members' (default 2 s); Drain how long the group may take, after the
	// input stops, to commit every record (default 60 s).
	SessionTimeout, Drain time.Duration
	// StaleWarm is the control that shows the checker catches a wrong warm-up: the warmed member
	// uses the state it read while warming as its store and has no state handover, so it does
	// not load the keys again at the cut-over; the records the old owners applied in between are
	// lost from its totals. The run skips the cold join.
	StaleWarm        bool
	Seed             int64 // the amounts (default 15)
	Logf, MemberLogf func(format string, args ...any)
}

// WarmUpReport is what RunWarmUp found.
type WarmUpReport struct {
	Records int `json:"records"` // input records, all acknowledged
	Keys    int `json:"keys"`
	Prefill int `json:"prefill"`
	// Wrong counts keys whose total or count in the changelog differs from the sums computed
	// directly from the input topic's streams.
	Wrong    int      `json:"wrong_keys"`
	Examples []string `json:"examples,omitempty"`
	// Cold is the longest per-key pause while a third member joins without warm-up, Warm while
	// a third member joins with it; Ratio = Warm / Cold.
	Cold     time.Duration      `json:"cold_pause_ns"`
	ColdKey  string             `json:"cold_key"`
	Warm     time.Duration      `json:"warm_pause_ns"`
	WarmKey  string             `json:"warm_key"`
	Ratio    float64            `json:"ratio"`
	WarmUp   client.WarmUpStats `json:"warm_up"`   // the warmed member's
	ColdLoad time.Duration      `json:"cold_load"` // the cold member's time in Load
	WarmLoad time.Duration      `json:"warm_load"` // the warmed member's time in Load after its cut-over
	// WarmLoads counts the warmed member's Load calls after its cut-over (the keys it took, each
	// loaded after its gate), OldFlushes the other members' Flush calls meanwhile (the keys they
	// gave up): the state handover at the cut-over.
	WarmLoads, OldFlushes int64
	Stats                 Stats `json:"stats"` // summed over every member
	// MemberErrors are errors members stopped with.
	MemberErrors []string `json:"member_errors,omitempty"`
}

// fillPrefix marks the prefilled changelog keys (never input keys).
const fillPrefix = "fill-"

// RunWarmUp is issue 15's warm-up proof, on a running broker b (it creates topics "in" and
// "cl"): the running-total processor runs with 2 members (sticky assignor) over a changelog that
// already holds cfg.Prefill records; a third member joins without warm-up and leaves again, then a
// fourth joins with warm-up (spec/protocol.md §6.10: it reads the changelog as a standby and
// joins within the lag threshold). Records flow throughout. The report compares every key's total
// with the input's, and the longest per-key pause of the two joins.
func RunWarmUp(ctx context.Context, b *broker.Broker, cfg WarmUpConfig) (*WarmUpReport, error) {
	if cfg.Keys <= 0 {
		cfg.Keys = 40
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2500 * time.Microsecond
	}
	if cfg.Phase <= 0 {
		cfg.Phase = 2 * time.Second
	}
	if cfg.Prefill <= 0 {
		cfg.Prefill = 30000
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
	rep := &WarmUpReport{Keys: cfg.Keys, Prefill: cfg.Prefill}

	// The history: prefilled changelog records of keys the input never has.
	fc, err := r.connect(broker.RoleProducer)
	if err != nil {
		return nil, err
	}
	fill, err := fc.NewProducer(ctx, "cl", client.ProducerOptions{ID: "fill"})
	if err != nil {
		return nil, err
	}
	var fillErr error
	var fillMu sync.Mutex
	for i := 0; i < cfg.Prefill; i++ {
		body, _ := json.Marshal(State{Total: int64(i), Count: int64(i/1000 + 1)})
		if err := fill.Send(ctx, client.Record{Key: []byte(fmt.Sprint(fillPrefix, i%1000)), Value: body}, func(res client.Result) {
			if res.Err != nil {
				fillMu.Lock()
				fillErr = res.Err
				fillMu.Unlock()
			}
		}); err != nil {
			return nil, err
		}
	}
	if err := fill.Flush(ctx); err != nil {
		return nil, err
	}
	if fillErr != nil {
		return nil, fmt.Errorf("prefilling the changelog: %w", fillErr)
	}
	logf("changelog prefilled with %d records", cfg.Prefill)

	// warm is the warm-up member's options: it reads the changelog as a standby first (§6.10).
	// With StaleWarm it warms up but then loads nothing at its cut-over (no state handover): the
	// checker must find wrong totals.
	warm := func(m *member, o *client.ConsumerOptions) {
		o.WarmUp = &client.WarmUp{Warm: m.proc.Warm, MaxLag: cfg.MaxLag}
		if cfg.StaleWarm {
			proc := m.proc
			o.State = nil
			o.WarmUp.Warm = func(ctx context.Context, parts []int) (int64, error) {
				lag, err := proc.Warm(ctx, parts)
				proc.installIndex()
				// A phase between its last read and the cut-over, so that the old owners
				// apply records the stale member never reads in every partition it takes: with
				// a warm-up of one quick round (lag 29 in a clean-clone run) the few records in
				// between could all fall in partitions it does not take, every total came out
				// right, and the control had no power.
				select {
				case <-time.After(cfg.Phase):
				case <-ctx.Done():
				}
				return lag, err
			}
		}
	}
	if err := r.startInput(cfg.Keys, cfg.Interval, cfg.Seed); err != nil {
		return nil, err
	}
	if err := r.startAll("m1", "m2"); err != nil {
		return nil, err
	}
	time.Sleep(cfg.Phase)

	var m3 *member
	if !cfg.StaleWarm {
		logf("m3 joins without warm-up")
		from := time.Now()
		if m3, err = r.start("m3", nil); err != nil {
			return nil, err
		}
		time.Sleep(cfg.Phase)
		rep.Cold, rep.ColdKey = r.pz.longest(from, time.Now())
		rep.ColdLoad = m3.proc.Stats().LoadTime
		logf("m3 leaves")
		if e := stopMember(m3); e != "" {
			rep.MemberErrors = append(rep.MemberErrors, e)
		}
		time.Sleep(cfg.Phase)
	}

	// The old owners' flushes are counted from before m4 starts: a warm-up member takes no key
	// until its cut-over, so every flush from here on is the cut-over's, and one counted from
	// when the loop below sees Finished could miss them (a CI run: the cut-over's flushes all
	// landed in the poll's 20 ms before the count, OldFlushes 0).
	var m4 *member
	flushes := func() (n int64) {
		for _, m := range r.running() {
			if m != m4 && m != m3 {
				n += m.proc.Stats().Flushes
			}
		}
		return n
	}
	flushesBefore := flushes()
	logf("m4 joins with warm-up")
	from := time.Now()
	m4, err = r.start("m4", warm)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(cfg.Drain); m4.cn.WarmUpStats().Finished.IsZero(); {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("member m4 did not finish its warm-up in %v (lag %d)", cfg.Drain, m4.cn.WarmUpStats().Lag)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep.WarmUp = m4.cn.WarmUpStats()
	// m4's loads are likewise all the cut-over's: it loads nothing while it warms (its
	// Warm reads the changelog's index, not the keys' state), so they count from its start.
	logf("m4 warmed up in %v (%d rounds, lag %d): cut-over", rep.WarmUp.Warmed.Round(time.Millisecond), rep.WarmUp.Rounds, rep.WarmUp.Lag)
	time.Sleep(cfg.Phase)
	// On a loaded machine the handover can outlast the phase: the pause is measured once the
	// cut-over has both sides (or the drain's patience is out, and the test says which is missing).
	for deadline := time.Now().Add(cfg.Drain); !cfg.StaleWarm && (m4.proc.Stats().Loads == 0 || flushes() == flushesBefore); {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rep.Warm, rep.WarmKey = r.pz.longest(from, time.Now())
	rep.WarmLoad = m4.proc.Stats().LoadTime
	rep.WarmLoads, rep.OldFlushes = m4.proc.Stats().Loads, flushes()-flushesBefore
	if rep.Cold > 0 {
		rep.Ratio = float64(rep.Warm) / float64(rep.Cold)
	}

	if rep.Records, err = r.finishInput(); err != nil {
		return nil, err
	}
	isFill := func(k string) bool { return strings.HasPrefix(k, fillPrefix) }
	if rep.Wrong, rep.Examples, err = r.check(rep.Records, cfg.Drain, isFill); err != nil {
		return nil, err
	}
	for _, m := range r.running() {
		if m != m3 {
			if e := stopMember(m); e != "" {
				rep.MemberErrors = append(rep.MemberErrors, e)
			}
		}
	}
	rep.Stats = r.stats()
	return rep, nil
}
