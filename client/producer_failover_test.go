package client_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/natscluster"
)

// TestOrderSurvivesLeaderFailover: a producer sends many keys to a topic of R3 partition streams
// on a 3-node cluster of nats-server processes while the leaders of partition streams are killed
// (kill -9, then restarted) and paused (SIGSTOP for 4 s). Every acknowledged record must be
// stored once, each key's records in the producer's order, read back from the streams in stream
// order. Issue 10: the old producer (1024 async publishes in flight) stored retries of publishes
// lost with a failed leader behind later records of the same key in 8 of 14 such runs.
func TestOrderSurvivesLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	for _, seed := range seeds(1) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { failoverRun(t, seed) })
	}
}

func failoverRun(t *testing.T, seed int64) {
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, Logf: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connect := func(ack time.Duration) *client.Client {
		cl, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds(), Timeout: 20 * time.Second, AckTimeout: ack})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := connect(0)
	const topic, partitions = "fo", 4
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	// The default acknowledgement timeout (5 s) and a modest rate (about 125 records/s per
	// partition, as in issue 10's runs): a pipelined producer's window does not fill before
	// the timeout, so it keeps sending while its lost publishes wait.
	p, err := connect(0).NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	var mu sync.Mutex
	var sent []verify.Sent
	stop := make(chan struct{})
	faults := make(chan error, 1)
	go func() {
		frng := rand.New(rand.NewSource(seed * 31))
		defer close(faults)
		for i := 0; i < 4; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1500+frng.Intn(1000)) * time.Millisecond):
			}
			q := frng.Intn(partitions)
			leader, err := c.StreamLeader(ctx, wire.StreamName(topic, q))
			if err != nil {
				t.Logf("fault %d: no leader of partition %d: %v", i, q, err)
				continue
			}
			if i%2 == 0 {
				t.Logf("fault %d: kill -9 %s, the leader of partition %d", i, c.Name(leader), q)
				if err := c.Kill(leader); err != nil {
					faults <- err
					return
				}
				time.Sleep(2 * time.Second)
				if err := c.Restart(leader); err != nil {
					faults <- err
					return
				}
			} else {
				t.Logf("fault %d: SIGSTOP %s, the leader of partition %d, for 4 s", i, c.Name(leader), q)
				if err := c.Stop(leader); err != nil {
					faults <- err
					return
				}
				time.Sleep(4 * time.Second)
				if err := c.Cont(leader); err != nil {
					faults <- err
					return
				}
			}
		}
	}()
	deadline := time.Now().Add(16 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		key := []byte(fmt.Sprint("k", rng.Intn(200)))
		err := p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
			mu.Lock()
			sent = append(sent, verify.Sent{Producer: p.ID(), PSeq: r.ProducerSeq, Key: key, Acked: r.Err == nil})
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	if err := <-faults; err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	stored := storedInOrder(ctx, t, admin.JetStream(), topic, partitions)
	res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}})
	mu.Lock()
	defer mu.Unlock()
	acked := 0
	for _, s := range sent {
		if s.Acked {
			acked++
		}
	}
	t.Logf("seed %d: %d records, %d acknowledged, %d stored; %d batches settled, %d records the server counted but did not store (re-sent)",
		seed, len(sent), acked, len(stored), p.Settled(), p.Holes())
	if acked != len(sent) {
		t.Errorf("%d of %d records failed: a failover must not fail records", len(sent)-acked, len(sent))
	}
	if !res.OK() {
		// Holes (records nats-server counted but did not store) are re-sent ahead of their
		// key's later records by the per-key rule (spec/protocol.md §5.1.2): any order
		// violation is a failure, with or without them. TestServerHolesKeepKeyOrder shows the
		// check fails when the rule is off.
		t.Fatalf("storage check failed (%d holes re-sent):\n%s", p.Holes(), res)
	}
}
