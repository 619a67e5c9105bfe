package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"pctl.dev/pctl/broker/scenario"
)

const benchBackfillHelp = `
Measures, in one run on an embedded broker in a temporary directory, what a backfill costs
(spec/protocol.md §10.3): the same epoch change (the partition count doubles) of the same keys
on a plain topic (no backfill) and on a compacted topic (every key copied into the new epoch):

  1. how long the change takes: plain (request to active), compacted (to active, and until the
     backfill ended), the ratio, and the backfill's rate in keys/s;
  2. a live group's delivery delay (from the application's send to delivery) of records offered
     at --rate for --window before and after the change, while the backfill runs: p50, p99, max.
`

func cmdBenchBackfill(e *env, args []string) int {
	const cmd = "bench backfill"
	fs := newFlags(e, cmd, "bench backfill [--keys N] [--partitions P] [--rate R] [--window D] [--json]", benchBackfillHelp)
	keys := fs.Int("keys", 100000, "live keys in the topic before the change")
	parts := fs.Int("partitions", 4, "partitions before the change (it doubles them)")
	rate := fs.Int("rate", 2000, "records per second offered in the delay part")
	window := fs.Duration("window", 2*time.Second, "traffic before and after the change in the delay part")
	asJSON := fs.Bool("json", false, "print JSON")
	verbose := fs.Bool("verbose", false, "say what it does on standard error")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 || *keys < 100 || *parts < 1 || *rate < 10 || *window < 100*time.Millisecond {
		return usageErr(e, cmd, "give --keys >= 100, --partitions >= 1, --rate >= 10, --window >= 100ms and no arguments")
	}
	dir, err := os.MkdirTemp("", "pctl-bench-backfill-")
	if err != nil {
		return failErr(e, cmd, err)
	}
	defer os.RemoveAll(dir)
	cfg := scenario.BackfillBenchConfig{DataDir: dir, Keys: *keys, Partitions: *parts, Rate: *rate, Window: *window}
	if *verbose {
		start := time.Now()
		cfg.Logf = func(format string, args ...any) {
			fmt.Fprintf(e.stderr, "%8.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	res, err := scenario.BenchBackfill(e.ctx, cfg)
	if err != nil {
		return failErr(e, cmd, err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitOK
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	fmt.Fprintf(e.stdout, "epoch change %d -> %d partitions, %d keys\n", *parts, 2**parts, res.Keys)
	fmt.Fprintf(e.stdout, "  plain, no backfill      active after %9s\n", ms(res.PlainChange))
	fmt.Fprintf(e.stdout, "  compacted, backfill     active after %9s, backfilled after %9s (%.1fx the plain change)\n",
		ms(res.CompactChange), ms(res.CompactBackfilled), res.CompactBackfilled.Seconds()/res.PlainChange.Seconds())
	fmt.Fprintf(e.stdout, "  backfill rate           %9.0f keys/s (%d copies)\n", res.KeysPerSecond, res.Copied)
	fmt.Fprintf(e.stdout, "live group's delivery delay around the change (%d records/s, %v each side)\n", *rate, *window)
	fmt.Fprintf(e.stdout, "  plain, no backfill      p50 %9s  p99 %9s  max %9s\n", ms(res.PlainP50), ms(res.PlainP99), ms(res.PlainMax))
	fmt.Fprintf(e.stdout, "  compacted, backfill     p50 %9s  p99 %9s  max %9s  (p99 %.2fx; the backfill took %s)\n",
		ms(res.CompactP50), ms(res.CompactP99), ms(res.CompactMax), res.CompactP99.Seconds()/res.PlainP99.Seconds(), ms(res.DelayBackfill))
	return exitOK
}
