package broker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/testhook"
)

// TestFailedChangeStepIsRetried: a step of an epoch change that fails once (as a step does while
// a node is down) is retried by the broker that runs, without a restart; the later change is not
// refused. Before the retry loop, the change stayed at the failed step until the broker was
// restarted, and every later repartition was refused with change_in_progress.
func TestFailedChangeStepIsRetried(t *testing.T) {
	for _, state := range []string{"created", "fenced"} {
		t.Run(state, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var failed atomic.Int32
			hook := func(topic, s string) error {
				if s == state && failed.Add(1) == 1 {
					return errors.New("the step fails once")
				}
				return nil
			}
			b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Testing: testhook.Steps(hook),
				RetryInterval: 100 * time.Millisecond, Logf: t.Logf})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			admin := connect(t, b, broker.RoleAdmin)
			if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 3}); err == nil {
				t.Fatal("the failing step should have failed the request")
			}
			deadline := time.Now().Add(60 * time.Second)
			for {
				desc, _, err := admin.Topic(ctx, "t")
				if err != nil {
					t.Fatal(err)
				}
				if desc.Change == nil && desc.Current().Epoch == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("60s after the failed step the change is still at %+v: nothing retried it", desc.Change)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "t", Partitions: 4}); err != nil {
				t.Fatalf("the next change: %v", err)
			}
		})
	}
}
