package broker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

func skipShortCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster test: skipped with -short")
	}
}

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
// partition stream is down is finished by the broker itself once the node is back, without a
// restart of the broker, and the stuck step is logged once, not once per retry. Before the retry
// loop, the change stayed unfinished until 'pctl serve' restarted, and every later change was
// refused with change_in_progress.
func TestClusterStuckChangeIsRetried(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	logs := &logLines{}
	cfg := cfgDefault()
	cfg.Replicas = 1
	cfg.RetryInterval = 200 * time.Millisecond
	cfg.Logf = logs.logf(t)
	b := startClusterBroker(t, c, cfg)
	defer b.Close()
	admin := clusterClient(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Find a topic whose partition 0 lives on another node than the descriptor bucket (R1 here),
	// so that stopping that node stops the partition and nothing an epoch change needs besides.
	buckets := map[string]bool{streamNode(t, ctx, admin, "KV_"+wire.TopicsBucket): true}
	var name, node string
	for i := 0; i < 20 && name == ""; i++ {
		n := fmt.Sprintf("stuck%d", i)
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: n, Partitions: 1, Partitioner: "kafka-murmur2"}); err != nil {
			t.Fatal(err)
		}
		if nd := streamNode(t, ctx, admin, wire.StreamName(n, 0)); !buckets[nd] {
			name, node = n, nd
		}
	}
	if name == "" {
		t.Skip("every partition stream landed on the descriptor bucket's node")
	}
	idx := int(node[1] - '0')
	c.Stop(idx)
	_, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: name, Partitions: 2})
	if err == nil {
		t.Fatal("the change succeeded with the partition's only node down")
	}
	t.Logf("with node %s down: %v", node, err)
	time.Sleep(2 * time.Second) // several retry intervals: retries while the node is down
	c.Restart(idx)
	deadline := time.Now().Add(90 * time.Second)
	for {
		desc, _, err := admin.Topic(ctx, name)
		if err == nil && desc.Change == nil && desc.Current().Epoch == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90s after node %s came back the change is still unfinished: %+v (%v)", node, desc, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := logs.count("attempt"); n < 1 || n > 3 {
		t.Errorf("the stuck step was logged %d times as a failed attempt; want once (or a couple of times as its error changed):\n%s", n, logs.String())
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
