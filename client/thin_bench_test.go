package client_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// thinSender is what the benchmark needs of a thin producer, old or new.
type thinSender interface {
	Send(ctx context.Context, rec client.Record, done func(client.Result)) error
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// BenchmarkThinProducerVsLegacy measures, in one run against one embedded broker, the records
// per second through the produce service (spec/protocol.md §5.2) of the thin producer before
// batched requests (thin_legacy_test.go: one request per record, every pending record walked on
// every reply), of the new one with MaxBatch 1 (one request per record, no walk) and of the new
// one batching, and, as the baseline, nats.go's JetStream async publish of the same
// records with the same headers straight to the partition subjects (partitions computed before the
// clock starts). Each b.N iteration is one round of every variant, in rotating order; medians and
// ratios are reported.
//
//	go test -run '^$' -bench ThinProducerVsLegacy -benchtime 5x ./client/
func BenchmarkThinProducerVsLegacy(b *testing.B) {
	const topic, partitions, records, keys, valueSize = "bench", 8, 20000, 10000, 100
	ctx := context.Background()
	br, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	admin, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleAdmin)})
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		b.Fatal(err)
	}
	c, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleProducer), Timeout: time.Minute, AckTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	f, err := c.Partitioner(ctx, desc.Current().Partitioner)
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, valueSize)
	keyOf := make([][]byte, keys)
	subjectOf := make([]string, keys)
	for k := range keyOf {
		keyOf[k] = []byte(fmt.Sprint("key-", k))
		q, err := f.Partition(keyOf[k], partitions)
		if err != nil {
			b.Fatal(err)
		}
		subjectOf[k] = wire.DataSubject(topic, 1, int(q))
	}

	raw := func() time.Duration {
		js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(30*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		id := nuid.Next()
		start := time.Now()
		for i := 0; i < records; i++ {
			k := i % keys
			m := nats.NewMsg(subjectOf[k])
			m.Data = value
			seq := fmt.Sprint(i + 1)
			m.Header.Set(wire.HeaderKey, wire.EncodeKey(keyOf[k]))
			m.Header.Set(wire.HeaderProducer, id)
			m.Header.Set(wire.HeaderSeq, seq)
			m.Header.Set(wire.HeaderMsgID, id+"-"+seq+"-0123456789abcdef0123456789abcdef")
			if _, err := js.PublishMsgAsync(m); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			b.Fatal("raw publishes not acknowledged")
		}
		return time.Since(start)
	}
	thin := func(name string, open func() (thinSender, error)) func() time.Duration {
		return func() time.Duration {
			p, err := open()
			if err != nil {
				b.Fatal(err)
			}
			var failed atomic.Int64
			var firstErr atomic.Value
			start := time.Now()
			for i := 0; i < records; i++ {
				if err := p.Send(ctx, client.Record{Key: keyOf[i%keys], Value: value}, func(r client.Result) {
					if r.Err != nil && failed.Add(1) == 1 {
						firstErr.Store(r.Err)
					}
				}); err != nil {
					b.Fatalf("%s: %v", name, err)
				}
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			d := time.Since(start)
			if err := p.Close(ctx); err != nil || failed.Load() > 0 {
				b.Fatalf("%s: %v, %d failed (first: %v)", name, err, failed.Load(), firstErr.Load())
			}
			return d
		}
	}
	variants := []struct {
		name string
		run  func() time.Duration
	}{
		{"raw", raw},
		{"legacy", thin("legacy", func() (thinSender, error) { return client.NewLegacyThin(c, topic, client.ThinOptions{}) })},
		{"unbatched", thin("unbatched", func() (thinSender, error) { return c.NewThinProducer(topic, client.ThinOptions{MaxBatch: 1}) })},
		{"batched", thin("batched", func() (thinSender, error) { return c.NewThinProducer(topic, client.ThinOptions{}) })},
	}
	for _, v := range variants { // warm-up: new stream files, module instantiation, heap growth
		v.run()
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range variants {
			v := variants[(i+j)%len(variants)]
			times[v.name] = append(times[v.name], v.run())
		}
	}
	b.StopTimer()
	rate := func(name string) float64 {
		s := append([]time.Duration(nil), times[name]...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(records) / s[len(s)/2].Seconds()
	}
	var line []string
	for _, v := range variants {
		b.ReportMetric(rate(v.name), v.name+"-records/s")
		line = append(line, fmt.Sprintf("%s %.0f/s", v.name, rate(v.name)))
	}
	for _, v := range []string{"unbatched", "batched"} {
		b.ReportMetric(rate(v)/rate("legacy"), v+"/legacy")
	}
	for _, v := range []string{"legacy", "unbatched", "batched"} {
		b.ReportMetric(rate(v)/rate("raw"), v+"/raw")
	}
	b.Logf("%d records per round, %d rounds (medians): %s; unbatched/legacy %.2fx, batched/legacy %.2fx; broker-side/raw: legacy %.2fx, unbatched %.2fx, batched %.2fx (target >= 0.8x)",
		records, b.N, strings.Join(line, ", "), rate("unbatched")/rate("legacy"), rate("batched")/rate("legacy"),
		rate("legacy")/rate("raw"), rate("unbatched")/rate("raw"), rate("batched")/rate("raw"))
}
