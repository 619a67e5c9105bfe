package client

import (
	"reflect"
	"testing"

	"pctl.dev/pctl/broker/wire"
)

// TestParentFirstOrder: the partitions a member takes are ordered by the epoch of the record
// each reads next. The topic, written by hand: epoch 1 of 2 partitions (boundaries 10 and 20),
// epoch 2 of 4 (boundaries 30, 40, 5, 0: partition 3 had no record then), epoch 3 current.
func TestParentFirstOrder(t *testing.T) {
	topic := &wire.Topic{Epochs: []wire.Epoch{
		{Epoch: 1, Partitions: 2, Boundaries: []uint64{10, 20}},
		{Epoch: 2, Partitions: 4, Boundaries: []uint64{30, 40, 5, 0}},
		{Epoch: 3, Partitions: 4},
	}}
	for _, c := range []struct {
		q    int
		pos  uint64
		want int
	}{
		{0, 0, 1}, {0, 9, 1}, {0, 10, 2}, {0, 11, 2}, {0, 30, 3}, {0, 99, 3},
		{1, 19, 1}, {1, 20, 2}, {1, 40, 3},
		{2, 0, 2}, {2, 5, 3},
		{3, 0, 3}, // no epoch-2 record: its first record is of epoch 3
	} {
		if got := readEpoch(topic, c.q, c.pos); got != c.want {
			t.Errorf("readEpoch(partition %d, position %d) = %d, want %d", c.q, c.pos, got, c.want)
		}
	}
	pos := map[int]uint64{0: 3, 1: 25, 2: 0, 3: 0}
	got := parentFirst(topic, []int{3, 2, 1, 0}, func(q int) uint64 { return pos[q] })
	if want := [][]int{{0}, {1, 2}, {3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("parentFirst = %v, want %v", got, want)
	}
}
