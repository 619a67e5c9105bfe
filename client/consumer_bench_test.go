package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// BenchmarkPlacementCheckShare measures what checking every record's placement (spec §6.8) costs
// a member: the time per record of the check alone (one partitioner call, what the member adds
// per keyed record) against the time per record of consuming (a member delivering 20000 records
// from an embedded broker), measured in the same run. It reports the share in percent.
func BenchmarkPlacementCheckShare(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	br, err := broker.Start(ctx, broker.Config{DataDir: b.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
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
	if _, err := conn(broker.RoleAdmin).CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		b.Fatal(err)
	}
	prod := conn(broker.RoleProducer)
	p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("customer-%d", i%977))
		if err := p.Send(ctx, client.Record{Key: keys[i], Value: []byte("value")}, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cons := conn(broker.RoleConsumer)
	desc, _, err := cons.Topic(ctx, "t")
	if err != nil {
		b.Fatal(err)
	}
	f, err := cons.Partitioner(ctx, desc.Current().Partitioner)
	if err != nil {
		b.Fatal(err)
	}
	var consume, check time.Duration
	for i := 0; i < b.N; i++ {
		cn, err := cons.NewConsumer(ctx, "t", client.ConsumerOptions{Group: fmt.Sprint("bench", i), FromBeginning: true, Heartbeat: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		got := 0
		start := time.Now()
		if err := cn.Run(rctx, func(context.Context, *client.Message) error {
			if got++; got == n {
				consume += time.Since(start)
				rcancel()
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		rcancel()
		start = time.Now()
		for _, k := range keys {
			if _, err := f.Partition(k, int32(desc.Current().Partitions)); err != nil {
				b.Fatal(err)
			}
		}
		check += time.Since(start)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*n) }
	b.ReportMetric(per(consume), "ns/record-consumed")
	b.ReportMetric(per(check), "ns/record-checked")
	b.ReportMetric(100*per(check)/per(consume), "%-of-consume")
	fmt.Printf("placement check: %.0f ns per record, consuming %.0f ns per record: the check is %.1f%% of it\n", per(check), per(consume), 100*per(check)/per(consume))
}
