package scenario

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"testing"
	"time"

	"pctl.dev/pctl/client/verify"
)

func logResult(t *testing.T, res *Result) {
	for _, r := range res.Reports {
		t.Log(r)
		for _, ex := range r.Examples {
			t.Log("  ", ex)
		}
	}
	t.Logf("acked %d, deliveries %d, placement: %d checked, %d wrong, %d errors; misplaced records %d, gated %d, max wait %v, resent %d, elapsed %v", res.Acked, res.Deliveries, res.Placement.Checked, res.Placement.Wrong, res.Placement.Errors, res.MisplacedRecords, res.Gated, res.MaxGateWait, res.Resent, res.Elapsed)
	for _, ex := range res.Placement.Examples {
		t.Log("  ", ex)
	}
	for _, e := range res.SendErrors {
		t.Log("  send failed:", e)
	}
	if res.Verify != nil {
		for _, ex := range res.Verify.Examples {
			t.Log("  ", ex)
		}
	}
	if f := res.Failures(); len(f) > 0 {
		t.Logf("failures: %q", f)
	}
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
	// The waits come through the consumers' gate-wait hook, one per gated record.
	if int64(len(res.GateWaits)) != res.Gated {
		t.Fatalf("%d gate waits seen by the hook, %d records gated", len(res.GateWaits), res.Gated)
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
	// The run must fail for the right reason, and for that reason only: order violations, with
	// nothing lost, nothing delivered with a wrong key or unexpected, no duplicate (no crash was
	// injected), every delivery in its partition and every record on its side of a boundary.
	violations := 0
	for _, rep := range res.Reports {
		violations += rep.Violations
	}
	if res.OK() || violations == 0 {
		t.Fatalf("without gating the checker should have found order violations; found %d (failures %q)", violations, res.Failures())
	}
	if !slices.Equal(res.Verify.Failures, []string{verify.FailOrder}) {
		t.Errorf("the order checker failed with %q; want only %q", res.Verify.Failures, verify.FailOrder)
	}
	for _, rep := range res.Reports {
		if rep.Lost > 0 || rep.WrongKey > 0 || rep.Unexpected > 0 || rep.Duplicates > 0 {
			t.Errorf("group %s: %s", rep.Group, rep)
		}
	}
	if len(res.Reports) != 2 || res.Placement.Checked == 0 || !res.Placement.OK() || res.MisplacedRecords > 0 {
		t.Errorf("%d reports; placement: %d checked, %d wrong, %d errors; %d misplaced records", len(res.Reports), res.Placement.Checked, res.Placement.Wrong, res.Placement.Errors, res.MisplacedRecords)
	}
}

// TestRandomised runs many seeds of the full scenario: client-side and broker-side producers, a
// producer that keeps a stale descriptor, 2 to 4 group members, several epoch changes in a row
// (grow, shrink, swap the function, grow again) and faults: a broker restart in the middle of an
// epoch change and a group member killed and replaced. Every seed must lose nothing and break no
// per-key order, in a live group and in a group that starts late (whose gates really wait).
func TestRandomised(t *testing.T) {
	seeds := 30
	if testing.Short() || raceEnabled {
		seeds = 6
	}
	swaps := []string{"kafka-murmur2", "jump", "sarama-fnv1a", "linear-murmur2", "librdkafka-consistent"}
	for seed := 1; seed <= seeds; seed++ {
		seed := seed
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(seed)))
			grow := 2 + rng.Intn(6)
			changes := []Change{
				{Partitions: grow + 2 + rng.Intn(5)},                                    // grow
				{Partitions: 1 + rng.Intn(grow)},                                        // shrink
				{Partitioner: swaps[rng.Intn(len(swaps))]},                              // swap the function
				{Partitions: 3 + rng.Intn(8), Partitioner: swaps[rng.Intn(len(swaps))]}, // grow again (maybe swap too)
			}
			cfg := Config{
				Seed: int64(seed), DataDir: t.TempDir(), Partitions: grow,
				Partitioner:     swaps[rng.Intn(len(swaps))],
				Keys:            20 + rng.Intn(200),
				ClientProducers: 1 + rng.Intn(2), ThinProducers: 1,
				StaleProducer: true,
				Records:       150 + rng.Intn(150),
				Members:       2 + rng.Intn(3),
				LateMembers:   2,
				Changes:       changes,
				RestartDuring: 1 + rng.Intn(len(changes)),
				KillMember:    true,
				SlowMember:    time.Duration(rng.Intn(2)) * time.Millisecond,
				Pace:          800 * time.Millisecond,
			}
			for cfg.Changes[2].Partitioner == cfg.Partitioner {
				cfg.Changes[2].Partitioner = swaps[rng.Intn(len(swaps))]
			}
			if os.Getenv("PCTL_SCENARIO_LOG") != "" {
				cfg.Logf = t.Logf
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !res.OK() || !res.Restarted || !res.Killed {
				logResult(t, res)
				t.Fatalf("seed %d: restarted=%v killed=%v ok=%v", seed, res.Restarted, res.Killed, res.OK())
			}
		})
	}
}

// TestHundredThousandRecords: 100,000 keyed records from 4 concurrent producers (2 partitioning
// on the client, 2 thin ones through the broker's produce service), a group of 3 members: every
// acknowledged record delivered, per-key order intact, every record in the partition its key's
// function gives (checked by the scenario for each delivery).
func TestHundredThousandRecords(t *testing.T) {
	records := 25000
	if raceEnabled || testing.Short() {
		records = 2500
	}
	cfg := Config{Seed: 7, DataDir: t.TempDir(), Partitions: 6, Partitioner: "kafka-murmur2",
		Keys: 1000, ClientProducers: 2, ThinProducers: 2, PipelinedThin: true, Records: records, Members: 3, Pace: time.Millisecond}
	if os.Getenv("PCTL_SCENARIO_LOG") != "" {
		cfg.Logf = t.Logf
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logResult(t, res)
	if !res.OK() || res.Acked != 4*records {
		t.Fatalf("acked %d of %d; ok=%v", res.Acked, 4*records, res.OK())
	}
}
