package stateful_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/examples/stateful"
)

// TestStatefulScaleOut is issue 15's proof (stateful.RunScaleOut): the running-total processor
// goes from 2 to 4 members (sticky assignor), its input and changelog topics from 4 to 8
// partitions (linear hashing, input first, changelog after), then both swap their function (to
// jump), and a member crashes (its connections close without a release: its uncommitted records
// are delivered again). Records flow throughout. At the end every key's total and count, as the
// changelog has them, equal the sums computed directly from the input topic's streams: nothing
// lost, nothing counted twice. Then, as a baseline in the same run, every member is stopped and
// fresh ones restore the state from the changelog (stop-and-restore); the longest per-key pause
// of each phase is printed with their ratio (no wall-clock assertion).
func TestStatefulScaleOut(t *testing.T) {
	if raceEnabled && os.Getenv("PCTL_STATEFUL_RACE") == "" {
		// About two minutes under the race detector (it passed so when written); the client
		// package's state tests cover the handover code under -race in CI.
		t.Skip("under -race only with PCTL_STATEFUL_RACE=1 (about two minutes)")
	}
	rep := run(t, stateful.ScaleOutConfig{})
	t.Logf("%d records, %d keys: applied %d, duplicates skipped %d, loads %d, flushes %d, changelog records read %d",
		rep.Records, rep.Keys, rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads, rep.Stats.Flushes, rep.Stats.ChangelogRead)
	for _, p := range rep.Phases {
		t.Logf("  %-34s longest per-key pause %v (key %s)", p.Name, p.Longest.Round(time.Millisecond), p.Key)
	}
	t.Logf("longest per-key pause during scale-out (members, expansions, swap) %v, stop-and-restore %v: ratio %.2f",
		rep.ScaleOut.Round(time.Millisecond), rep.Baseline.Round(time.Millisecond), rep.Ratio)
	for _, e := range rep.MemberErrors {
		t.Errorf("a member stopped with an error: %s", e)
	}
	if rep.Wrong > 0 {
		t.Fatalf("%d of %d keys have a wrong total: %v", rep.Wrong, rep.Keys, rep.Examples)
	}
}

// The checker of TestStatefulScaleOut catches lost state: the same processor without the state
// handover (each member starts the keys it gets from zero) ends with wrong totals after only
// the first phase (2 -> 4 members).
func TestStatefulScaleOutCheckerCatchesLostState(t *testing.T) {
	rep := run(t, stateful.ScaleOutConfig{NoHandover: true})
	if rep.Wrong == 0 {
		t.Fatalf("without the state handover every total came out right: the checker cannot see lost state")
	}
	t.Logf("without the state handover %d of %d keys have a wrong total (the checker works): %v", rep.Wrong, rep.Keys, rep.Examples[0])
}

func run(t *testing.T, cfg stateful.ScaleOutConfig) *stateful.ScaleOutReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg.Logf = t.Logf
	if raceEnabled {
		// The race detector slows every member down several times: less input, longer sessions
		// (members that miss heartbeats would take each other's partitions all the time).
		cfg.Interval, cfg.SessionTimeout, cfg.Drain = 10*time.Millisecond, 6*time.Second, 3*time.Minute
	}
	if testing.Verbose() {
		cfg.MemberLogf = t.Logf
	}
	rep, err := stateful.RunScaleOut(ctx, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestStatefulWarmUp is issue 15's warm-up proof (stateful.RunWarmUp): 2 members over a
// changelog that holds a history, a third joins without warm-up and leaves, a fourth joins with
// warm-up (spec/protocol.md §6.10). Every key's total equals the input's; the longest per-key
// pause of the two joins is printed with their ratio (no wall-clock assertion).
// PCTL_WARMUP_PREFILL sets the history's size (default 30000 records).
func TestStatefulWarmUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := stateful.WarmUpConfig{Logf: t.Logf, Phase: 1500 * time.Millisecond}
	if s := os.Getenv("PCTL_WARMUP_PREFILL"); s != "" {
		cfg.Prefill, _ = strconv.Atoi(s)
	}
	if raceEnabled {
		cfg.Interval, cfg.SessionTimeout, cfg.Drain = 10*time.Millisecond, 6*time.Second, 3*time.Minute
		if cfg.Prefill == 0 {
			cfg.Prefill = 10000
		}
	}
	if testing.Verbose() {
		cfg.MemberLogf = t.Logf
	}
	rep, err := stateful.RunWarmUp(ctx, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.MemberErrors {
		t.Errorf("a member stopped with an error: %s", e)
	}
	if rep.Wrong > 0 {
		t.Fatalf("%d of %d keys have a wrong total: %v", rep.Wrong, rep.Keys, rep.Examples)
	}
	if rep.WarmUp.Rounds == 0 || rep.WarmUp.Skipped {
		t.Fatalf("the fourth member did not warm up: %+v", rep.WarmUp)
	}
	if rep.WarmLoads == 0 || rep.OldFlushes == 0 {
		t.Fatalf("at the cut-over the warmed member loaded %d times and the others flushed %d times: want both (the handover of §6.9 at every cut-over)", rep.WarmLoads, rep.OldFlushes)
	}
	t.Logf("%d records, %d keys, a history of %d changelog records: applied %d, duplicates %d, loads %d",
		rep.Records, rep.Keys, rep.Prefill, rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads)
	t.Logf("join without warm-up: longest per-key pause %v (key %s, its loads took %v); with warm-up (%v warming, %d rounds, lag %d at the cut-over): %v (key %s, %d loads after the cut-over taking %v, %d flushes by the old owners); ratio %.2f",
		rep.Cold.Round(time.Millisecond), rep.ColdKey, rep.ColdLoad.Round(time.Millisecond), rep.WarmUp.Warmed.Round(time.Millisecond), rep.WarmUp.Rounds, rep.WarmUp.Lag,
		rep.Warm.Round(time.Millisecond), rep.WarmKey, rep.WarmLoads, rep.WarmLoad.Round(time.Millisecond), rep.OldFlushes, rep.Ratio)
}

// The checker of TestStatefulWarmUp catches a wrong warm-up: a member that uses the state it read
// while warming without loading it again at the cut-over ends with wrong totals (the records the
// old owners applied between its last warm-up read and the cut-over are missing).
func TestStatefulWarmUpCheckerCatchesStaleState(t *testing.T) {
	if raceEnabled {
		// Shrunk under -race, the stale member's missed records can all fall before its last
		// warm-up read (a clean-clone run: lag 15 at the cut-over and every total right), and
		// the check has no power. It runs at full size in the step without -race
		// (scripts/test.sh), where the race detector has nothing to add to a checker's test.
		t.Skip("runs at full size without -race (scripts/test.sh's norace step)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := stateful.WarmUpConfig{Logf: t.Logf, Phase: time.Second, Prefill: 5000, StaleWarm: true}
	rep, err := stateful.RunWarmUp(ctx, b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Wrong == 0 {
		t.Fatalf("a member that used its warmed state without loading it at the cut-over got every total right: the checker cannot see stale state")
	}
	t.Logf("with stale warmed state %d of %d keys have a wrong total (the checker works): %v", rep.Wrong, rep.Keys, rep.Examples[0])
}
