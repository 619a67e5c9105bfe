package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"pctl.dev/pctl/broker/scenario"
)

const benchEpochHelp = `
Measures, in one run on an embedded broker in a temporary directory:

  1. consumer throughput: a group reads the same records (written through two epoch changes)
     with epoch gating and with gating off, and the ratio of the two (what order costs);
  2. delivery delay at an epoch change: records offered at a fixed rate for a window, an epoch
     change (the partition count doubles), another window. The delay of a record is from the
     moment the application asked to send it to its delivery. pctl's change (producers re-send
     in order, consumers gate per key) against the simple alternative: pause all producers,
     wait until the group has drained every old partition, change, resume;
  3. epoch changes of jump topics by size (--changes), each as a pair measured in the same run:
     cold, the first change on a freshly started broker, and warm, the same change again on that
     broker (a second topic of the same size, the first deleted); each size's warm time is
     printed with its cold time beside it and their ratio.
`

func cmdBenchEpoch(e *env, args []string) int {
	const cmd = "bench epoch"
	fs := newFlags(e, cmd, "bench epoch [--records N] [--rate R] [--window D] [--changes FROM:TO,...] [--sync-interval always|D] [--json]", benchEpochHelp)
	records := fs.Int("records", 200000, "records for the throughput part")
	rounds := fs.Int("rounds", 3, "reads of each kind (gated, ungated) in the throughput part, alternating, after a warm-up read; medians are reported")
	rate := fs.Int("rate", 5000, "records per second offered in the delay part")
	window := fs.Duration("window", 2*time.Second, "traffic before and after the change in the delay part")
	members := fs.Int("members", 2, "consumer-group members")
	handler := fs.Duration("handler", 150*time.Microsecond, "processing time per record in the delay part")
	cdelay := fs.Duration("consumer-delay", time.Second, "how late the group starts in the delay part (its lag at the change)")
	syncInterval := fs.String("sync-interval", "always", syncIntervalUsage)
	changes := fs.String("changes", "16:32,64:128", "epoch changes measured cold and warm, FROM:TO partitions, comma-separated; \"none\" for none")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 || *records < 100 || *rate < 10 || *window < 100*time.Millisecond || *members < 1 || *rounds < 1 {
		return usageErr(e, cmd, "give --records >= 100, --rounds >= 1, --rate >= 10, --window >= 100ms, --members >= 1 and no arguments")
	}
	sizes, err := parseChangeSizes(*changes)
	if err != nil {
		return usageErr(e, cmd, "%v", err)
	}
	sync, err := parseSyncInterval(*syncInterval)
	if err != nil {
		return usageErr(e, cmd, "%v", err)
	}
	dir, err := os.MkdirTemp("", "pctl-bench-epoch-")
	if err != nil {
		return failErr(e, cmd, err)
	}
	defer os.RemoveAll(dir)
	res, err := scenario.BenchEpoch(e.ctx, scenario.BenchConfig{DataDir: dir, Records: *records, Rounds: *rounds, Rate: *rate, Window: *window, Members: *members, Handler: *handler, ConsumerDelay: *cdelay, Changes: sizes, SyncInterval: sync})
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
	fmt.Fprintf(e.stdout, "consumer throughput (%d records, 2 epoch changes, %d members; medians of %d reads each, alternating, after a warm-up)\n", res.ThroughputRecords, *members, res.Rounds)
	fmt.Fprintf(e.stdout, "  gating on   %10.0f records/s\n", res.GatedRate)
	fmt.Fprintf(e.stdout, "  gating off  %10.0f records/s   (gated/ungated = %.2f)\n", res.UngatedRate, res.GatedRate/res.UngatedRate)
	fsync := "fsyncs before every acknowledgement"
	if res.SyncInterval > 0 {
		fsync = fmt.Sprintf("fsyncs every %v", res.SyncInterval)
	}
	fmt.Fprintf(e.stdout, "delivery delay at an epoch change (%d records/s offered, %v each side; group starts %v late, %v per record; on an embedded broker that %s)\n", *rate, *window, *cdelay, *handler, fsync)
	fmt.Fprintf(e.stdout, "  %-30s p50 %9s  p99 %9s  max %9s  (change took %s; %d silent readers replaced)\n", "pctl (fence, re-send, gate)", ms(res.GatedP50), ms(res.GatedP99), ms(res.GatedMax), ms(res.ChangeTime), res.GatedReaderRestarts)
	fmt.Fprintf(e.stdout, "  %-30s p50 %9s  p99 %9s  max %9s  (pause+drain+change took %s; %d silent readers replaced)\n", "pause producers until drained", ms(res.PauseP50), ms(res.PauseP99), ms(res.PauseMax), ms(res.PauseChangeTime), res.PauseReaderRestarts)
	if len(res.Changes) > 0 {
		fmt.Fprintf(e.stdout, "epoch changes of a jump topic (cold: the first change on a freshly started broker; warm: the same change again on it)\n")
		for _, c := range res.Changes {
			fmt.Fprintf(e.stdout, "  %-30s warm %9s  cold %9s  warm/cold %.2f\n", fmt.Sprintf("%d -> %d partitions", c.From, c.To), ms(c.Warm), ms(c.Cold), c.Ratio)
		}
	}
	return exitOK
}

// parseChangeSizes reads --changes: FROM:TO pairs, comma-separated, each growing; "none" or ""
// for none.
func parseChangeSizes(s string) ([]scenario.ChangeSize, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []scenario.ChangeSize
	for _, f := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), ":")
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || from < 1 || to <= from {
			return nil, fmt.Errorf("--changes: %q is not FROM:TO with 1 <= FROM < TO (e.g. 16:32,64:128, or none)", f)
		}
		out = append(out, scenario.ChangeSize{From: from, To: to})
	}
	return out, nil
}
