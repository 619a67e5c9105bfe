package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/internal/progress"
)

func init() {
	register(command{name: "bench", summary: "benchmarks: produce throughput vs raw JetStream (bench produce), epoch gating (bench epoch)", run: cmdBench})
}

const benchHelp = `
Measures, in one run and on the same broker, topic, streams and records, how fast these publish:

  raw JetStream   nats.go's jetstream.PublishMsgAsync of the records to their partition
                  subjects, with the headers pctl's producer sets (key, producer, sequence,
                  Nats-Msg-Id); the partitions are computed before the clock starts. The
                  baseline: everything but pctl's client machinery.
  raw fast batches the same records and headers as JetStream fast batches (nats-server 2.14+):
                  per partition one batch open at a time, up to 4096 records, committed by an
                  end-of-batch, 1024 messages in flight beyond the last flow acknowledgement.
                  The second baseline: the fastest raw publish (no settling, no verification).
  raw, no headers the same as raw JetStream without headers (the cost of the headers themselves).
  client-side     pctl's producer (client.Producer): partitions with the topic's module,
                  orders, tracks every acknowledgement.
  client-side, native built-in
                  the same with client.Options.NativeBuiltins: a built-in's epochs are
                  partitioned by its Go implementation (spec/builtins.md), not its module.
  broker-side     thin-client requests to the broker's produce service, many in flight and
                  batched while the broker is busy (client.ThinProducer), which partitions and
                  publishes them.

Each variant sends every record and waits for every acknowledgement; the table gives records/s
(median of --rounds rounds after an unmeasured warm-up round, the variants' order rotating from
round to round), the ratio to raw JetStream with headers and to raw fast batches. Targets
(issue 17): client-side >= 1.5x raw, broker-side >= 0.8x raw. --sync-interval 2m shows the CPU
cost of each path; the default (fsync before every acknowledgement) mostly the disk's.

By default it starts an embedded broker in a temporary directory; with --server it uses a
running broker (--creds must be admin: it creates and deletes a topic bench-<random>).
`

func cmdBench(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stderr
		if len(args) > 0 {
			w = e.stdout
		}
		fmt.Fprintln(w, "Usage: pctl bench produce|epoch|sync|backfill [flags]\n\nSubcommands:\n  produce      produce throughput: raw JetStream vs client-side vs broker-side\n  epoch        epoch gating: consumer throughput gated vs not, delivery delay at a change vs pausing producers\n  sync         the cost of fsync before acknowledging: produce throughput with sync_interval always vs 2m\n  backfill     what a backfill costs: change time, keys/s, a live group's delay, against the same change without")
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "produce":
		return cmdBenchProduce(e, args[1:])
	case "epoch":
		return cmdBenchEpoch(e, args[1:])
	case "sync":
		return cmdBenchSync(e, args[1:])
	case "backfill":
		return cmdBenchBackfill(e, args[1:])
	}
	return usageErr(e, "bench", "unknown benchmark %q; there are: produce, epoch, sync, backfill", args[0])
}

// benchConfig sizes a produce benchmark.
type benchConfig struct {
	Records     int
	Partitions  int
	ValueSize   int
	Keys        int
	Partitioner string
	Rounds      int
	// URL and Creds (admin) of a running broker; empty URL: an embedded broker in a temp dir.
	URL, Creds string
	// SyncInterval of the embedded broker (0: fsync before every acknowledgement, pctl's
	// default).
	SyncInterval time.Duration
	// Variants to run (nil: all); the raw baseline always runs.
	Variants []string
	// Profile, if set, receives a CPU profile of the measured rounds (not the warm-up).
	Profile io.Writer
}

// benchResult is one variant's measurement.
type benchResult struct {
	Variant string  `json:"variant"`
	Rate    float64 `json:"records_per_second"` // median over the rounds
	MBps    float64 `json:"mb_per_second"`      // key + value bytes
	Ratio   float64 `json:"ratio_to_raw"`
	// RatioBatch is the ratio to raw fast batches, when they ran.
	RatioBatch float64         `json:"ratio_to_raw_batch,omitempty"`
	Target     float64         `json:"target,omitempty"`
	Rounds     []time.Duration `json:"round_ns"`
}

