package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"pctl.dev/pctl/broker"
)

const benchSyncHelp = `
Measures, in one run, what fsync before acknowledging costs: two embedded brokers in temporary
directories, one with --sync-interval always (pctl's default: JetStream fsyncs every write before
it acknowledges it) and one with --sync-interval DURATION (nats-server's default, 2m: fsync in the
background), and the same records produced to each with raw JetStream publishes (pctl's headers)
and with pctl's client-side producer, the brokers' order alternating from round to round. It
prints records/s (median of --rounds rounds after a warm-up round) and the ratio always/interval.
`

// syncBenchVariants are what runs against each broker.
var syncBenchVariants = []string{variantRaw, variantClient}

func cmdBenchSync(e *env, args []string) int {
	const cmd = "bench sync"
	fs := newFlags(e, cmd, "bench sync [--records N] [--partitions P] [--value-size B] [--keys K] [--rounds R] [--interval DURATION]", benchSyncHelp)
	cfg := benchConfig{Partitioner: "kafka-murmur2"}
	fs.IntVar(&cfg.Records, "records", 50000, "records per variant, broker and round")
	fs.IntVar(&cfg.Partitions, "partitions", 8, "partitions of the bench topic")
	fs.IntVar(&cfg.ValueSize, "value-size", 100, "value size in `BYTES`")
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct keys")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds; the median is reported")
	interval := fs.Duration("interval", 2*time.Minute, "the other broker's --sync-interval")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments")
	}
	if cfg.Records < 1 || cfg.Partitions < 1 || cfg.Keys < 1 || cfg.Rounds < 1 || cfg.ValueSize < 0 || *interval <= 0 {
		return usageErr(e, cmd, "--records, --partitions, --keys and --rounds must be at least 1, --value-size at least 0, --interval positive")
	}
	fmt.Fprintf(e.stderr, "pctl %s: %d records x %d variants x 2 brokers x %d rounds, %d partitions, %d-byte values; sync always vs every %v\n",
		cmd, cfg.Records, len(syncBenchVariants), cfg.Rounds, cfg.Partitions, cfg.ValueSize, *interval)
	res, err := runSyncBench(e.ctx, cfg, *interval, func(format string, args ...any) {
		fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
	})
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, res)
	}
	printSyncBench(e.stdout, cfg, *interval, res)
	return exitOK
}

// syncBenchResult is one variant's rates with each broker.
type syncBenchResult struct {
	Variant      string  `json:"variant"`
	Always       float64 `json:"always_records_per_second"`
	Interval     float64 `json:"interval_records_per_second"`
	Ratio        float64 `json:"ratio_always_to_interval"`
	AlwaysRounds []time.Duration
	OtherRounds  []time.Duration
}

func runSyncBench(ctx context.Context, cfg benchConfig, interval time.Duration, logf func(string, ...any)) ([]syncBenchResult, error) {
	var benches [2]*produceBench
	for i, si := range []time.Duration{0, interval} {
		dir, err := os.MkdirTemp("", "pctl-bench-sync-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncInterval: si})
		if err != nil {
			return nil, err
		}
		defer b.Close()
		c := cfg
		c.URL, c.Creds = b.ClientURL(), b.CredsPath(broker.RoleAdmin)
		pb := &produceBench{cfg: c}
		defer pb.close()
		if err := pb.setup(ctx); err != nil {
			return nil, err
		}
		benches[i] = pb
	}
	for _, pb := range benches { // warm-up
		for _, v := range syncBenchVariants {
			if _, err := pb.run(ctx, v, -1); err != nil {
				return nil, fmt.Errorf("%s, warm-up: %w", v, err)
			}
		}
	}
	times := [2]map[string][]time.Duration{{}, {}}
	names := [2]string{"always", interval.String()}
	for r := 0; r < cfg.Rounds; r++ {
		for _, v := range syncBenchVariants {
			for k := 0; k < 2; k++ {
				i := (k + r) % 2
				d, err := benches[i].run(ctx, v, r)
				if err != nil {
					return nil, fmt.Errorf("%s (sync %s), round %d: %w", v, names[i], r+1, err)
				}
				times[i][v] = append(times[i][v], d)
				logf("round %d: %-30s sync %-6s %8.0f records/s", r+1, v, names[i], float64(cfg.Records)/d.Seconds())
			}
		}
	}
	var res []syncBenchResult
	for _, v := range syncBenchVariants {
		a := float64(cfg.Records) / medianDuration(times[0][v]).Seconds()
		o := float64(cfg.Records) / medianDuration(times[1][v]).Seconds()
		res = append(res, syncBenchResult{Variant: v, Always: a, Interval: o, Ratio: a / o, AlwaysRounds: times[0][v], OtherRounds: times[1][v]})
	}
	return res, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	pb := &produceBench{}
	return pb.median(ds)
}

func printSyncBench(out io.Writer, cfg benchConfig, interval time.Duration, res []syncBenchResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "VARIANT\tSYNC ALWAYS\tSYNC EVERY %v\tALWAYS / INTERVAL\n", interval)
	for _, r := range res {
		fmt.Fprintf(w, "%s\t%.0f/s\t%.0f/s\t%.2fx\n", r.Variant, r.Always, r.Interval, r.Ratio)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "(%d records per variant, broker and round, %d partitions, %d keys, %d-byte values; median of %d rounds)\n",
		cfg.Records, cfg.Partitions, cfg.Keys, cfg.ValueSize, cfg.Rounds)
}
