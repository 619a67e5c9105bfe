package client

import (
	"sort"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
)

// Parent-first scheduling (spec/protocol.md §6.7, issue 17): a record of epoch x waits at its
// gate only until its key's partitions of the older, undrained epochs are drained, so a member
// starts its partitions oldest work first. A partition whose next record is of an older epoch is
// a parent the group's other partitions may wait for: it is acquired and read before those whose
// next record is newer, and the partitions of one class are acquired together (each acquisition
// is two round trips to the group's bucket; taken one by one in map order, a member holding
// eight partitions on a loaded machine started its last parent seconds after its first, while
// its children sat at their gates).

// readEpoch returns the epoch of the record that follows position pos in partition stream q: the
// oldest epoch of t in which q exists and whose boundary in q is past pos (the current epoch, or
// the newest known, once q is past every ended epoch's boundary). A hint for ordering only: the
// gate decides.
func readEpoch(t *wire.Topic, q int, pos uint64) int {
	for i := range t.Epochs {
		ep := &t.Epochs[i]
		if q >= ep.Partitions {
			continue
		}
		if !proto.Ended(ep) || pos < ep.Boundaries[q] {
			return ep.Epoch
		}
	}
	return t.Current().Epoch
}

// parentFirst groups the partitions to take by the epoch of the record each reads next, oldest
// first, each group in ascending order.
func parentFirst(t *wire.Topic, qs []int, pos func(q int) uint64) [][]int {
	by := map[int][]int{}
	var epochs []int
	for _, q := range qs {
		e := readEpoch(t, q, pos(q))
		if _, ok := by[e]; !ok {
			epochs = append(epochs, e)
		}
		by[e] = append(by[e], q)
	}
	sort.Ints(epochs)
	out := make([][]int, 0, len(epochs))
	for _, e := range epochs {
		sort.Ints(by[e])
		out = append(out, by[e])
	}
	return out
}
