package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

// TestBackfillResumesAfterABrokerDiesAtEachStep: two brokers serve one NATS server; a producer
// keeps updating (and deleting) the keys of a compacted topic while an epoch change backfills
// it, and the broker that runs the backfill dies at one of its steps (its connection closed,
// nothing more recorded): before its first copy, after some copies whose progress it never
// recorded, right after it recorded progress, and with every copy decided but the end not
// recorded. The other broker's retry loop resumes from the recorded progress. Each case uses
// another kind of change (grow, shrink, function swap). Afterwards, against the producer's own
// acknowledgements (one producer, so its sequence orders each key):
//   - the current epoch's subjects hold exactly the latest acknowledged record of every key (a
//     copy never replaced a newer record, nothing acknowledged is missing), in the partition the
//     native partitioner gives it;
//   - a new group at the current epoch delivers exactly that, once per key;
//   - the copies were both stored and refused as older (the producer wrote during the backfill:
//     the broker waits for its first records in the new epoch before copying).
func TestBackfillResumesAfterABrokerDiesAtEachStep(t *testing.T) {
	skipShortCluster(t)
	keys := 240
	if raceEnabled {
		keys = 120
	}
	c := startSingleNode(t)
	for _, tc := range []crashCase{
		{step: "backfill-start", partitions: 5, partitioner: "kafka-murmur2"},
		{step: "backfill-copy", partitions: 2, partitioner: "kafka-murmur2"},
		{step: "backfilling", partitions: 3, partitioner: "jump"},
		{step: "backfill-final", partitions: 4, partitioner: "kafka-murmur2"},
	} {
		t.Run(tc.step, func(t *testing.T) { runCrashCase(t, c, tc, keys, 1) })
	}
}

// TestClusterBackfillSurvivesLeaderChangesAndABrokerDeath: the same on a 3-node cluster with
// replicated streams (R3), where the backfilling broker dies after some copies and, while the
// other broker resumes, every partition stream's leader is made to step down: copies whose
// answers are lost are published again and refused, none is stored over a newer record.
func TestClusterBackfillSurvivesLeaderChangesAndABrokerDeath(t *testing.T) {
	skipShortCluster(t)
	keys := 160
	if raceEnabled {
		keys = 80
	}
	c := startCluster(t, 3)
	runCrashCase(t, c, crashCase{step: "backfill-copy", partitions: 4, partitioner: "jump", stepdowns: true}, keys, 3)
}

// crashCase is where the backfilling broker dies and what change it backfills.
type crashCase struct {
	step        string
	partitions  int
	partitioner string
	stepdowns   bool // make every partition stream's leader step down while the backfill resumes
}

