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
)

// TestMemberWaitsForAPartitionerWhileNoBrokerAnswers: a member fetches an epoch's partitioner
// from the broker when it first reads a record of that epoch. When no broker answers then (the
// only one restarts; NATS stays up), the member must wait for one, not stop: a member that stops
// leaves its group's records undelivered for good (issue 10), however long the broker stays away
// (here longer than the client's request timeout). Staged on a real 3-node NATS cluster with a
// real broker: the broker stops after the member joined and before any record is stored.
func TestMemberWaitsForAPartitionerWhileNoBrokerAnswers(t *testing.T) {
	tc := startTestCluster(t, 3)
	b := startClusterBroker(t, tc, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := clusterConnect(t, tc, 0, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	prod := clusterConnect(t, tc, 0, broker.RoleProducer)
	p, err := prod.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Each broker request of the member's client gives up after 2s: the broker stays away longer.
	cons, err := client.Connect(ctx, client.Options{URL: tc.url(0), Creds: tc.creds[broker.RoleConsumer], Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var amu sync.Mutex
	assigned := 0
	cn, err := cons.NewConsumer(ctx, "t", client.ConsumerOptions{Group: "g", FromBeginning: true, Heartbeat: 200 * time.Millisecond, Logf: t.Logf,
		OnAssigned: func(qs []int) { amu.Lock(); assigned += len(qs); amu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	log := &deliveryLog{seqs: map[uint64]bool{}}
	done := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() { done <- cn.Run(rctx, log.handle) }()
	waitFor(t, 30*time.Second, "the member owns both partitions", func() bool { amu.Lock(); defer amu.Unlock(); return assigned == 2 })

	b.Close() // no broker answers from now on; NATS stays up
	acked := map[uint64]bool{}
	for i := 0; i < 20; i++ {
		r, err := p.Produce(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		acked[r.ProducerSeq] = true
	}
	// The member now reads records of an epoch whose partitioner it has not fetched, and cannot.
	select {
	case err := <-done:
		t.Fatalf("the member stopped while no broker answered: %v", err)
	case <-time.After(5 * time.Second):
	}
	startClusterBroker(t, tc, 0)
	waitFor(t, 60*time.Second, "every record is delivered once a broker answers again", func() bool { return len(log.missing(acked)) == 0 }, func() string {
		select {
		case err := <-done:
			return fmt.Sprintf("the member stopped: %v", err)
		default:
			return fmt.Sprintf("%d undelivered", len(log.missing(acked)))
		}
	})
	rcancel()
	if err := <-done; err != nil {
		t.Errorf("member: %v", err)
	}
}
