package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestSlowStreamCreationIsRetriedWithinTheRequest: a topic whose first stream requests fail as
// they do on a loaded cluster (one JetStream call past its 5 s bound) is still created by the
// request that asked for it: topic.new retries the creation (the retry loop is an hour away
// here, so only the request can) and answers with the created topic. A failure that no retry
// changes (a bad request) is answered at once, the creation undone. Mutant shown failing:
// apiTopicCreate without its retry (the first failure answered: "the broker keeps retrying").
func TestSlowStreamCreationIsRetriedWithinTheRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls atomic.Int32
	hook := func(topic string, q int) error {
		switch {
		case topic == "slow" && q == 2 && calls.Add(1) <= 3:
			return errors.New("create stream PCTL_slow_2: context deadline exceeded")
		case topic == "never":
			return fmt.Errorf("%w: injected: no server has the placement tags", wire.ErrBadRequest)
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		Testing: &testhook.Broker{Create: hook}, RetryInterval: time.Hour, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	got, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "slow", Partitions: 4, Partitioner: "kafka-murmur2"})
	if err != nil {
		t.Fatalf("a creation whose stream requests failed 3 times: %v, want it created by the same request", err)
	}
	if got.Creating || got.Current().Partitions != 4 {
		t.Fatalf("the answer is %+v, want the created topic", got)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("partition 2's stream was tried %d times, want 4 (3 failures, then created)", n)
	}
	desc, _, err := admin.Topic(ctx, "slow")
	if err != nil || desc.Creating {
		t.Fatalf("topic.get after the creation: %+v, %v", desc, err)
	}
	start := time.Now()
	_, err = admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "never", Partitions: 2, Partitioner: "kafka-murmur2"})
	if !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("a creation that can never succeed: %v, want bad_request", err)
	}
	t.Logf("the bad request was answered in %v", time.Since(start).Round(time.Millisecond))
	if _, _, err := admin.Topic(ctx, "never"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("topic.get of the refused creation: %v, want not_found (the creation undone)", err)
	}
}

// TestWritesWaitForTheirBucket: a topic.new whose descriptor write the topics bucket does not
// answer (two of three nodes down, so the bucket's R3 stream has no quorum: the write times out
// or finds no responder) is answered once the bucket answers again, within the request: a
// cluster that has just started or is electing must not turn `pctl topic create` into
// "unavailable: nats: no response from stream" (stop 25's CI failure, on a fresh cluster). A
// timed-out write may have been stored after all: the retry then finds the key taken by the same
// topic and answers with it, not with "already exists". A plugin upload waits for the plugins
// bucket the same way. Mutants shown failing: createTopicKey without its retry ("unavailable:
// context deadline exceeded"), apiPluginUpload without its retry.
func TestWritesWaitForTheirBucket(t *testing.T) {
	skipShortCluster(t)
	c := startCluster(t, 3)
	cfg := cfgDefault()
	cfg.NATSURL = c.URL(0)
	b := startClusterBroker(t, c, cfg)
	defer b.Close()
	admin := clusterClient(t, c, c.URL(0))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// withoutQuorum runs req while nodes 1 and 2 are down, restarts them once req has waited past
	// one write's bound (5 s) without an answer, and returns req's answer.
	withoutQuorum := func(what string, req func() error) error {
		c.Stop(1)
		c.Stop(2)
		done := make(chan error, 1)
		go func() { done <- req() }()
		select {
		case err := <-done:
			t.Fatalf("%s answered while its bucket had no quorum: %v", what, err)
		case <-time.After(8 * time.Second):
		}
		c.Restart(1)
		c.Restart(2)
		return <-done
	}

	var created *wire.Topic
	err := withoutQuorum("topic.new", func() (err error) {
		created, err = admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 2, Partitioner: "kafka-murmur2", Replicas: 1})
		return err
	})
	if err != nil {
		t.Fatalf("topic.new once the topics bucket answers again: %v, want the created topic", err)
	}
	if created.Creating || created.Current().Partitions != 2 {
		t.Fatalf("the answer is %+v, want the created topic", created)
	}
	desc, _, err := admin.Topic(ctx, "t")
	if err != nil || desc.ID != created.ID {
		t.Fatalf("topic.get after the creation: %+v, %v; want topic %s", desc, err, created.ID)
	}

	wasm, err := os.ReadFile(filepath.Join("..", "plugins", "murmur2", "kafka-murmur2-rust.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	var info *wire.PluginInfo
	err = withoutQuorum("plugin.put", func() (err error) {
		info, err = admin.UploadPlugin(ctx, wasm)
		return err
	})
	if err != nil {
		t.Fatalf("plugin.put once the plugins bucket answers again: %v, want it stored", err)
	}
	got, err := admin.PluginInfo(ctx, info.Digest)
	if err != nil || got.Digest != info.Digest {
		t.Fatalf("plugin.info after the upload: %+v, %v; want %s", got, err, info.Digest)
	}
}
