package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// BenchmarkLargeEpochChange measures epoch changes of a jump topic (issue 17 item 4): 1,024 ->
// 2,048 and 2,048 -> 8,192 partitions, and with PCTL_BENCH_16K=1 also 8,192 -> 16,384 (slow: a
// topic of 8,192 partitions is created first; PCTL_BENCH_16K=only runs that one alone). For each it prints the change's time (the
// repartition request, answered when the new epoch is active) and the size of the descriptor in
// the KV bucket while the change is fenced and after it, against a baseline measured in the same
// run: the JetStream work such a change cannot do without, done raw on a fresh embedded server
// holding the same topic — creating the new partitions' streams, then moving every old stream to
// its new subject and publishing its fence marker (the stream configurations known beforehand,
// so no stream info), with the same number of requests in flight. A ratio near 1 says the change
// costs what JetStream's stream API costs; the server's work per stream grows with the number of
// streams it holds (every create and update checks the new subjects against every stream's).
// PCTL_BENCH_INFLIGHT=1 also runs each change with 16 and 32 stream requests in flight (the
// default is Config.StreamOpsInFlight's). A request or a topic creation that fails for a moment
// (a slow server: a stream request's 5 s bound) is followed to its end, as pctl does: the broker's
// retry loop finishes it.
//
//	go test -run '^$' -bench LargeEpochChange -benchtime 1x -timeout 60m ./broker/
func BenchmarkLargeEpochChange(b *testing.B) {
	type size struct{ from, to int }
	sizes := []size{{1024, 2048}, {2048, 8192}}
	switch os.Getenv("PCTL_BENCH_16K") {
	case "1":
		sizes = append(sizes, size{8192, 16384})
	case "only":
		sizes = []size{{8192, 16384}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	for i := 0; i < b.N; i++ {
		for _, sz := range sizes {
			raw := rawChange(b, ctx, sz.from, sz.to)
			if os.Getenv("PCTL_BENCH_INFLIGHT") == "1" {
				for _, n := range []int{16, 32} {
					d, _, _ := pctlChange(b, ctx, sz.from, sz.to, n)
					b.Logf("epoch change %d -> %d partitions with %d stream requests in flight: %v (%.2fx raw)", sz.from, sz.to, n, d.Round(time.Millisecond), float64(d)/float64(raw))
				}
			}
			change, during, after := pctlChange(b, ctx, sz.from, sz.to, 0)
			b.ReportMetric(change.Seconds(), fmt.Sprintf("s/change-%d-%d", sz.from, sz.to))
			b.ReportMetric(raw.Seconds(), fmt.Sprintf("s/raw-%d-%d", sz.from, sz.to))
			b.ReportMetric(float64(after)/1024, fmt.Sprintf("KiB-descriptor-%d", sz.to))
			b.Logf("epoch change %d -> %d partitions: %v, raw JetStream work %v (%.2fx); descriptor %.0f KiB while fenced, %.0f KiB after",
				sz.from, sz.to, change.Round(time.Millisecond), raw.Round(time.Millisecond), float64(change)/float64(raw),
				float64(during)/1024, float64(after)/1024)
		}
	}
}

func bigBroker(b *testing.B, ctx context.Context, hook func(topic, state string) error, inFlight int) (*broker.Broker, *client.Client) {
	br, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		Logf: func(string, ...any) {}, Testing: testhook.Steps(hook), StreamOpsInFlight: inFlight})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { br.Close() })
	admin, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleAdmin), Timeout: 30 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { admin.Close() })
	return br, admin
}

// createBig creates topic "big" of n partitions, following a creation that the request left to
// the retry loop.
func createBig(b *testing.B, ctx context.Context, admin *client.Client, n int) {
	_, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "big", Partitions: n, Partitioner: "jump"})
	if err == nil {
		return
	}
	if !errors.Is(err, wire.ErrUnavailable) {
		b.Fatal(err)
	}
	b.Logf("creating %d partitions: %v; following the creation", n, err)
	for ctx.Err() == nil {
		if _, _, err := admin.Topic(ctx, "big"); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	b.Fatal(ctx.Err())
}