const (
	variantRaw      = "raw JetStream (pctl headers)"
	variantRawBare  = "raw JetStream (no headers)"
	variantClient   = "client-side producer"
	variantBroker   = "broker-side (thin, pipelined)"
	variantRawBatch = "raw JetStream fast batches"
	variantNative   = "client-side, native built-in"
	benchRawVariant = variantRaw
)

var benchVariants = []string{variantRaw, variantRawBatch, variantRawBare, variantClient, variantNative, variantBroker}

// benchVariantNames are the short names of --variants (and of the Go benchmark's metrics).
var benchVariantNames = map[string]string{"raw": variantRaw, "raw-batch": variantRawBatch, "raw-noheaders": variantRawBare, "client": variantClient, "client-native": variantNative, "broker": variantBroker}

func benchVariantList() []string {
	var names []string
	for _, v := range benchVariants {
		for n, w := range benchVariantNames {
			if w == v {
				names = append(names, n)
			}
		}
	}
	return names
}

// variants are the variants a configuration runs, in benchVariants' order: the raw baseline
// and the chosen ones.
func (cfg benchConfig) variants() []string {
	if len(cfg.Variants) == 0 {
		return benchVariants
	}
	var vs []string
	for _, v := range benchVariants {
		if v == benchRawVariant || slices.Contains(cfg.Variants, v) {
			vs = append(vs, v)
		}
	}
	return vs
}

var benchTargets = map[string]float64{variantClient: 1.5, variantBroker: 0.8}

func cmdBenchProduce(e *env, args []string) int {
	const cmd = "bench produce"
	fs := newFlags(e, cmd, "bench produce [--records N] [--partitions P] [--value-size B] [--keys K] [--rounds R] [--server URL --creds FILE]", benchHelp)
	cfg := benchConfig{}
	fs.IntVar(&cfg.Records, "records", 100000, "records per variant and round")
	fs.IntVar(&cfg.Partitions, "partitions", 8, "partitions of the bench topic")
	fs.IntVar(&cfg.ValueSize, "value-size", 100, "value size in `BYTES`")
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct keys (key-0 ... key-K-1, in turn)")
	fs.StringVar(&cfg.Partitioner, "partitioner", "kafka-murmur2", "partitioner of the bench topic (built-in name or digest)")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds; the median is reported")
	server := fs.String("server", "", "a running broker's `URL` (default: an embedded broker in a temp dir)")
	syncInterval := fs.String("sync-interval", "always", syncIntervalUsage)
	only := fs.String("variants", "", "comma-separated `LIST` of variants to run besides raw (client, broker, raw-noheaders; default: all)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured rounds to `FILE` (go tool pprof)")
	creds := fs.String("creds", "", "with --server: admin credentials `FILE`")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments")
	}
	switch {
	case cfg.Records < 1, cfg.Partitions < 1, cfg.ValueSize < 0, cfg.Keys < 1, cfg.Rounds < 1:
		return usageErr(e, cmd, "--records, --partitions, --keys and --rounds must be at least 1, --value-size at least 0")
	case *server == "" && *creds != "":
		return usageErr(e, cmd, "--creds goes with --server")
	}
	if *syncInterval != "always" {
		d, err := parseSyncInterval(*syncInterval)
		if err != nil {
			return usageErr(e, cmd, "%v", err)
		}
		if *server != "" {
			return usageErr(e, cmd, "--sync-interval is the embedded broker's; a running broker (--server) has its own")
		}
		cfg.SyncInterval = d
	}
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			v, ok := benchVariantNames[strings.TrimSpace(name)]
			if !ok {
				return usageErr(e, cmd, "--variants: unknown variant %q; there are: %s", name, strings.Join(benchVariantList(), ", "))
			}
			cfg.Variants = append(cfg.Variants, v)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return failErr(e, cmd, err)
		}
		defer f.Close()
		cfg.Profile = f
	}
	if *server != "" {
		cf := &connFlags{server: *server, creds: *creds}
		cfg.URL, cfg.Creds = cf.resolve(e)
	}
	where := "embedded broker in a temporary directory"
	if cfg.URL != "" {
		where = "broker at " + cfg.URL
	}
	if cfg.URL == "" && cfg.SyncInterval > 0 {
		where += fmt.Sprintf(", fsync every %v", cfg.SyncInterval)
	}
	fmt.Fprintf(e.stderr, "pctl %s: %d records x %d variants x %d rounds, %d partitions, %d keys, %d-byte values, %s; %s\n",
		cmd, cfg.Records, len(cfg.variants()), cfg.Rounds, cfg.Partitions, cfg.Keys, cfg.ValueSize, cfg.Partitioner, where)
	bar := progress.New(e.stderr, e.getenv, int64(cfg.Rounds*len(cfg.variants())), "bench produce", "runs")
	res, err := runProduceBench(e.ctx, cfg, func(format string, args ...any) {
		if bar != nil {
			bar.Printf("pctl %s: %s", cmd, fmt.Sprintf(format, args...))
			bar.Add(1) // one line per measured run
			return
		}
		fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
	})
	bar.Finish()
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, res)
	}
	printBench(e.stdout, cfg, res)
	return exitOK
}

