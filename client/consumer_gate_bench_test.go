package client_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// BenchmarkGatedReplay measures what epoch gating costs a replay (issue 17 item 2): topics
// written through two epoch changes (8 partitions, then 16, then jump over 16), read from the
// beginning by a fresh group of 2 members with gating on and with gating off (order not
// guaranteed then: the baseline), in the same run.
//
// Cold: pairs of topics holding the same records, each read once (its streams never read
// before), gated on one and ungated on the other, which one first alternating by pair. Warm: one
// more such topic read b.N times each way in alternating order after a warm-up read. Both report
// medians, their ratio (target >= 0.95), the process's CPU time per read (the broker is in this
// process too: CPU equal and wall time longer means the gated group idled) and the gate waits.
// PCTL_BENCH_COLD_PAIRS sets the number of cold pairs (default 3); PCTL_BENCH_VERBOSE names a
// file that gets the members' logs of every read that took more than 3 s.
//
//	go test -run '^$' -bench GatedReplay -benchtime 3x ./client/
func BenchmarkGatedReplay(b *testing.B) {
	const records, keys, members = 60000, 10000, 2
	if probe(b) {
		return
	}
	pairs := 3
	if v, err := strconv.Atoi(os.Getenv("PCTL_BENCH_COLD_PAIRS")); err == nil && v > 0 {
		pairs = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	br, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	conn := func(role string) *client.Client {
		c, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(role)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	admin, prod := conn(broker.RoleAdmin), conn(broker.RoleProducer)
	fill := func(topic string) {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 8, Partitioner: "kafka-murmur2"}); err != nil {
			b.Fatal(err)
		}
		p, err := prod.NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < records; i++ {
			switch i {
			case records / 3:
				if err := p.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 16}); err != nil {
					b.Fatal(err)
				}
			case 2 * records / 3:
				if err := p.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitioner: "jump"}); err != nil {
					b.Fatal(err)
				}
			}
			if err := p.Send(ctx, client.Record{Key: []byte("k" + strconv.Itoa((i*7919)%keys)), Value: make([]byte, 64)}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	fill("t")
	for i := 0; i < pairs; i++ {
		fill(fmt.Sprint("ca", i))
		fill(fmt.Sprint("cb", i))
	}
	cons := conn(broker.RoleConsumer)
	type result struct {
		wall, cpu time.Duration
		stats     client.ConsumerStats
		log       []string
	}
	verbose := os.Getenv("PCTL_BENCH_VERBOSE") != ""
	round := 0
	replay := func(topic string, gated bool) result {
		round++
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		var got atomic.Int64
		var wg sync.WaitGroup
		var stats []client.ConsumerStats
		var mu sync.Mutex
		cpu0 := cpuTime()
		start := time.Now()
		var end atomic.Int64
		var cpuEnd atomic.Int64
		var log []string
		logf := func(f string, a ...any) {
			if verbose {
				mu.Lock()
				log = append(log, time.Since(start).Round(time.Millisecond).String()+" "+fmt.Sprintf(f, a...))
				mu.Unlock()
			}
		}
		for m := 0; m < members; m++ {
			cn, err := cons.NewConsumer(rctx, topic, client.ConsumerOptions{Group: fmt.Sprint("g", round), Member: fmt.Sprint("m", m),
				FromBeginning: true, Heartbeat: 200 * time.Millisecond, Testing: &testhook.Consumer{DisableGating: !gated}, Logf: logf})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cn.Run(rctx, func(context.Context, *client.Message) error {
					if got.Add(1) == records {
						end.Store(int64(time.Since(start)))
						cpuEnd.Store(int64(cpuTime() - cpu0))
						rcancel()
					}
					return nil
				})
				mu.Lock()
				stats = append(stats, cn.Stats())
				mu.Unlock()
			}()
		}
		wg.Wait()
		if got.Load() < records {
			b.Fatalf("round %d: %d of %d records delivered", round, got.Load(), records)
		}
		r := result{wall: time.Duration(end.Load()), cpu: time.Duration(cpuEnd.Load()), log: log}
		for _, s := range stats {
			r.stats.Gated += s.Gated
			r.stats.TotalWait += s.TotalWait
		}
		return r
	}
	median := func(rs []result, f func(result) time.Duration) time.Duration {
		s := make([]time.Duration, len(rs))
		for i, r := range rs {
			s[i] = f(r)
		}
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	wall := func(r result) time.Duration { return r.wall }
	cpu := func(r result) time.Duration { return r.cpu }
	report := func(kind string, g, u []result) float64 {
		gr, ur := float64(records)/median(g, wall).Seconds(), float64(records)/median(u, wall).Seconds()
		var waits int64
		var waited time.Duration
		for _, r := range g {
			waits += r.stats.Gated
			waited += r.stats.TotalWait
		}
		b.Logf("%s: %d records through two epoch changes, %d members, %d reads each way (medians): gated %.0f/s (CPU %v), ungated %.0f/s (CPU %v): %.2fx (target >= 0.95x); gated records waited %d times, %v in all, per read",
			kind, records, members, len(g), gr, median(g, cpu).Round(time.Millisecond), ur, median(u, cpu).Round(time.Millisecond), gr/ur,
			waits/int64(len(g)), (waited / time.Duration(len(g))).Round(time.Millisecond))
		for i := range g {
			b.Logf("  %s read %d: gated %v (CPU %v), ungated %v (CPU %v)", kind, i+1, g[i].wall.Round(time.Millisecond), g[i].cpu.Round(time.Millisecond),
				u[i].wall.Round(time.Millisecond), u[i].cpu.Round(time.Millisecond))
			for _, r := range []result{g[i], u[i]} {
				if r.wall > 3*time.Second {
					if f, err := os.OpenFile(os.Getenv("PCTL_BENCH_VERBOSE"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
						fmt.Fprintf(f, "== %s read %d (%v)\n", kind, i+1, r.wall)
						for _, l := range r.log {
							fmt.Fprintln(f, l)
						}
						f.Close()
					}
				}
			}
		}
		return gr / ur
	}

	// Cold reads first: nothing has read any topic yet (the modules are compiled on the
	// warm-up topic's read below, so the first cold read does not pay for that alone).
	var coldG, coldU []result
	for i := 0; i < pairs; i++ {
		a, c := fmt.Sprint("ca", i), fmt.Sprint("cb", i)
		if i%2 == 0 {
			coldG = append(coldG, replay(a, true))
			coldU = append(coldU, replay(c, false))
		} else {
			coldU = append(coldU, replay(a, false))
			coldG = append(coldG, replay(c, true))
		}
	}
	replay("t", true) // warm-up of "t"
	var warmG, warmU []result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, g := range order {
			r := replay("t", g)
			if g {
				warmG = append(warmG, r)
			} else {
				warmU = append(warmU, r)
			}
		}
	}
	b.StopTimer()
	cr := report("cold", coldG, coldU)
	wr := report("warm", warmG, warmU)
	b.ReportMetric(cr, "cold-gated/ungated")
	b.ReportMetric(wr, "warm-gated/ungated")
	b.ReportMetric(float64(records)/median(coldG, wall).Seconds(), "cold-gated-records/s")
	b.ReportMetric(float64(records)/median(coldU, wall).Seconds(), "cold-ungated-records/s")
}

// probe reports whether this call is the testing package's first call (b.N = 1) before the
// one with the count -benchtime asks for ("3x"): the fixture is too costly to build twice.
func probe(b *testing.B) bool {
	f := flag.Lookup("test.benchtime")
	if b.N != 1 || f == nil {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSuffix(f.Value.String(), "x"))
	return err == nil && strings.HasSuffix(f.Value.String(), "x") && n > 1
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
