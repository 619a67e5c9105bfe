package client_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// BenchmarkGatedReplay measures what epoch gating costs a replay (issue 17 item 2): a topic
// written through two epoch changes (8 partitions, then 16, then jump over 16), read from the
// beginning by a fresh group of 2 members with gating on and with gating off (order not
// guaranteed then: the baseline), in alternating order within one run. It reports both rates,
// their ratio (target >= 0.95) and the gated members' waits.
//
//	go test -run '^$' -bench GatedReplay -benchtime 3x ./client/
func BenchmarkGatedReplay(b *testing.B) {
	const records, keys, members = 60000, 10000, 2
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
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
	admin := conn(broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 8, Partitioner: "kafka-murmur2"}); err != nil {
		b.Fatal(err)
	}
	p, err := conn(broker.RoleProducer).NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < records; i++ {
		switch i {
		case records / 3:
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 16}); err != nil {
				b.Fatal(err)
			}
		case 2 * records / 3:
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitioner: "jump"}); err != nil {
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
	cons := conn(broker.RoleConsumer)
	round := 0
	replay := func(gated bool) (time.Duration, client.ConsumerStats) {
		round++
		rctx, rcancel := context.WithCancel(ctx)
		defer rcancel()
		var got atomic.Int64
		var wg sync.WaitGroup
		var stats []client.ConsumerStats
		var mu sync.Mutex
		start := time.Now()
		var end atomic.Int64
		for m := 0; m < members; m++ {
			cn, err := cons.NewConsumer(rctx, "t", client.ConsumerOptions{Group: fmt.Sprint("g", round), Member: fmt.Sprint("m", m),
				FromBeginning: true, Heartbeat: 200 * time.Millisecond, Testing: &testhook.Consumer{DisableGating: !gated}})
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cn.Run(rctx, func(context.Context, *client.Message) error {
					if got.Add(1) == records {
						end.Store(int64(time.Since(start)))
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
		var sum client.ConsumerStats
		for _, s := range stats {
			sum.Gated += s.Gated
			sum.TotalWait += s.TotalWait
		}
		return time.Duration(end.Load()), sum
	}
	replay(true) // warm-up: caches, module instances
	var gatedT, ungatedT []time.Duration
	var gatedStats client.ConsumerStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, g := range order {
			d, st := replay(g)
			if g {
				gatedT = append(gatedT, d)
				gatedStats.Gated += st.Gated
				gatedStats.TotalWait += st.TotalWait
			} else {
				ungatedT = append(ungatedT, d)
			}
		}
	}
	b.StopTimer()
	median := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	g, u := float64(records)/median(gatedT).Seconds(), float64(records)/median(ungatedT).Seconds()
	b.ReportMetric(g, "gated-records/s")
	b.ReportMetric(u, "ungated-records/s")
	b.ReportMetric(g/u, "gated/ungated")
	b.Logf("%d records through two epoch changes, %d members, %d rounds (medians): gated %.0f/s, ungated %.0f/s: %.2fx (target >= 0.95x); gated records waited %d times, %v in all",
		records, members, b.N, g, u, g/u, gatedStats.Gated/int64(b.N), gatedStats.TotalWait/time.Duration(b.N))
}
