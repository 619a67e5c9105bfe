package main

import (
	"context"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkProduce measures, in one run on one embedded broker, raw JetStream async publishing and fast batches
// (with pctl's headers, and without), pctl's client-side producer and the broker-side produce
// service with pipelined thin-client requests, and reports each one's records/s and its ratio
// to raw JetStream with headers and to raw fast batches (targets: client-side >= 1.5, broker-side >= 0.8). Each
// iteration is one round of every variant with 20000 records; run it with -benchtime Nx.
//
//	go test ./cmd/pctl -run '^$' -bench Produce -benchtime 5x
func BenchmarkProduce(b *testing.B) {
	cfg := benchConfig{Records: 20000, Partitions: 8, ValueSize: 100, Keys: 10000, Partitioner: "kafka-murmur2", Rounds: b.N}
	res, err := runProduceBench(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	metric := map[string]string{}
	for short, v := range benchVariantNames {
		metric[v] = short
	}
	for _, r := range res {
		b.ReportMetric(r.Rate, metric[r.Variant]+"-rec/s")
		if r.Variant != variantRaw {
			b.ReportMetric(r.Ratio, metric[r.Variant]+"/raw")
		}
	}
	b.ReportMetric(0, "ns/op") // an iteration is a round of four variants: ns/op means nothing here
	b.Log(benchSummary(res))
}

func TestBenchProduceCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and produces 6 x 2 x 1000 records")
	}
	r := runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--records", "1000", "--rounds", "1", "--partitions", "3", "--keys", "50")
	expect(t, r, exitOK, "raw JetStream (pctl headers)", "raw JetStream (no headers)", "client-side producer", "broker-side (thin, pipelined)", "raw JetStream fast batches", "client-side, native built-in", "VS RAW BATCH", ">= 1.50x", ">= 0.80x")
	r = runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--records", "500", "--rounds", "1", "--json")
	expect(t, r, exitOK)
	var res []benchResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res) != 6 || res[0].Ratio != 1 || res[1].RatioBatch != 1 || res[3].Rate <= 0 || res[4].Variant != variantNative {
		t.Fatalf("bench --json: %v: %s", err, r)
	}
	// --variants runs the raw baseline and the chosen ones only; --sync-interval the embedded
	// broker's fsync interval.
	r = runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--records", "300", "--rounds", "1", "--variants", "broker", "--sync-interval", "2m", "--json")
	expect(t, r, exitOK)
	res = nil
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res) != 2 || res[0].Variant != variantRaw || res[1].Variant != variantBroker {
		t.Fatalf("bench --variants broker: %v: %s", err, r)
	}
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--variants", "client,fast"), exitUsage, `unknown variant "fast"`)
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--sync-interval", "soon"), exitUsage, "--sync-interval")
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "produce", "--records", "0"), exitUsage, "at least 1")
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "epoch", "--rounds", "0"), exitUsage, "--rounds >= 1")
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "epoch", "--sync-interval", "soon"), exitUsage, `--sync-interval "soon"`)
	expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "consume"), exitUsage, `unknown benchmark "consume"`)
}

// TestBenchEpochColdPairs: pctl bench epoch prints, for each size of --changes, the change's warm
// time with its cold time (the first change on a freshly started broker) beside it and their
// ratio, and --json carries the same pairs; a bad --changes is a usage error.
func TestBenchEpochColdPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three brokers")
	}
	small := []string{"bench", "epoch", "--records", "200", "--rounds", "1", "--rate", "100", "--window", "100ms", "--consumer-delay", "100ms", "--handler", "1us", "--changes", "2:4,4:8"}
	r := runCLI(context.Background(), nil, strings.NewReader(""), small...)
	expect(t, r, exitOK, "epoch changes of a jump topic", "cold: the first change on a freshly started broker", "silent readers replaced)", "on an embedded broker that fsyncs before every acknowledgement")
	line := regexp.MustCompile(`(?m)^  (\d+) -> (\d+) partitions +warm +([0-9.]+)ms +cold +([0-9.]+)ms +warm/cold ([0-9.]+)$`)
	got := line.FindAllStringSubmatch(r.stdout, -1)
	if len(got) != 2 || got[0][1] != "2" || got[0][2] != "4" || got[1][1] != "4" || got[1][2] != "8" {
		t.Fatalf("want a warm/cold line for 2 -> 4 and for 4 -> 8, in that order: %q\n%s", got, r.stdout)
	}
	for _, g := range got {
		warm, _ := strconv.ParseFloat(g[3], 64)
		cold, _ := strconv.ParseFloat(g[4], 64)
		ratio, _ := strconv.ParseFloat(g[5], 64)
		if warm <= 0 || cold <= 0 || math.Abs(ratio-warm/cold) > 0.01+0.06*warm/cold {
			t.Fatalf("%s -> %s: warm %vms, cold %vms, ratio %v: want both measured and the ratio warm/cold", g[1], g[2], warm, cold, ratio)
		}
	}
	r = runCLI(context.Background(), nil, strings.NewReader(""), append(small[:len(small)-1], "3:6", "--sync-interval", "2m", "--json")...)
	expect(t, r, exitOK)
	var res struct {
		SyncInterval        time.Duration
		GatedReaderRestarts *int64
		Changes             []struct {
			From, To   int
			Warm, Cold time.Duration
			Ratio      float64
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res.Changes) != 1 {
		t.Fatalf("bench epoch --json: %v: %s", err, r)
	}
	if res.SyncInterval != 2*time.Minute || res.GatedReaderRestarts == nil {
		t.Fatalf("bench epoch --sync-interval 2m --json: sync interval %v (want 2m), reader restarts %v (want a count): %s", res.SyncInterval, res.GatedReaderRestarts, r.stdout)
	}
	if c := res.Changes[0]; c.From != 3 || c.To != 6 || c.Warm <= 0 || c.Cold <= 0 || math.Abs(c.Ratio-float64(c.Warm)/float64(c.Cold)) > 1e-9 {
		t.Fatalf("bench epoch --json: the pair %+v: want 3 -> 6, warm and cold measured, ratio warm/cold", c)
	}
	for _, bad := range []string{"8:4", "x", "4:", "0:2"} {
		expect(t, runCLI(context.Background(), nil, strings.NewReader(""), "bench", "epoch", "--changes", bad), exitUsage, "--changes")
	}
}
