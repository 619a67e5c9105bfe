package client_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/natscluster"
)

// TestHotKeysSurviveStepdowns: a few hot keys produced as fast as the producer goes (batches of
// hundreds of records) to an R3 partition stream on a 3-node cluster whose leader is made to
// step down again and again. nats-server 2.15.2 counts fast-batch messages whose raft proposals
// a term change dropped as persisted (spec/protocol.md §5.1.2); the producer finds them and sends
// them again. With the per-key rule no batch holds two records of one key, so such a re-send
// still goes ahead of its key's later records: 0 order violations, 0 lost. The control turns the
// rule off and must see keys out of order (or no hole happened, which it reports).
func TestHotKeysSurviveStepdowns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	for _, seed := range seeds(1) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			res, holes := hotKeyRun(t, seed, false)
			if holes == 0 {
				t.Logf("seed %d: no hole this run (the server dropped no counted proposal)", seed)
			}
			if !res.OK() {
				t.Fatalf("storage check failed with the per-key rule on (%d holes re-sent):\n%s", holes, res)
			}
		})
	}
}

// TestHotKeysWithoutKeyRuleControl shows that the storage check of TestHotKeysSurviveStepdowns
// catches what the per-key rule prevents: with the rule off, a hole's re-send lands behind later
// records of its key. Holes depend on the server's timing, so the control runs seeds until one
// run had holes (PCTL_CONTROL_RUNS, default 3) and fails only if a run with holes kept order.
func TestHotKeysWithoutKeyRuleControl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	if os.Getenv("PCTL_CONTROLS") == "" {
		t.Skip("control of the per-key rule: set PCTL_CONTROLS=1 (starts a cluster per run)")
	}
	runs := 3
	fmt.Sscan(os.Getenv("PCTL_CONTROL_RUNS"), &runs)
	for seed := int64(1); seed <= int64(runs); seed++ {
		res, holes := hotKeyRun(t, seed, true)
		if holes == 0 {
			t.Logf("seed %d: no hole, the control proves nothing this run", seed)
			continue
		}
		if res.OK() {
			t.Fatalf("seed %d: %d holes re-sent with the per-key rule off, yet the storage check passed: it cannot fail", seed, holes)
		}
		t.Logf("seed %d: with the rule off, %d holes re-sent and the check failed as it must:\n%s", seed, holes, res)
		return
	}
	t.Skipf("no run of %d had a hole", runs)
}

func hotKeyRun(t *testing.T, seed int64, noRule bool) (*verify.Result, int64) {
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, Logf: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	connect := func() *client.Client {
		cl, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds(), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := connect()
	const topic, partitions = "hot", 1
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	opts := client.ProducerOptions{Logf: quietLogf(t)}
	if noRule {
		opts = client.WithoutKeyRule(opts)
	}
	p, err := connect().NewProducer(ctx, topic, opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []verify.Sent
	stop := make(chan struct{})
	stepped := make(chan int, 1)
	go func() {
		// A fault every 300-800 ms while records flow.
		frng := rand.New(rand.NewSource(seed * 17))
		n := 0
		defer func() { stepped <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(300+frng.Intn(500)) * time.Millisecond):
			}
			// Alternate leader step-downs and replica changes (R3 -> R1 -> R3): both are raft
			// term changes, and scale changes made nats-server drop counted proposals most often.
			stream := wire.StreamName(topic, 0)
			if n%2 == 0 {
				if _, err := admin.Conn().RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil); err == nil {
					n++
				}
				continue
			}
			st, err := admin.JetStream().Stream(ctx, stream)
			if err != nil {
				continue
			}
			cfg := st.CachedInfo().Config
			cfg.Replicas = 4 - cfg.Replicas // 3 <-> 1
			if _, err := admin.JetStream().UpdateStream(ctx, cfg); err == nil {
				n++
			}
		}
	}()
	rng := rand.New(rand.NewSource(seed))
	deadline := time.Now().Add(12 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		key := []byte(fmt.Sprint("hot", rng.Intn(4)))
		err := p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
			mu.Lock()
			sent = append(sent, verify.Sent{Producer: p.ID(), PSeq: r.ProducerSeq, Key: key, Acked: r.Err == nil})
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%256 == 255 {
			time.Sleep(time.Millisecond) // bursts of 256: batches of many records of each key
		}
	}
	close(stop)
	steps := <-stepped
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	stored := storedInOrder(ctx, t, admin.JetStream(), topic, partitions)
	mu.Lock()
	defer mu.Unlock()
	res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}})
	t.Logf("seed %d (rule off: %v): %d records, %d stored, %d step-downs and replica changes; %d batches settled, %d holes re-sent",
		seed, noRule, len(sent), len(stored), steps, p.Settled(), p.Holes())
	return res, p.Holes()
}
