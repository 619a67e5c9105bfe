package broker_test

import (
	"context"
	"fmt"
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
