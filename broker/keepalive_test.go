package broker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestAdminRequestFailsFastWhenItsBrokerDies: an epoch change request is taken by a broker that
// dies right after recording the change (its connection drops, as with kill -9: TestDemoCluster
// saw 'the broker did not answer pctl.admin.topic.repartition within 30s' after the broker that
// took it was killed, and the retrying operator ran out of time). The request must fail with
// `unavailable` saying the broker stopped answering (keep-alives, spec/protocol.md §3), not wait
// out its timeout (here 10 minutes, so the old client fails this test by the test's own
// deadline). A request to a live broker that works for longer than the silence limit (a slow
// step) must still get its answer.
func TestAdminRequestFailsFastWhenItsBrokerDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "dies"
	var b *broker.Broker
	var mode atomic.Value // the hook runs on the broker's goroutines (and its retry loop's)
	mode.Store("")
	released := make(chan struct{})
	var err error
	b, err = broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
		Testing: testhook.Steps(func(name, state string) error {
			if name != topic || state != "planned" {
				return nil
			}
			switch mode.Load().(string) {
			case "slow":
				time.Sleep(7 * time.Second) // longer than the client's keep-alive silence limit
			case "die":
				b.DropConnection()
				<-released // no answer until the test ends, as from a killed process
				return errors.New("released")
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	t.Cleanup(func() { close(released) }) // runs first
	admin, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin), Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}

	mode.Store("slow")
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 3}); err != nil {
		t.Fatalf("a slow change on a live broker: %v (keep-alives must keep the request alive)", err)
	}

	mode.Store("die")
	_, err = admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 4})
	switch {
	case err == nil:
		t.Fatal("the request was answered by a broker that died")
	case ctx.Err() != nil:
		t.Fatalf("the request waited for the dead broker until the test's deadline: %v", err)
	case !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "stopped answering"):
		t.Fatalf("error %v, want unavailable: the broker stopped answering", err)
	}
	t.Logf("request to a broker that died: %v", err)
}

// TestReadsSurviveABrokerThatSwallowsThem: a second member of the brokers' queue group takes
// requests and never answers, as a broker that dies (or whose node dies) with requests it was
// routed does. Reads (pctl.api.*) are idempotent: a read that no broker takes within 5 s (no
// keep-alive) is sent again, so every read succeeds. The chaos suite's seed 4 lost a consumer
// member to 'the broker did not answer pctl.api.plugin.get within 30s' after a node was killed.
// The old client waited out its timeout for each swallowed read (and failed it).
func TestReadsSurviveABrokerThatSwallowsThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := startBroker(t, "")
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "swallow", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	hole := connect(t, b, broker.RoleAdmin)
	var swallowed atomic.Int32
	sub, err := hole.Conn().QueueSubscribe(wire.APITopicGet, "pctl-broker", func(*nats.Msg) { swallowed.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := hole.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	reader, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleConsumer), Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	for i := 0; swallowed.Load() < 2 && i < 40; i++ {
		rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
		_, _, err := reader.Topic(rctx, "swallow")
		rcancel()
		if err != nil {
			t.Fatalf("read %d (%d swallowed so far): %v", i+1, swallowed.Load(), err)
		}
	}
	if swallowed.Load() < 2 {
		t.Fatalf("the queue group gave the swallowing member %d requests of 40: the test proves nothing", swallowed.Load())
	}
	t.Logf("every read answered; %d requests swallowed on the way", swallowed.Load())
}