func printBench(out io.Writer, cfg benchConfig, res []benchResult) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "VARIANT\tRECORDS/S\tMB/S\tVS RAW\tVS RAW BATCH\tTARGET\n")
	for _, r := range res {
		target := ""
		if r.Target > 0 {
			verdict := "met"
			if r.Ratio < r.Target {
				verdict = "MISSED"
			}
			target = fmt.Sprintf(">= %.2fx: %s", r.Target, verdict)
		}
		batch := "-"
		if r.RatioBatch > 0 {
			batch = fmt.Sprintf("%.2fx", r.RatioBatch)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.1f\t%.2fx\t%s\t%s\n", r.Variant, r.Rate, r.MBps, r.Ratio, batch, target)
	}
	_ = w.Flush()
	fmt.Fprintf(out, "(%d records per variant and round, %d partitions, %d keys, %d-byte values, %s; median of %d rounds)\n",
		cfg.Records, cfg.Partitions, cfg.Keys, cfg.ValueSize, cfg.Partitioner, cfg.Rounds)
}

// produceBench is one benchmark setup: a broker, a topic, the records and their partitions.
type produceBench struct {
	cfg     benchConfig
	url     string
	creds   string // producer credentials (admin with --server)
	admin   *client.Client
	topic   string
	epoch   int
	keys    [][]byte
	value   []byte
	subject []string // per record: its partition's subject
	bytes   int64    // key + value bytes of all records
	cleanup []func()
}

// runProduceBench sets up, runs cfg.Rounds rounds of every variant and returns the medians.
func runProduceBench(ctx context.Context, cfg benchConfig, logf func(string, ...any)) ([]benchResult, error) {
	pb := &produceBench{cfg: cfg}
	defer pb.close()
	if err := pb.setup(ctx); err != nil {
		return nil, err
	}
	// A warm-up round, not measured: the first publishes to new stream files, the first module
	// instantiation and the heap growing would otherwise count against whichever variant runs
	// first.
	variants := cfg.variants()
	for _, v := range variants {
		if _, err := pb.run(ctx, v, -1); err != nil {
			return nil, fmt.Errorf("%s, warm-up: %w", v, err)
		}
	}
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	times := map[string][]time.Duration{}
	for r := 0; r < cfg.Rounds; r++ {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			d, err := pb.run(ctx, v, r)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", v, r+1, err)
			}
			times[v] = append(times[v], d)
			if logf != nil {
				logf("round %d: %-30s %8.0f records/s", r+1, v, float64(cfg.Records)/d.Seconds())
			}
		}
	}
	return pb.results(times), nil
}

