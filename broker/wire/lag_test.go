package wire

import "testing"

// TestLagCountsRecordsNotFenceMarkers: a group's lag in a partition stream is its records after
// the committed position, each fence marker (one right after every ended epoch's boundary of
// the partition, spec/protocol.md §6.4) excluded. Partition 0 of this topic: epoch 1's records
// 1-10, its fence marker at 11, epoch 2's records 12-20, its marker at 21, epoch 3's records from
// 22; counted by hand.
func TestLagCountsRecordsNotFenceMarkers(t *testing.T) {
	topic := &Topic{Epochs: []Epoch{
		{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 4}},
		{Epoch: 2, Partitions: 4, Boundaries: []uint64{20, 9, 3, 0}},
		{Epoch: 3, Partitions: 4},
	}}
	for _, c := range []struct {
		q             int
		position, end uint64
		want          uint64
	}{
		{0, 0, 30, 28},  // 30 messages, markers 11 and 21
		{0, 10, 30, 18}, // at epoch 1's boundary: its marker still ahead
		{0, 11, 30, 18}, // past the marker
		{0, 21, 30, 9},  // past both
		{0, 12, 20, 8},  // within epoch 2: no marker in (12, 20]
		{0, 30, 30, 0},  // caught up
		{0, 31, 30, 0},  // past the end (a stream that lost its tail): never negative
		{1, 0, 12, 10},  // markers at 5 and 10
		{3, 0, 5, 4},    // epoch 2's boundary 0: its marker is message 1
		{5, 0, 7, 7},    // a partition no epoch has ended in
	} {
		if got := topic.Lag(c.q, c.position, c.end); got != c.want {
			t.Errorf("Lag(%d, %d, %d) = %d, want %d", c.q, c.position, c.end, got, c.want)
		}
	}
}
