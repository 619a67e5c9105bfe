package chaos_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker/chaos"
)

// TestClusterFaults is the cluster fault suite: one run per seed (see package chaos), each on a
// fresh 3-node cluster of processes with 2 brokers. CI runs seeds 1 to 10, which run every fault
// kind first at least once (the first fault of seed s is chaos.Kinds[s mod 7]);
// PCTL_CHAOS_SEEDS=N runs seeds 1 to N (100 before a change to the cluster paths lands),
// PCTL_CHAOS_SEED=S runs seed S alone (to rerun a failure as it was), and PCTL_CHAOS_KEEP=1 keeps
// each run's directory (node and broker logs, data, and the test process's goroutines when the
// live group is stuck).
func TestClusterFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster fault suite starts 3-node clusters and brokers as processes")
	}
	seeds := seedList(t)
	var mu sync.Mutex
	var summaries []string
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			logs := &ringLog{max: 400}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := t.TempDir()
			if os.Getenv("PCTL_CHAOS_KEEP") != "" {
				// Keep the nodes' and brokers' logs and data for a post-mortem.
				var err error
				if dir, err = os.MkdirTemp("", fmt.Sprintf("chaos-seed%d-", seed)); err != nil {
					t.Fatal(err)
				}
				t.Logf("PCTL_CHAOS_KEEP: the run's files stay in %s (the whole log in run.log)", dir)
				f, err := os.Create(filepath.Join(dir, "run.log"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				logs.file = f
			}
			res, err := chaos.Run(ctx, chaos.Config{Seed: seed, Dir: dir, Logf: logs.add})
			if err != nil {
				t.Logf("log:\n%s", logs)
				t.Fatal(err)
			}
			mu.Lock()
			summaries = append(summaries, res.Summary())
			mu.Unlock()
			t.Log(res.Summary())
			for _, f := range res.Faults {
				t.Logf("  fault %-18s %-40s began %5.1fs ended %5.1fs delay %v %s", f.Kind, f.Target, f.Began.Seconds(), f.Ended.Seconds(), f.Stall.Round(time.Millisecond), f.Err)
			}
			for _, s := range res.SetupRetries {
				t.Logf("  setup retried: %s", s)
			}
			for _, c := range res.Changes {
				t.Logf("  change %-30s began %5.1fs took %v attempts %d done %v errors %v", c.Change, c.Began.Seconds(), c.Took.Round(time.Millisecond), c.Attempts, c.Done, c.Errors)
			}
			if !res.OK() {
				t.Errorf("seed %d failed:\n  %s\nlast log lines:\n%s", seed, strings.Join(res.Failures(), "\n  "), logs)
			}
		})
	}
	t.Logf("cluster fault suite, %d seeds:\n%s", len(seeds), strings.Join(summaries, "\n"))
}

func seedList(t *testing.T) []int64 {
	if s := os.Getenv("PCTL_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("PCTL_CHAOS_SEED=%q: not a number", s)
		}
		return []int64{n}
	}
	n := 10
	if s := os.Getenv("PCTL_CHAOS_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("PCTL_CHAOS_SEEDS=%q: want a count such as 100", s)
		}
		n = v
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// ringLog keeps the last lines of a run's log, for a failure's report.
type ringLog struct {
	mu    sync.Mutex
	max   int
	lines []string
	file  *os.File // every line, when set (PCTL_CHAOS_KEEP)
}

func (l *ringLog) add(format string, args ...any) {
	line := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	if l.file != nil {
		fmt.Fprintln(l.file, line)
	}
	if len(l.lines) > 2*l.max {
		l.lines = append([]string(nil), l.lines[len(l.lines)-l.max:]...)
	}
	l.mu.Unlock()
}

func (l *ringLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if len(lines) > l.max {
		lines = lines[len(lines)-l.max:]
	}
	return strings.Join(lines, "\n")
}