func runCrashCase(t *testing.T, c *testCluster, tc crashCase, keys, replicas int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := "crash-" + tc.step
	var (
		died    atomic.Bool
		dead    atomic.Int32 // 1 + the index of the broker that died
		copies  atomic.Int32
		resumed atomic.Int32 // backfill steps run after the death
		newAcks atomic.Int32 // acknowledgements in the new epoch
		bs      [2]*broker.Broker
	)
	for i := range bs {
		cfg := cfgDefault()
		cfg.Replicas = replicas
		cfg.RetryInterval = 150 * time.Millisecond
		cfg.Testing = testhook.Steps(func(tp, s string) error {
			if tp != topic {
				return nil
			}
			if died.Load() && dead.Load() != int32(i+1) {
				resumed.Add(1)
			}
			switch s {
			case "backfill-start":
				// Copy only once the producer writes into the new epoch: some keys
				// then have a newer record before their copy is published.
				for newAcks.Load() < 20 && ctx.Err() == nil {
					time.Sleep(5 * time.Millisecond)
				}
			case "backfill-copy":
				time.Sleep(2 * time.Millisecond) // a backfill slow enough to overlap the producer
			}
			n := 0
			if s == "backfill-copy" {
				n = int(copies.Add(1))
			}
			if s == tc.step && (s != "backfill-copy" || n == keys/4) && died.CompareAndSwap(false, true) {
				dead.Store(int32(i + 1))
				bs[i].Conn().Close() // dead to NATS from now on
				return errors.New("dies here")
			}
			return nil
		})
		bs[i] = startClusterBroker(t, c, cfg)
	}
	defer func() {
		for i, b := range bs {
			if int(dead.Load()) == i+1 {
				b.Abort()
			} else {
				b.Close()
			}
		}
	}()
	admin := clusterClient(t, c, "")
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.NewProducer(ctx, topic, client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var latest latestLog
	send := func(n, key int) error {
		k := []byte(fmt.Sprintf("k%d", key))
		rec := client.Record{Key: k, Value: []byte(fmt.Sprintf("%s=%d", k, n))}
		if n%37 == 0 {
			rec = client.Record{Key: k, Tombstone: true}
		}
		ld := latest.done(p.ID(), rec)
		return p.Send(ctx, rec, func(r client.Result) {
			ld(r)
			if r.Err == nil && r.Epoch == 2 {
				newAcks.Add(1)
			}
		})
	}
	n := 0
	for ; n < 3*keys; n++ { // three values of every key in epoch 1
		if err := send(n, n%keys); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // one record a millisecond to the first half of the keys, through the change and the backfill
		defer wg.Done()
		for ; !stop.Load(); n++ {
			if err := send(n, n%(keys/2)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
		for i := 0; i < keys/2; i, n = i+1, n+1 { // and once more over them after the end
			if err := send(n, i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = admin.Repartition(rctx, wire.RepartitionRequest{Topic: topic, Partitions: tc.partitions, Partitioner: tc.partitioner})
	rcancel()
	if err != nil {
		t.Logf("repartition answered: %v (a broker died)", err)
	}
	if tc.stepdowns {
		for !died.Load() && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		for q := 0; q < max(3, tc.partitions); q++ {
			if _, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+wire.StreamName(topic, q), nil, 10*time.Second); err != nil {
				t.Logf("stepdown of partition %d: %v", q, err)
			}
		}
	}
	desc := waitBackfilled(t, ctx, admin, topic)
	if tc.stepdowns {
		waitStreamLeaders(t, ctx, admin, topic, max(3, tc.partitions))
	}
	stop.Store(true)
	wg.Wait()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if dead.Load() == 0 {
		t.Fatalf("no broker died at %s", tc.step)
	}
	if resumed.Load() == 0 {
		t.Fatalf("the surviving broker did not resume the backfill after the death at %s", tc.step)
	}
	bf := desc.Current().Backfill
	t.Logf("died at %s; backfill %+v; %d records acknowledged", tc.step, *bf, latest.acked)
	want := latest.snapshot()
	// At least the 20 keys written before the first copy were refused (counted again by
	// the broker that resumed); no key is copied twice.
	if bf.Newer < 20 || bf.Copied > int64(keys) {
		t.Errorf("backfill counted %d copies and %d refusals; want at least 20 refusals and at most one copy per key (%d keys)", bf.Copied, bf.Newer, keys)
	}
	// The second half of the keys was not written after epoch 1: their value in the
	// current epoch is a backfilled copy, of the key's last epoch-1 record.
	copied := 0
	for _, r := range readStreams(t, ctx, admin, topic) {
		if _, e, _, _, err := wire.SplitRecordSubject(r.subject); err == nil && e == 2 && !r.fence && r.origin != "" {
			var i int
			if _, err := fmt.Sscanf(r.key, "k%d", &i); err != nil || i < keys/2 {
				t.Errorf("key %q has a backfilled copy in epoch 2 (origin %s), but the producer wrote it in epoch 2", r.key, r.origin)
			}
			copied++
		}
	}
	if copied != keys-keys/2 {
		t.Errorf("epoch 2 holds %d backfilled copies; want one for each of the %d keys not written since", copied, keys-keys/2)
	}
	native, err := partitioner.Native(tc.partitioner)
	if err != nil {
		t.Fatal(err)
	}
	checkStoredState(t, ctx, admin, topic, want, native, false)
	checkLatest(t, "fresh group at the current epoch", readCurrentEpoch(t, ctx, admin, topic, "fresh", time.Second), want)
}

// startSingleNode starts one standalone JetStream server (no cluster) that several brokers can
// share, with the cluster helpers' full-permission NKey.
func startSingleNode(t *testing.T) *testCluster {
	t.Helper()
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	c := &testCluster{t: t, creds: filepath.Join(dir, "broker.nk")}
	if err := os.WriteFile(c.creds, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	c.opts = []*server.Options{{ServerName: "n0", Host: "127.0.0.1", Port: freePort(t), JetStream: true, StoreDir: filepath.Join(dir, "n0"),
		MaxPayload: 16 << 20, NoSigs: true, NoLog: true, Nkeys: []*server.NkeyUser{{Nkey: pub}}}}
	c.servers = []*server.Server{nil}
	c.start(0)
	t.Cleanup(c.shutdown)
	return c
}

// waitStreamLeaders waits until every partition stream of the topic has a leader that answers.
func waitStreamLeaders(t *testing.T, ctx context.Context, c *client.Client, topic string, n int) {
	t.Helper()
	for q := 0; q < n; q++ {
		for {
			s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
			if err == nil {
				if info := s.CachedInfo(); info.Cluster != nil && info.Cluster.Leader != "" {
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("partition stream %d has no leader: %v", q, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
