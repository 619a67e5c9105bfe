package client_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/natscluster"
)

// TestEpochChangeStallOnCluster measures (and logs; no wall-clock assertion) how long records
// wait for their acknowledgement across an epoch change on a 3-node cluster, where a publish to
// a fenced subject can get neither an acknowledgement nor "no responders" (issue 10: the old
// producer waited out its 5 s acknowledgement timeout at every change). The producer is
// connected to a node that leads none of the partition streams. It checks that every record is
// acknowledged and logs the worst and the median acknowledgement latency of records sent within
// a second of the change.
func TestEpochChangeStallOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, Logf: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const topic = "stall"
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	// Connect the producer to a node that leads neither stream (if there is one).
	leaders := map[int]bool{}
	for q := 0; q < 2; q++ {
		if l, err := c.StreamLeader(ctx, wire.StreamName(topic, q)); err == nil {
			leaders[l] = true
		}
	}
	url := c.ClientURLs()
	for i := 0; i < c.N(); i++ {
		if !leaders[i] {
			url = c.NodeURL(i)
			break
		}
	}
	pc, err := client.Connect(ctx, client.Options{URL: url, Creds: c.Creds()})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	p, err := pc.NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	type sample struct{ sent, acked time.Time }
	var mu sync.Mutex
	var samples []*sample
	failed := 0
	var change time.Time
	for i := 0; i < 3000; i++ {
		if i == 1000 {
			go func() {
				mu.Lock()
				change = time.Now()
				mu.Unlock()
				if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 3}); err != nil {
					t.Error(err)
				}
			}()
		}
		s := &sample{sent: time.Now()}
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%50)), Value: []byte("v")}, func(r client.Result) {
			mu.Lock()
			s.acked = time.Now()
			if r.Err != nil {
				failed++
			}
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed > 0 {
		t.Fatalf("%d records failed across the epoch change", failed)
	}
	var around []time.Duration
	for _, s := range samples {
		if d := s.sent.Sub(change); d > -time.Second && d < time.Second {
			around = append(around, s.acked.Sub(s.sent))
		}
	}
	sort.Slice(around, func(i, j int) bool { return around[i] < around[j] })
	if len(around) == 0 {
		t.Fatal("no records sent around the change")
	}
	t.Logf("epoch change on a 3-node cluster: acknowledgement latency of the %d records sent within 1 s of it: median %v, worst %v (producer on %s; resent %d, batches settled %d)",
		len(around), around[len(around)/2].Round(time.Millisecond), around[len(around)-1].Round(time.Millisecond), url, p.Resent(), p.Settled())
}
