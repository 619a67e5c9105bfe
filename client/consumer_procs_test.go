package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/natscluster"
)

// TestReadersThroughNodeFaults: the reader recovery of issue 10 on a cluster of nats-server
// processes, with the faults of the runs: kill -9 of a node holding a reader, and SIGSTOP
// of such a node for 8 s (its consumer is back afterwards, having missed its pulls). The member's
// connection goes to another node. Every acknowledged record must be delivered within a bound.
func TestReadersThroughNodeFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	for _, fault := range []struct {
		name string
		do   func(c *natscluster.Cluster, victim int) error
	}{
		{"kill -9", func(c *natscluster.Cluster, victim int) error { return c.Kill(victim) }},
		{"SIGSTOP 8s", func(c *natscluster.Cluster, victim int) error {
			if err := c.Stop(victim); err != nil {
				return err
			}
			time.AfterFunc(8*time.Second, func() { _ = c.Cont(victim) })
			return nil
		}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			c := natscluster.Start(t, natscluster.Options{Nodes: 3, Logf: t.Logf})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			connect := func(url string) *client.Client {
				cl, err := client.Connect(ctx, client.Options{URL: url, Creds: c.Creds(), Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				return cl
			}
			admin := connect(c.ClientURLs())
			const partitions = 6
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			p, err := connect(c.ClientURLs()).NewProducer(ctx, "t", client.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var amu sync.Mutex
			acked := map[uint64]bool{}
			send := func(n int) {
				for i := 0; i < n; i++ {
					err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i%60)), Value: []byte("v")}, func(r client.Result) {
						if r.Err == nil {
							amu.Lock()
							acked[r.ProducerSeq] = true
							amu.Unlock()
						}
					})
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(2 * time.Millisecond)
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			missing := func(log *deliveryLog) []uint64 {
				amu.Lock()
				defer amu.Unlock()
				return log.missing(acked)
			}
			send(200)
			cons := connect(c.NodeURL(0))
			log := &deliveryLog{seqs: map[uint64]bool{}}
			cn, err := cons.NewConsumer(ctx, "t", client.ConsumerOptions{Group: "g", FromBeginning: true, Heartbeat: 500 * time.Millisecond, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- cn.Run(rctx, log.handle) }()
			defer func() {
				rcancel()
				if err := <-done; err != nil {
					t.Errorf("member: %v", err)
				}
			}()
			waitFor(t, 60*time.Second, "the first records are delivered", func() bool { return len(missing(log)) == 0 })
			victim := -1
			for q, h := range readerHosts(t, ctx, admin.JetStream(), partitions) {
				if i := c.Index(h); i > 0 {
					victim = i
					t.Logf("partition %d's reader is on %s", q, h)
					break
				}
			}
			if victim < 0 {
				t.Skip("every reader is on the member's own node (1 run in 729): nothing to test")
			}
			if err := fault.do(c, victim); err != nil {
				t.Fatal(err)
			}
			send(1500)
			waitFor(t, 45*time.Second, "every acknowledged record is delivered", func() bool { return len(missing(log)) == 0 }, func() string {
				m := missing(log)
				return fmt.Sprintf("%d undelivered (first %v); stats %+v", len(m), m[:min(len(m), 10)], cn.Stats().ReaderRestarts)
			})
			t.Logf("reader restarts by the watchdog: %d", cn.Stats().ReaderRestarts)
		})
	}
}
