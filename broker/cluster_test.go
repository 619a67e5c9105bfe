package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestClusterRepartitionCompletes: on a 3-node cluster with R3 topics, every repartition answers
// with the new epoch active and leaves no change in progress. Before reads that decide went to
// the stream leader (and were checked against the revision the broker last wrote), a direct get
// answered by a follower returned the descriptor before "planned": the change looked finished,
// the request answered at once with the previous epoch, and the descriptor stayed "planned".
func TestClusterRepartitionCompletes(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	b := startClusterBroker(t, c, cfgDefault())
	defer b.Close()
	admin := clusterClient(t, c, c.URL(1))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Several topics change at once, and records flow into another topic, so that the nodes are
	// busy and a follower's copy of the descriptor bucket lags behind its leader now and then, as
	// it does on a loaded cluster.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go clusterLoad(t, loadCtx, admin)
	const topics, changes = 5, 4
	errs := make(chan error, topics)
	for i := 0; i < topics; i++ {
		go func(name string) { errs <- changeRepeatedly(ctx, admin, name, changes) }(fmt.Sprintf("t%d", i))
	}
	for i := 0; i < topics; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func changeRepeatedly(ctx context.Context, admin *client.Client, name string, changes int) error {
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: name, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		return err
	}
	for j := 0; j < changes; j++ {
		want := j + 2
		start := time.Now()
		got, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: name, Partitions: 3 + j})
		if err != nil {
			return fmt.Errorf("%s: change %d: %v", name, j, err)
		}
		took := time.Since(start)
		if cur := got.Current(); cur.Epoch != want || got.Change != nil {
			return fmt.Errorf("%s: the change to epoch %d answered after %v with epoch %d, change %+v: the broker took a stale descriptor for 'no change in progress'", name, want, took, cur.Epoch, got.Change)
		}
		desc, _, err := admin.Topic(ctx, name)
		if err != nil {
			return err
		}
		if desc.Current().Epoch != want || desc.Change != nil {
			return fmt.Errorf("%s: topic.get right after the change to epoch %d shows epoch %d, change %+v", name, want, desc.Current().Epoch, desc.Change)
		}
	}
	return nil
}

// clusterLoad keeps records flowing into an R3 topic until ctx ends.
func clusterLoad(t *testing.T, ctx context.Context, admin *client.Client) {
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "load", Partitions: 3, Partitioner: "kafka-murmur2"}); err != nil {
		return
	}
	p, err := admin.NewProducer(ctx, "load", client.ProducerOptions{})
	if err != nil {
		return
	}
	defer p.Close(context.Background())
	value := make([]byte, 512)
	for i := 0; ctx.Err() == nil; i++ {
		if p.Send(ctx, client.Record{Key: []byte(fmt.Sprint(i % 100)), Value: value}, nil) != nil {
			return
		}
	}
}

// TestClusterStuckChangeIsRetried: an epoch change that cannot proceed because the only node of a
// partition stream is down (an R1 topic placed on node n2 by a placement tag) is finished by the
// broker itself once the node is back, without a restart, and the stuck step is logged once, not
// once per retry. Before the retry loop the change stayed unfinished until 'pctl serve' was
// restarted (TestFailedChangeStepIsRetried shows that on the embedded server).
func TestClusterStuckChangeIsRetried(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	logs := &logLines{}
	cfg := cfgDefault()
	cfg.RetryInterval = 200 * time.Millisecond
	cfg.Logf = logs.logf(t)
	cfg.NATSURL = c.URL(0) // not through n2, which goes down
	b := startClusterBroker(t, c, cfg)
	defer b.Close()
	admin := clusterClient(t, c, c.URL(1))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	desc, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "stuck", Partitions: 2, Partitioner: "kafka-murmur2", Replicas: 1, PlacementTags: []string{"node:n2"}})
	if err != nil {
		t.Fatal(err)
	}
	if desc.Replicas != 1 || len(desc.PlacementTags) != 1 {
		t.Fatalf("descriptor: replicas %d, placement %v; want 1, [node:n2]", desc.Replicas, desc.PlacementTags)
	}
	for q := 0; q < 2; q++ {
		if n := streamNode(t, ctx, admin, wire.StreamName("stuck", q)); n != "n2" {
			t.Fatalf("partition %d is on %s, not on n2 as its placement tag says", q, n)
		}
	}
	c.Stop(2)
	_, err = admin.Repartition(ctx, wire.RepartitionRequest{Topic: "stuck", Partitions: 3})
	if err == nil {
		t.Fatal("the change succeeded with the partitions' only node down")
	}
	t.Logf("with node n2 down: %v", err)
	time.Sleep(3 * time.Second) // many retry intervals: the loop retries while the node is down
	c.Restart(2)
	deadline := time.Now().Add(90 * time.Second)
	for {
		desc, _, err := admin.Topic(ctx, "stuck")
		if err == nil && desc.Change == nil && desc.Current().Epoch == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90s after node n2 came back the change is still unfinished: %+v (%v)", desc, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := streamNode(t, ctx, admin, wire.StreamName("stuck", 2)); n != "n2" {
		t.Errorf("partition 2, made by the change, is on %s: new partitions must get the topic's placement", n)
	}
	if n := logs.count("failed"); n < 1 || n > 4 {
		t.Errorf("the stuck step was logged %d times as failed; want once per distinct failure, not once per retry:\n%s", n, logs.String())
	}
	if logs.count("finished") < 1 {
		t.Errorf("no log line says the change finished:\n%s", logs.String())
	}
}