// median is the median of some durations.
func (pb *produceBench) median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (pb *produceBench) results(times map[string][]time.Duration) []benchResult {
	median := pb.median
	var res []benchResult
	var raw, rawBatch float64
	for _, v := range pb.cfg.variants() {
		d := median(times[v])
		r := benchResult{Variant: v, Rate: float64(pb.cfg.Records) / d.Seconds(), MBps: float64(pb.bytes) / d.Seconds() / 1e6,
			Target: benchTargets[v], Rounds: times[v]}
		switch v {
		case benchRawVariant:
			raw = r.Rate
		case variantRawBatch:
			rawBatch = r.Rate
		}
		res = append(res, r)
	}
	for i := range res {
		res[i].Ratio = res[i].Rate / raw
		if rawBatch > 0 {
			res[i].RatioBatch = res[i].Rate / rawBatch
		}
	}
	return res
}

func (pb *produceBench) close() {
	for i := len(pb.cleanup) - 1; i >= 0; i-- {
		pb.cleanup[i]()
	}
}

func (pb *produceBench) setup(ctx context.Context) error {
	cfg := pb.cfg
	pb.url, pb.creds = cfg.URL, cfg.Creds
	adminCreds := cfg.Creds
	if pb.url == "" {
		dir, err := os.MkdirTemp("", "pctl-bench-")
		if err != nil {
			return err
		}
		pb.cleanup = append(pb.cleanup, func() { os.RemoveAll(dir) })
		b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncInterval: cfg.SyncInterval})
		if err != nil {
			return err
		}
		pb.cleanup = append(pb.cleanup, func() { b.Close() })
		pb.url, pb.creds, adminCreds = b.ClientURL(), b.CredsPath(broker.RoleProducer), b.CredsPath(broker.RoleAdmin)
	}
	admin, err := client.Connect(ctx, client.Options{URL: pb.url, Creds: adminCreds, Name: "pctl bench admin"})
	if err != nil {
		return err
	}
	pb.admin = admin
	pb.cleanup = append(pb.cleanup, func() { admin.Close() })
	pb.topic = "bench-" + nuid.Next()
	t, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: pb.topic, Partitions: cfg.Partitions, Partitioner: cfg.Partitioner})
	if err != nil {
		return err
	}
	pb.cleanup = append(pb.cleanup, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admin.DeleteTopic(dctx, pb.topic)
	})
	cur := t.Current()
	pb.epoch = cur.Epoch
	f, err := admin.Partitioner(ctx, cur.Partitioner)
	if err != nil {
		return err
	}
	pb.keys = make([][]byte, cfg.Keys)
	for i := range pb.keys {
		pb.keys[i] = []byte("key-" + strconv.Itoa(i))
	}
	pb.value = make([]byte, cfg.ValueSize)
	_, _ = rand.Read(pb.value)
	subjects := make([]string, cfg.Partitions)
	for q := range subjects {
		subjects[q] = wire.DataSubject(pb.topic, cur.Epoch, q)
	}
	pb.subject = make([]string, cfg.Records)
	for i := range pb.subject {
		k := pb.keys[i%cfg.Keys]
		q, err := f.Partition(k, int32(cfg.Partitions))
		if err != nil {
			return err
		}
		pb.subject[i] = subjects[q]
		pb.bytes += int64(len(k) + len(pb.value))
	}
	return nil
}

// run sends every record with one variant and returns the time until the last acknowledgement.
// Setup (connections, producers) is outside the measured time; the streams are purged after.
func (pb *produceBench) run(ctx context.Context, variant string, round int) (time.Duration, error) {
	defer pb.purge(ctx)
	switch variant {
	case variantRaw, variantRawBare:
		return pb.runRaw(ctx, variant == variantRaw, round)
	case variantRawBatch:
		return pb.runRawBatch(ctx, round)
	case variantClient, variantNative:
		return pb.runClient(ctx, round, variant == variantNative)
	case variantBroker:
		return pb.runBroker(ctx, round)
	}
	return 0, fmt.Errorf("unknown variant %q", variant)
}

