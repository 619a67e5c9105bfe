package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BenchmarkStreamMemory measures what a partition stream costs in memory (issue 17: a broker
// with ~27,000 partition streams had 1.2 GB RSS): a topic of N partitions (2,048 and 8,192;
// PCTL_BENCH_STREAMS=n,n,... for others) is created through the broker on its embedded server,
// and the Go heap in use (after two collections, so that sync.Pool buffers are gone), the
// goroutine stacks and the goroutines it adds are divided by N. The baselines run in the same
// process on a fresh broker each: N streams created raw with the default jetstream.StreamConfig
// (name and one subject: file storage, limits retention), and N streams created raw with the
// partition streams' own configuration (spec/protocol.md §2), so that the difference between the
// three is the configuration's and the broker's. PCTL_BENCH_HEAPPROFILE=DIR writes a heap
// profile before and after each creation (DIR/<variant>-<n>-{before,after}.pprof); compare with
// go tool pprof -inuse_space -diff_base before after. Profiles record every allocation (slow: use
// 2,048 streams) unless PCTL_BENCH_HEAPPROFILE_SAMPLED=1 keeps Go's sampling.
//
//	go test -run '^$' -bench StreamMemory -benchtime 1x -timeout 30m ./broker/
func BenchmarkStreamMemory(b *testing.B) {
	sizes := []int{2048, 8192}
	if s := os.Getenv("PCTL_BENCH_STREAMS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 1 {
				b.Fatalf("PCTL_BENCH_STREAMS=%q: give partition counts such as 2048,8192", s)
			}
			sizes = append(sizes, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	if os.Getenv("PCTL_BENCH_HEAPPROFILE") != "" && os.Getenv("PCTL_BENCH_HEAPPROFILE_SAMPLED") == "" {
		runtime.MemProfileRate = 1 // every allocation: exact bytes per structure (slow)
	}
	rawSubject := func(q int) string { return "raw." + strconv.Itoa(q) }
	rawDefault := func(n int) func(jetstream.JetStream, *client.Client) {
		return func(js jetstream.JetStream, _ *client.Client) {
			createRaw(b, ctx, js, n, func(q int) jetstream.StreamConfig {
				return jetstream.StreamConfig{Name: "RAW_" + strconv.Itoa(q), Subjects: []string{rawSubject(q)}}
			})
		}
	}
	// A warm-up, so that what the first broker of the process initialises once is in no variant.
	streamMemory(b, ctx, "warm-up", 256, rawDefault(256), rawSubject)
	for i := 0; i < b.N; i++ {
		for _, n := range sizes {
			def := streamMemory(b, ctx, "raw-default", n, rawDefault(n), rawSubject)
			var tmpl jetstream.StreamConfig
			pctlSubject := func(q int) string { return wire.StreamSubject("big", 1, q, false) }
			pctl := streamMemory(b, ctx, "pctl", n, func(js jetstream.JetStream, admin *client.Client) {
				createBig(b, ctx, admin, n)
				s, err := js.Stream(ctx, wire.StreamName("big", 0))
				if err != nil {
					b.Fatal(err)
				}
				tmpl = s.CachedInfo().Config
			}, pctlSubject)
			same := streamMemory(b, ctx, "raw-pctl-config", n, func(js jetstream.JetStream, _ *client.Client) {
				createRaw(b, ctx, js, n, func(q int) jetstream.StreamConfig {
					c := tmpl
					c.Name = wire.StreamName("big", q)
					c.Description = fmt.Sprintf("pctl topic big partition %d", q)
					c.Subjects = []string{pctlSubject(q)}
					return c
				})
			}, pctlSubject)
			for _, m := range []memPerStream{def, same, pctl} {
				b.ReportMetric(m.heap/1024, fmt.Sprintf("KiB-heap/stream-%s-%d", m.variant, n))
			}
			b.Logf("%d empty streams, Go heap per stream: raw default config %.1f KiB, raw with pctl's config %.1f KiB (%.2fx default), through the broker %.1f KiB (%.2fx default, %.2fx pctl's config raw)",
				n, def.heap/1024, same.heap/1024, same.heap/def.heap, pctl.heap/1024, pctl.heap/def.heap, pctl.heap/same.heap)
			b.Logf("%d streams of one record, Go heap per stream 3 s after the writes: %.1f / %.1f / %.1f KiB (%.2fx / %.2fx default); 13 s after: %.1f / %.1f / %.1f KiB (%.2fx / %.2fx) (raw default / raw pctl config / broker)",
				n, def.usedHeap/1024, same.usedHeap/1024, pctl.usedHeap/1024, same.usedHeap/def.usedHeap, pctl.usedHeap/def.usedHeap,
				def.idleHeap/1024, same.idleHeap/1024, pctl.idleHeap/1024, same.idleHeap/def.idleHeap, pctl.idleHeap/def.idleHeap)
			b.Logf("%d streams, goroutines per stream: %.2f / %.2f / %.2f; stack per stream %.1f / %.1f / %.1f KiB (raw default / raw pctl config / broker; empty)",
				n, def.goroutines, same.goroutines, pctl.goroutines, def.stack/1024, same.stack/1024, pctl.stack/1024)
		}
	}
}

type memPerStream struct {
	variant                 string
	heap, stack, goroutines float64 // per empty stream
	usedHeap, usedStack     float64 // per stream holding one record
	usedGo                  float64
	idleHeap                float64 // per stream holding one record, 13 s after it was written
}

// streamMemory starts a broker, runs create (which makes n streams) and returns what they added
// per stream.
func streamMemory(b *testing.B, ctx context.Context, variant string, n int, create func(js jetstream.JetStream, admin *client.Client), subject func(q int) string) memPerStream {
	br, admin := bigBroker(b, ctx, nil, 0)
	defer br.Close()
	js, err := jetstream.New(admin.Conn())
	if err != nil {
		b.Fatal(err)
	}
	dir := os.Getenv("PCTL_BENCH_HEAPPROFILE")
	before := settledMemory(b, dir, fmt.Sprintf("%s-%d-before", variant, n))
	start := time.Now()
	create(js, admin)
	took := time.Since(start)
	after := settledMemory(b, dir, fmt.Sprintf("%s-%d-after", variant, n))
	publishOneEach(b, ctx, js, n, subject)
	used := settledMemory(b, dir, fmt.Sprintf("%s-%d-record", variant, n))
	// A block's cache of the records written to it stays for 10 s after the last write
	// (filestore's defaultCacheBufferExpiration), then a collection frees it.
	time.Sleep(10 * time.Second)
	idle := settledMemory(b, dir, fmt.Sprintf("%s-%d-idle", variant, n))
	m := memPerStream{variant: variant,
		heap:       float64(after.heap-before.heap) / float64(n),
		stack:      float64(after.stack-before.stack) / float64(n),
		goroutines: float64(after.goroutines-before.goroutines) / float64(n),
		usedHeap:   float64(used.heap-before.heap) / float64(n),
		usedStack:  float64(used.stack-before.stack) / float64(n),
		usedGo:     float64(used.goroutines-before.goroutines) / float64(n),
		idleHeap:   float64(idle.heap-before.heap) / float64(n)}
	b.Logf("%s, %d streams (created in %v): +%.1f MiB heap, +%.1f MiB stacks, +%d goroutines; per stream %.1f KiB heap, %.1f KiB stack, %.2f goroutines; process RSS %s",
		variant, n, took.Round(time.Millisecond), float64(after.heap-before.heap)/(1<<20), float64(after.stack-before.stack)/(1<<20),
		after.goroutines-before.goroutines, m.heap/1024, m.stack/1024, m.goroutines, rss())
	b.Logf("%s, %d streams holding one record each: per stream %.1f KiB heap 3 s after the writes (%.1f KiB 13 s after), %.1f KiB stack, %.2f goroutines; process RSS %s",
		variant, n, m.usedHeap/1024, m.idleHeap/1024, m.usedStack/1024, m.usedGo, rss())
	return m
}

// createRaw creates n streams of cfgOf's configurations directly, 64 requests in flight.
func createRaw(b *testing.B, ctx context.Context, js jetstream.JetStream, n int, cfgOf func(q int) jetstream.StreamConfig) {
	forEachStream(b, n, func(q int) error {
		_, err := js.CreateStream(ctx, cfgOf(q))
		return err
	})
}

// publishOneEach publishes one record (with a Nats-Msg-Id, as pctl's producers do) to each of n
// streams, 64 in flight.
func publishOneEach(b *testing.B, ctx context.Context, js jetstream.JetStream, n int, subject func(q int) string) {
	forEachStream(b, n, func(q int) error {
		m := nats.NewMsg(subject(q))
		m.Header.Set(wire.HeaderMsgID, "mem-"+strconv.Itoa(q))
		m.Data = make([]byte, 100)
		_, err := js.PublishMsg(ctx, m)
		return err
	})
}

// forEachStream runs f for 0 <= q < n, 64 at a time, and fails on the first error.
func forEachStream(b *testing.B, n int, f func(q int) error) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for q := 0; q < n; q++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(q int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(q); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}(q)
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

type memSample struct{ heap, stack, goroutines int64 }

// settledMemory waits for the server's work after a creation to end (a stream's first state
// write, timers that fire once), collects twice (the second empties sync.Pool's victim cache)
// and samples the heap and stacks in use and the goroutines; with dir, it also writes a heap
// profile there.
func settledMemory(b *testing.B, dir, name string) memSample {
	time.Sleep(3 * time.Second)
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heap: int64(ms.HeapInuse), stack: int64(ms.StackInuse), goroutines: int64(runtime.NumGoroutine())}
	if dir != "" {
		f, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
	}
	return s
}
