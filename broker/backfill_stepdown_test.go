package broker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

// TestClusterBackfillReadsOnAcrossStepDowns: every old partition stream's leader steps down
// while the backfill reads it (the step hook does it inside the tenth copy, with every partition's
// read open), three times. A read whose consumer went silent must notice it and start again
// where it was; the old broker's reads (nats.go's default ordered heartbeat of 5 s, noticed only
// after 10 s within one Next call, and Next called with 5 s waits) never noticed, and the backfill
// stayed running (CI, 2026-12-01).
func TestClusterBackfillReadsOnAcrossStepDowns(t *testing.T) {
	skipShortCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, keys = "bf-stepdown", 300
	c := startCluster(t, 3)
	admin := clusterClient(t, c, "")
	var copies, stepped atomic.Int32
	cfg := cfgDefault()
	cfg.Replicas = 3
	cfg.RetryInterval = 150 * time.Millisecond
	cfg.Testing = testhook.Steps(func(tp, s string) error {
		if tp != topic || s != "backfill-copy" {
			return nil
		}
		if n := copies.Add(1); n%40 == 10 && stepped.Load() < 3 {
			stepped.Add(1)
			for q := 0; q < 3; q++ {
				if _, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+wire.StreamName(topic, q), nil, 5*time.Second); err != nil {
					t.Logf("stepdown of partition %d: %v", q, err)
				}
			}
		}
		return nil
	})
	b := startClusterBroker(t, c, cfg)
	defer b.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 3, Partitioner: "kafka-murmur2", Compact: true}); err != nil {
		t.Fatal(err)
	}
	latest := writeRounds(t, ctx, admin, topic, keys, 2)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 5, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	desc := waitBackfilled(t, ctx, admin, topic)
	bf := desc.Current().Backfill
	t.Logf("%d step-downs; backfill %+v", stepped.Load(), *bf)
	if stepped.Load() == 0 {
		t.Fatal("no leader stepped down during the backfill")
	}
	native, err := partitioner.Native("jump")
	if err != nil {
		t.Fatal(err)
	}
	checkStoredState(t, ctx, admin, topic, latest.snapshot(), native, false)
}
