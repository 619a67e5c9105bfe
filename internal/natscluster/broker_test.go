package natscluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/natscluster"
)

// TestBrokerOnCluster is the harness's use by pctl: a broker on the cluster (as 'pctl serve
// --nats URLS --creds FILE' runs it) creates a topic whose partition streams have 3 replicas on 3
// different nodes, and a client produces through a stream leader's kill -9.
func TestBrokerOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	c := natscluster.Start(t, natscluster.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	stream := wire.StreamName("t", 0)
	info, err := c.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[int]bool{info.Leader: true}
	for _, r := range info.Replicas {
		nodes[r.Node] = true
	}
	if info.Leader < 0 || len(info.Replicas) != 2 || len(nodes) != 3 {
		t.Fatalf("stream %s: leader %d, replicas %+v; want 3 replicas on 3 nodes", stream, info.Leader, info.Replicas)
	}
	p, err := cl.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	produce := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := p.Produce(ctx, client.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 20)
	if err := c.Kill(info.Leader); err != nil {
		t.Fatal(err)
	}
	produce(20, 20)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