// streamNode returns the name of the node leading a stream.
func streamNode(t *testing.T, ctx context.Context, cl *client.Client, stream string) string {
	t.Helper()
	s, err := cl.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	ci := s.CachedInfo().Cluster
	if ci == nil || ci.Leader == "" {
		t.Fatalf("stream %s has no leader", stream)
	}
	return ci.Leader
}

// logLines collects a broker's log lines (and passes them to t.Logf).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(t *testing.T) func(string, ...any) {
	return func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
		t.Log(line)
	}
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestClusterReplicas: a topic's replicas and placement are the broker's default or its own, in
// the descriptor and on every partition stream; a live topic goes from R1 to R3 (and moves by
// placement tag) while a producer writes, with every acknowledged record kept; partitions made by
// a later epoch change get the topic's replicas.
func TestClusterReplicas(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	b := startClusterBroker(t, c, cfgDefault()) // Replicas 3
	defer b.Close()
	admin := clusterClient(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	replicasOf := func(stream string) (int, string) {
		t.Helper()
		s, err := admin.JetStream().Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		leader := ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return info.Config.Replicas, leader
	}
	d, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "dflt", Partitions: 2, Partitioner: "kafka-murmur2"})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := replicasOf(wire.StreamName("dflt", 1)); d.Replicas != 3 || r != 3 {
		t.Fatalf("default: descriptor says %d replicas, stream has %d; want the broker's 3", d.Replicas, r)
	}
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "r1", Partitions: 3, Partitioner: "kafka-murmur2", Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	for q := 0; q < 3; q++ {
		if r, _ := replicasOf(wire.StreamName("r1", q)); r != 1 {
			t.Fatalf("r1 partition %d has %d replicas", q, r)
		}
	}
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "r9", Partitions: 1, Partitioner: "kafka-murmur2", Replicas: 9}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("9 replicas: got %v, want a bad request", err)
	}
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "r4", Partitions: 1, Partitioner: "kafka-murmur2", Replicas: 4}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("4 replicas on 3 servers: got %v, want a bad request", err)
	} else if _, _, err := admin.Topic(ctx, "r4"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a creation the cluster cannot place must be undone; topic.get says %v", err)
	}

	// R1 -> R3 while records flow.
	p, err := admin.NewProducer(ctx, "r1", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var acked, failed atomic.Int64
	stop := make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint("k", i%64)), Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
				if r.Err != nil {
					failed.Add(1)
				} else {
					acked.Add(1)
				}
			})
			if err != nil {
				return
			}
			if i%200 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	d, err = admin.SetTopic(ctx, wire.SetTopicRequest{Topic: "r1", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d.Replicas != 3 || d.Reconfig != nil {
		t.Fatalf("after topic set: replicas %d, reconfig %+v", d.Replicas, d.Reconfig)
	}
	for q := 0; q < 3; q++ {
		if r, _ := replicasOf(wire.StreamName("r1", q)); r != 3 {
			t.Fatalf("r1 partition %d has %d replicas after topic set --replicas 3", q, r)
		}
	}
	time.Sleep(300 * time.Millisecond)
	// An epoch change adds a partition with the topic's (new) replicas.
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "r1", Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	if r, _ := replicasOf(wire.StreamName("r1", 3)); r != 3 {
		t.Fatalf("partition 3, made by the epoch change, has %d replicas; want the topic's 3", r)
	}
	// Back to R1, on node n1 only.
	d, err = admin.SetTopic(ctx, wire.SetTopicRequest{Topic: "r1", Replicas: 1, PlacementTags: []string{"node:n1"}, SetPlacement: true})
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-sent
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d records failed while the replicas changed", failed.Load())
	}
	deadline := time.Now().Add(60 * time.Second)
	for q := 0; q < 4; q++ {
		for {
			r, leader := replicasOf(wire.StreamName("r1", q))
			if r == 1 && leader == "n1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("partition %d: %d replicas led by %s; want 1 on n1 (placement tag node:n1)", q, r, leader)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var stored uint64
	for q := 0; q < 4; q++ {
		s, err := admin.JetStream().Stream(ctx, wire.StreamName("r1", q))
		if err != nil {
			t.Fatal(err)
		}
		stored += s.CachedInfo().State.Msgs
	}
	markers := uint64(3) // one fence marker per old partition of the change
	if stored-markers != uint64(acked.Load()) {
		t.Fatalf("%d records stored, %d acknowledged: an acknowledged record was lost (or stored twice) while the replicas changed", stored-markers, acked.Load())
	}
	t.Logf("%d records acknowledged and stored across R1 -> R3 -> R1 and a move", acked.Load())
}
