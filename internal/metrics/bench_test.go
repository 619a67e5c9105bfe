package metrics

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BenchmarkMetricsOverhead measures what metrics cost on produce throughput, each against a
// baseline measured in the same run, rounds alternating:
//
//   - broker-side: a pipelined thin producer into a broker whose produce service has the
//     metrics hooks (per-record produce metrics, plugin call time and fuel) against one without;
//   - client-side: a producer with the metrics hook against one without, on the same broker.
//
// Each b.N is one round of every variant; run with -benchtime=5x. It reports records/s per
// variant (medians), the ratios with/without, and the same ratios of CPU time per record (the
// whole process's: client, broker and server), which other processes on a shared machine
// disturb less than wall time.
func BenchmarkMetricsOverhead(b *testing.B) {
	const records = 20000
	ctx := context.Background()
	start := func(hooks []any) *broker.Broker {
		br, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 1000, SyncInterval: time.Minute, Hooks: hooks})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Close() })
		return br
	}
	m := New(Options{})
	plain, metered := start(nil), start([]any{m})
	conn := func(br *broker.Broker) *client.Client {
		c, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleAdmin)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		if _, err := c.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "bench", Partitions: 8, Partitioner: "kafka-murmur2"}); err != nil {
			b.Fatal(err)
		}
		return c
	}
	cPlain, cMetered := conn(plain), conn(metered)
	value := make([]byte, 100)
	type sender interface {
		Send(ctx context.Context, rec client.Record, done func(client.Result)) error
		Close(ctx context.Context) error
	}
	// CPU time of the whole process (client, broker and server are all in it) per run: less
	// sensitive than wall time to other processes on a shared machine.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var lastCPU time.Duration
	run := func(p sender) time.Duration {
		var failed atomic.Int64
		c0 := cpu()
		defer func() { lastCPU = cpu() - c0 }()
		t0 := time.Now()
		for i := 0; i < records; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("key-%d", i%10000)), Value: value}, func(r client.Result) {
				if r.Err != nil {
					failed.Add(1)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d records failed", n)
		}
		return time.Since(t0)
	}
	variants := []struct {
		name string
		make func() sender
	}{
		{"broker-side", func() sender { p, _ := cPlain.NewThinProducer("bench", client.ThinOptions{}); return p }},
		{"broker-side+metrics", func() sender { p, _ := cMetered.NewThinProducer("bench", client.ThinOptions{}); return p }},
		{"client-side", func() sender {
			p, err := cPlain.NewProducer(ctx, "bench", client.ProducerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
		{"client-side+metrics", func() sender {
			p, err := cPlain.NewProducer(ctx, "bench", client.ProducerOptions{Hooks: []client.Hook{m}})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
	}
	for _, v := range variants { // warm-up
		run(v.make())
	}
	times, cpus := map[string][]time.Duration{}, map[string][]time.Duration{}
	b.ResetTimer()
	for r := 0; r < b.N; r++ {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			pprof.Do(ctx, pprof.Labels("variant", strings.ReplaceAll(v.name, "+", "_with_")), func(context.Context) { // -tagfocus in a profile
				times[v.name] = append(times[v.name], run(v.make()))
			})
			cpus[v.name] = append(cpus[v.name], lastCPU)
		}
	}
	b.StopTimer()
	median := func(ds []time.Duration) time.Duration {
		ds = append([]time.Duration(nil), ds...)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	rate := func(name string) float64 { return records / median(times[name]).Seconds() }
	cpuPer := func(name string) float64 { return float64(median(cpus[name]).Nanoseconds()) / records }
	b.ReportMetric(cpuPer("broker-side+metrics")/cpuPer("broker-side"), "broker-side-cpu-with/without")
	b.ReportMetric(cpuPer("client-side+metrics")/cpuPer("client-side"), "client-side-cpu-with/without")
	for _, v := range variants {
		b.ReportMetric(rate(v.name), v.name+"-records/s")
	}
	b.ReportMetric(rate("broker-side+metrics")/rate("broker-side"), "broker-side-with/without")
	b.ReportMetric(rate("client-side+metrics")/rate("client-side"), "client-side-with/without")
}