func (pb *produceBench) runRaw(ctx context.Context, headers bool, round int) (time.Duration, error) {
	opts := []nats.Option{nats.Name("pctl bench raw")}
	if pb.creds != "" {
		o, err := nats.NkeyOptionFromSeed(pb.creds)
		if err != nil {
			return 0, err
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(pb.url, opts...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var failed atomic.Int64
	var firstErr atomic.Value
	// The same JetStream settings as client.Connect's, so that only the machinery differs.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(30*time.Second),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return 0, err
	}
	id, token := "raw"+strconv.Itoa(round)+nuid.Next(), produce.NewToken()
	start := time.Now()
	for i, subj := range pb.subject {
		m := nats.NewMsg(subj)
		m.Data = pb.value
		if headers {
			produce.SetIdentity(m.Header, pb.keys[i%len(pb.keys)], false, id, uint64(i+1), token)
		}
		// Past 65,536 outstanding a publish waits for an acknowledgement to free a slot; with
		// fsync before every acknowledgement nats.go's default wait (200 ms) can pass without one
		// on a busy disk, and the baseline would fail rather than measure.
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			return 0, fmt.Errorf("raw publish %d of %d: %w", i+1, len(pb.subject), err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, errors.New("raw publishes not acknowledged within 5 minutes")
	}
	d := time.Since(start)
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d raw publishes failed: %v", n, firstErr.Load())
	}
	return d, nil
}

func (pb *produceBench) connect(ctx context.Context, name string) (*client.Client, error) {
	return client.Connect(ctx, client.Options{URL: pb.url, Creds: pb.creds, Name: name})
}

func (pb *produceBench) runClient(ctx context.Context, round int, native bool) (time.Duration, error) {
	c, err := client.Connect(ctx, client.Options{URL: pb.url, Creds: pb.creds, Name: "pctl bench client-side", NativeBuiltins: native})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, pb.topic, client.ProducerOptions{ID: "client" + strconv.Itoa(round) + nuid.Next()})
	if err != nil {
		return 0, err
	}
	return pb.send(ctx, p)
}

func (pb *produceBench) runBroker(ctx context.Context, round int) (time.Duration, error) {
	c, err := pb.connect(ctx, "pctl bench broker-side")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	p, err := c.NewThinProducer(pb.topic, client.ThinOptions{ID: "thin" + strconv.Itoa(round) + nuid.Next()})
	if err != nil {
		return 0, err
	}
	return pb.send(ctx, p)
}

func (pb *produceBench) send(ctx context.Context, p sender) (time.Duration, error) {
	var failed atomic.Int64
	var firstErr atomic.Value
	done := func(r client.Result) {
		if r.Err != nil {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, r.Err)
		}
	}
	start := time.Now()
	for i := range pb.subject {
		if err := p.Send(ctx, client.Record{Key: pb.keys[i%len(pb.keys)], Value: pb.value}, done); err != nil {
			return 0, err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		return 0, err
	}
	d := time.Since(start)
	_ = p.Close(fctx)
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d records failed: %v", n, firstErr.Load())
	}
	return d, nil
}

// purge empties the bench topic's streams between runs, so that every run starts alike.
func (pb *produceBench) purge(ctx context.Context) {
	for q := 0; q < pb.cfg.Partitions; q++ {
		if s, err := pb.admin.JetStream().Stream(ctx, wire.StreamName(pb.topic, q)); err == nil {
			_ = s.Purge(ctx)
		}
	}
}

// syncIntervalUsage is the help of the bench commands' --sync-interval flag.
const syncIntervalUsage = "the embedded broker's fsync: always (before every acknowledgement, pctl's default) or a `DURATION` such as 2m (nats-server's default; shows the CPU cost of each path instead of the disk's)"

// parseSyncInterval reads --sync-interval: "always" (0: fsync before every acknowledgement) or a
// positive duration.
func parseSyncInterval(s string) (time.Duration, error) {
	if s == "always" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--sync-interval %q: give always or a positive duration such as 2m", s)
	}
	return d, nil
}

// benchSummary is a one-line summary (for logs and the Go benchmark).
func benchSummary(res []benchResult) string {
	var parts []string
	for _, r := range res {
		parts = append(parts, fmt.Sprintf("%s %.0f/s (%.2fx)", r.Variant, r.Rate, r.Ratio))
	}
	return strings.Join(parts, "; ")
}
