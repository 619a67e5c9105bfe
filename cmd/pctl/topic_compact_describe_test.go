package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// TestDescribeRunningBackfill: topic describe words a running backfill's progress from the
// descriptor: old partitions done, stored messages of the old epoch handled (counted by hand
// below), copies and refusals; a retirement in progress, and what each epoch retains.
func TestDescribeRunningBackfill(t *testing.T) {
	started := time.Now().Add(-90 * time.Second).UTC()
	ended := started.Add(1500 * time.Millisecond)
	desc := &wire.Topic{Name: "kv", ID: "id1", Created: started, Compact: &wire.Compaction{DeleteRetentionMS: 3600_000},
		Retiring: &wire.Retiring{Through: 1, Started: started},
		Epochs: []wire.Epoch{
			// Epoch 1: partitions 0..1 hold sequences 1-10 and 1-4; fence markers at 11 and 5.
			{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 4}, Started: started, Retired: true},
			// Epoch 2 (backfilled from 1, done): 3 partitions; its records start at 12, 6, 1;
			// boundaries 20, 9, 7: 9 + 4 + 7 = 20 stored messages.
			{Epoch: 2, Partitions: 3, Boundaries: []uint64{20, 9, 7}, Started: started,
				Backfill: &wire.Backfill{State: wire.BackfillDone, Started: started, Ended: &ended, Done: []uint64{10, 4}, Copied: 9, Newer: 3, Expired: 1}},
			// Epoch 3: the backfill from 2 has handled 12..15 (4), none of 6..9, all of 1..7 (7).
			{Epoch: 3, Partitions: 3, Started: started,
				Backfill: &wire.Backfill{State: wire.BackfillRunning, Started: started, Done: []uint64{15, 0, 7}, Copied: 8, Newer: 2}},
		}}
	var out bytes.Buffer
	describeTopic(&out, desc, 7)
	s := out.String()
	for _, want := range []string{
		`compaction\s+compacted: the latest record of every key; tombstones kept 1h0m0s`,
		`backfill\s+into epoch 3, running: 1 of 3 old partitions done, 11 of 20 stored messages of epoch 2 handled, 8 copies, 2 refused as older, running 1m3[01]s`,
		`retiring\s+epochs through 1, checking the groups' positions`,
		`retained\s+epochs 2-3; retired \(records deleted\): 1`,
		`records\s+retired \(deleted`,
		`backfill\s+done: 9 copies, 3 refused \(the key had a newer record\), 1 tombstones expired, took 1.5s`,
		`backfill\s+running: 1 of 3 old partitions done`,
	} {
		if !regexp.MustCompile(want).MatchString(s) {
			t.Errorf("describe does not say %q:\n%s", want, s)
		}
	}
}