// pctlChange runs the change through the broker; it returns its time and the descriptor's size
// while fenced and after.
func pctlChange(b *testing.B, ctx context.Context, from, to, inFlight int) (time.Duration, int, int) {
	var during int
	var kv jetstream.KeyValue
	var mu sync.Mutex
	hook := func(topic, state string) error {
		mu.Lock()
		defer mu.Unlock()
		if state == "fenced" && kv != nil {
			if e, err := kv.Get(ctx, topic); err == nil {
				during = len(e.Value())
			}
		}
		return nil
	}
	br, admin := bigBroker(b, ctx, hook, inFlight)
	defer br.Close()
	js, err := jetstream.New(admin.Conn())
	if err != nil {
		b.Fatal(err)
	}
	heapBefore := heapInUse()
	createBig(b, ctx, admin, from)
	k, err := js.KeyValue(ctx, wire.TopicsBucket)
	if err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	kv = k
	mu.Unlock()
	start := time.Now()
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "big", Partitions: to}); err != nil {
		if !errors.Is(err, wire.ErrUnavailable) {
			b.Fatal(err)
		}
		b.Logf("epoch change %d -> %d: %v; following it", from, to, err)
		if _, err := admin.FollowChange(ctx, "big", 2, nil); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(start)
	if inFlight == 0 {
		heap := heapInUse() - heapBefore
		b.Logf("%d partition streams: %.1f MiB more Go heap in use (embedded server and broker), %.1f KiB per stream; process RSS %s",
			to, float64(heap)/(1<<20), float64(heap)/1024/float64(to), rss())
	}
	e, err := k.Get(ctx, "big")
	if err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return took, during, len(e.Value())
}

// rawChange does the change's JetStream work directly (see BenchmarkLargeEpochChange).
func rawChange(b *testing.B, ctx context.Context, from, to int) time.Duration {
	br, admin := bigBroker(b, ctx, nil, 0)
	defer br.Close()
	createBig(b, ctx, admin, from)
	js, err := jetstream.New(admin.Conn())
	if err != nil {
		b.Fatal(err)
	}
	s, err := js.Stream(ctx, wire.StreamName("big", 0))
	if err != nil {
		b.Fatal(err)
	}
	tmpl := s.CachedInfo().Config
	cfgOf := func(q int) jetstream.StreamConfig {
		c := tmpl
		c.Name = wire.StreamName("big", q)
		c.Description = fmt.Sprintf("pctl topic big partition %d", q)
		c.Subjects = []string{wire.StreamSubject("big", 2, q, false)}
		c.Metadata = map[string]string{"pctl_binding_epoch": "2"}
		return c
	}
	start := time.Now()
	run := func(n, offset int, f func(q int) error) {
		forEachStream(b, n, func(q int) error { return f(offset + q) }) // stream_memory_bench_test.go
	}
	run(to-from, from, func(q int) error {
		_, err := js.CreateStream(ctx, cfgOf(q))
		return err
	})
	created := time.Since(start)
	run(from, 0, func(q int) error {
		if _, err := js.UpdateStream(ctx, cfgOf(q)); err != nil {
			return err
		}
		m := nats.NewMsg(wire.StreamSubject("big", 2, q, false))
		m.Header.Set(wire.HeaderFence, "2")
		m.Header.Set(wire.HeaderMsgID, "raw-fence-"+strconv.Itoa(q))
		_, err := js.PublishMsg(ctx, m)
		return err
	})
	took := time.Since(start)
	// Each create and update costs the server O(streams held) (README "Large epoch changes"):
	// the mean time per request, against the streams the server held meanwhile, shows it.
	b.Logf("raw %d -> %d: %d creates %v (%.2f ms each, %d to %d streams held), %d updates+markers %v (%.2f ms each, %d streams held)",
		from, to, to-from, created.Round(time.Millisecond), ms(created)/float64(to-from), from, to,
		from, (took - created).Round(time.Millisecond), ms(took-created)/float64(from), to)
	return took
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// heapInUse is the Go heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// rss is the process's resident set size, from /proc (Linux), or "unknown".
func rss() string {
	body, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "unknown"
}
