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
// of hundreds), and their ratio; and, for what the rule costs a hot key, the single key again
// from a producer with the rule off (the old behaviour, an internal test hook). Each b.N
// iteration is one round of each, in rotating order.
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
	off, err := cl.NewProducer(ctx, topic, client.WithoutKeyRule(client.ProducerOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	defer off.Close(ctx)
	value := make([]byte, 100)
	round := func(p *client.Producer, n, nkeys int) float64 {
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
	round(p, 2000, keys) // warm up: streams' leaders known, connections open
	round(off, 2000, keys)
	var hot, many, hotOff []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runs := []func(){
			func() { hot = append(hot, round(p, hotRecords, 1)) },
			func() { many = append(many, round(p, manyRecords, keys)) },
			func() { hotOff = append(hotOff, round(off, manyRecords, 1)) },
		}
		for j := range runs {
			runs[(i+j)%len(runs)]()
		}
	}
	b.StopTimer()
	h, m, ho := median(hot), median(many), median(hotOff)
	b.ReportMetric(h, "hot-key-rec/s")
	b.ReportMetric(m, "many-keys-rec/s")
	b.ReportMetric(h/m, "hot/many")
	b.ReportMetric(h/ho, "hot/hot-rule-off")
	b.Logf("one hot key: %.0f records/s; %d keys: %.0f records/s; ratio %.3f; one hot key with the rule off: %.0f records/s (rule on/off %.3f) (R3, 3 nodes, one partition)", h, keys, m, h/m, ho, h/ho)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
