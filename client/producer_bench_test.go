package client_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BenchmarkProducerVsRawJetStream measures, in one run against one embedded broker, the records
// per second of pctl's producer (fast batches, spec/protocol.md §5.1) and of nats.go's JetStream
// async publish of the same records to the same partition subjects with the same headers (key,
// producer, sequence, Nats-Msg-Id), partitions computed before the clock starts: the baseline is
// everything but pctl's client machinery. Each b.N iteration is one round of both, in alternating
// order; the medians and their ratio are reported (target: producer >= 0.95x raw).
//
//	go test -run '^$' -bench ProducerVsRaw -benchtime 5x ./client/
func BenchmarkProducerVsRawJetStream(b *testing.B) {
	const topic, partitions, records, keys, valueSize = "bench", 8, 50000, 10000, 100
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
	c, err := client.Connect(ctx, client.Options{URL: br.ClientURL(), Creds: br.CredsPath(broker.RoleProducer), AckTimeout: 30 * time.Second})
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
	producer := func() time.Duration {
		p, err := c.NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		failed := 0
		start := time.Now()
		for i := 0; i < records; i++ {
			k := i % keys
			if err := p.Send(ctx, client.Record{Key: keyOf[k], Value: value}, func(r client.Result) {
				if r.Err != nil {
					failed++
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if err := p.Close(ctx); err != nil || failed > 0 {
			b.Fatalf("producer: %v, %d failed", err, failed)
		}
		return d
	}
	var rawT, prodT []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			rawT = append(rawT, raw())
			prodT = append(prodT, producer())
		} else {
			prodT = append(prodT, producer())
			rawT = append(rawT, raw())
		}
	}
	b.StopTimer()
	median := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	rawRate := float64(records) / median(rawT).Seconds()
	prodRate := float64(records) / median(prodT).Seconds()
	b.ReportMetric(rawRate, "raw-records/s")
	b.ReportMetric(prodRate, "producer-records/s")
	b.ReportMetric(prodRate/rawRate, "producer/raw")
	b.Logf("%d records per round, %d rounds: raw JetStream async %0.f records/s, producer %0.f records/s: %.2fx (target >= 0.95x)",
		records, b.N, rawRate, prodRate, prodRate/rawRate)
}
