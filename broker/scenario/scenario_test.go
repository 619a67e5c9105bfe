package scenario

import (
	"context"
	"testing"
	"time"
)

func logResult(t *testing.T, res *Result) {
	for _, r := range res.Reports {
		t.Log(r)
		for _, ex := range r.Examples {
			t.Log("  ", ex)
		}
	}
	t.Logf("acked %d, deliveries %d, wrong partition %d, gated %d, max wait %v, resent %d, elapsed %v", res.Acked, res.Deliveries, res.WrongPartition, res.Gated, res.MaxGateWait, res.Resent, res.Elapsed)
}

func TestScenarioBasic(t *testing.T) {
	res, err := Run(context.Background(), Config{Seed: 1, DataDir: t.TempDir(), Records: 500, SlowMember: time.Millisecond, Pace: 500 * time.Millisecond,
		LateMembers: 2, Changes: []Change{{Partitions: 7}, {Partitions: 3}, {Partitioner: "kafka-murmur2"}, {Partitions: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	if !res.OK() {
		t.Fatal("checker found problems")
	}
	if res.Gated == 0 {
		t.Fatal("the late group never waited at a gate: the test did not exercise gating")
	}
}

// TestCheckerCatchesUngatedConsumers shows that the checker can fail: the same kind of run with
// epoch gating turned off in the consumers delivers moved keys out of order.
func TestCheckerCatchesUngatedConsumers(t *testing.T) {
	res, err := Run(context.Background(), Config{Seed: 2, DataDir: t.TempDir(), Records: 300, SlowMember: 2 * time.Millisecond, Pace: 300 * time.Millisecond, DisableGating: true,
		Members: 2, LateMembers: 2, Keys: 20, Changes: []Change{{Partitions: 8}, {Partitioner: "kafka-murmur2"}}})
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	if res.OK() {
		t.Fatal("without gating the checker should have found order violations")
	}
}
