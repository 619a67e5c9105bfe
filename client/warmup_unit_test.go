package client_test

import (
	"testing"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// ChangelogReadStart (spec/protocol.md §6.10 step 3, §10.5) on descriptors written by hand: a
// reader of a changelog's latest state reads the current epoch alone only on a topic that
// backfills, once no backfill runs; from one past the stream's last fence marker (its boundary
// + 1 is the marker), and not at all in a stream the current epoch does not have.
func TestChangelogReadStart(t *testing.T) {
	two := func(compact bool, backfill string) *wire.Topic {
		t := &wire.Topic{Name: "cl", Epochs: []wire.Epoch{
			{Epoch: 1, Partitions: 4, Boundaries: []uint64{10, 20, 30, 40}},
			{Epoch: 2, Partitions: 2},
		}}
		if compact {
			t.Compact = &wire.Compaction{DeleteRetentionMS: 86400000}
		}
		if backfill != "" {
			t.Epochs[1].Backfill = &wire.Backfill{State: backfill}
		}
		return t
	}
	one := &wire.Topic{Name: "cl", Compact: &wire.Compaction{DeleteRetentionMS: 86400000}, Epochs: []wire.Epoch{{Epoch: 1, Partitions: 4}}}
	for _, tc := range []struct {
		name   string
		t      *wire.Topic
		q      int
		first  uint64
		needed bool
	}{
		{"plain topic: every layout", two(false, ""), 1, 1, true},
		{"compacted, never changed", one, 3, 1, true},
		{"compacted, backfill running: every layout", two(true, wire.BackfillRunning), 1, 1, true},
		{"compacted, backfill done: past the fence marker at 21", two(true, wire.BackfillDone), 1, 22, true},
		{"compacted, backfill done: partition 0, marker at 11", two(true, wire.BackfillDone), 0, 12, true},
		{"compacted, backfill done: shrunk-away stream 3 is not read", two(true, wire.BackfillDone), 3, 0, false},
	} {
		first, needed := client.ChangelogReadStart(tc.t, tc.q)
		if first != tc.first || needed != tc.needed {
			t.Errorf("%s: ChangelogReadStart(q=%d) = %d, %v, want %d, %v", tc.name, tc.q, first, needed, tc.first, tc.needed)
		}
	}
}
