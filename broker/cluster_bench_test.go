package broker_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BenchmarkEpochChange measures, in one run, how long a repartition request takes (plan, create,
// fence, activate; answered once the new epoch is active) on the embedded server and on a
// 3-node cluster (in-process nats-servers, R3 topic and buckets), each on a topic of 4 partitions
// holding 2,000 records, growing by one partition per change. It reports the median of each and
// their ratio.
//
//	go test -run XXX -bench EpochChange -benchtime 1x ./broker/
func BenchmarkEpochChange(b *testing.B) {
	const changes = 8
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	measure := func(admin *client.Client, topic string) time.Duration {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
			b.Fatal(err)
		}
		p, err := admin.NewProducer(ctx, topic, client.ProducerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i))}, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			b.Fatal(err)
		}
		var ds []time.Duration
		for j := 0; j < changes; j++ {
			start := time.Now()
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 5 + j}); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	for i := 0; i < b.N; i++ {
		emb, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
		if err != nil {
			b.Fatal(err)
		}
		embAdmin := connect(b, emb, broker.RoleAdmin)
		embedded := measure(embAdmin, fmt.Sprintf("e%d", i))
		embAdmin.Close()
		emb.Close()

		c := startCluster(b, 3)
		cb := startClusterBroker(b, c, broker.Config{Logf: func(string, ...any) {}})
		clu := measure(clusterClient(b, c, ""), fmt.Sprintf("c%d", i))
		cb.Close()
		b.ReportMetric(float64(embedded.Microseconds())/1000, "ms/change-embedded")
		b.ReportMetric(float64(clu.Microseconds())/1000, "ms/change-cluster")
		b.ReportMetric(float64(clu)/float64(embedded), "cluster/embedded")
		b.Logf("epoch change (median of %d): embedded %v, 3-node cluster R3 %v (%.1fx)", changes, embedded.Round(time.Millisecond), clu.Round(time.Millisecond), float64(clu)/float64(embedded))
	}
}
