package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/scenario"
)

// TestBenchBackfillCommand: 'pctl bench backfill' runs both parts at a small size, prints the
// ratios against the plain change of the same run, and refuses bad flags.
func TestBenchBackfillCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and changes four topics")
	}
	r := runCLI(context.Background(), nil, strings.NewReader(""), "bench", "backfill", "--keys", "300", "--partitions", "2", "--rate", "200", "--window", "300ms", "--json")
	expect(t, r, exitOK)
	var res scenario.BackfillBenchResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("bench backfill --json: %v: %s", err, r)
	}
	// Every one of the 300 keys is copied (nothing writes to them during part 1).
	if res.Keys != 300 || res.Copied != 300 || res.PlainChange <= 0 || res.CompactBackfilled < res.CompactChange || res.DelayRecords == 0 {
		t.Fatalf("bench backfill --json: %+v", res)
	}
	r = runCLI(context.Background(), nil, strings.NewReader(""), "bench", "backfill", "--keys", "200", "--partitions", "1", "--rate", "100", "--window", "200ms")
	expect(t, r, exitOK, "plain, no backfill", "compacted, backfill", "x the plain change", "keys/s", "p99")
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "backfill", "--keys", "10"), exitUsage, "--keys >= 100")
}
