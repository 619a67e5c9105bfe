package client_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/natscluster"
)

// BenchmarkHotKeyOnCluster measures the cost of the per-key rule (spec/protocol.md §5.1.2: on a
// cluster a fast batch holds at most one record of a key): in one run on a 3-node cluster of
// nats-server processes, the records per second of one producer sending to one R3 partition
// records of a single key (one record per batch round trip) and records of 10,000 keys (batches
// of hundreds), and their ratio. Each b.N iteration is one round of both, alternating the order.
//
//	go test -run '^$' -bench HotKeyOnCluster -benchtime 3x ./client/
func BenchmarkHotKeyOnCluster(b *testing.B) {
	const topic, hotRecords, manyRecords, keys = "hotbench", 3000, 60000, 10000
	c := natscluster.Start(b, natscluster.Options{Nodes: 3, Logf: func(string, ...any) {}})
	ctx := context.Background()
	br, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: b.TempDir(), Replicas: 3, ConformanceKeys: 1000, Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	cl, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds(), AckTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 1, Partitioner: "kafka-murmur2"}); err != nil {
		b.Fatal(err)
	}
	p, err := cl.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	value := make([]byte, 100)
	round := func(n, nkeys int) float64 {
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("key-", i%nkeys)), Value: value}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	round(2000, keys) // warm up: streams' leaders known, connections open
	var hot, many []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			hot = append(hot, round(hotRecords, 1))
			many = append(many, round(manyRecords, keys))
		} else {
			many = append(many, round(manyRecords, keys))
			hot = append(hot, round(hotRecords, 1))
		}
	}
	b.StopTimer()
	h, m := median(hot), median(many)
	b.ReportMetric(h, "hot-key-rec/s")
	b.ReportMetric(m, "many-keys-rec/s")
	b.ReportMetric(h/m, "hot/many")
	b.Logf("one hot key: %.0f records/s; %d keys: %.0f records/s; ratio %.3f (R3, 3 nodes, one partition)", h, keys, m, h/m)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
