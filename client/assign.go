package client

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// This file holds the group assignors of spec/protocol.md §6.2: modulo (the default) and the
// sticky assignor of §6.2.1, as pure functions of data every member can read, so that every
// member computes the same answer and tests drive them without a broker.

// PlaceFunc computes the partitions of keys under epoch e of a topic (out[i] for keys[i]), with
// that epoch's partitioner and partition count. It must be deterministic: every member of a group
// must get the same answer (spec/abi-v1.md makes every host agree).
type PlaceFunc func(epoch int, keys [][]byte, out []int32) error

// historyLen is how many records' summaries an Assignment keeps (spec/protocol.md §6.2.1).
const historyLen = 16

// sampleKeys is the sticky assignor's key sample (§6.2.1 step 1): the ASCII decimal digits of 0
// to 4095.
var sampleKeys = func() [][]byte {
	out := make([][]byte, 4096)
	for i := range out {
		out[i] = []byte(strconv.Itoa(i))
	}
	return out
}()

// AssignmentSample returns a copy of the key sample the sticky assignor weighs partitions by.
func AssignmentSample() [][]byte {
	out := make([][]byte, len(sampleKeys))
	copy(out, sampleKeys)
	return out
}

// ModuloAssignment is the modulo assignor (spec/protocol.md §6.2): the i-th of the sorted
// partitions goes to member i mod M of the sorted members.
func ModuloAssignment(members []string, partitions []int, epoch int) *wire.Assignment {
	a := &wire.Assignment{Assignor: wire.AssignorModulo, Epoch: epoch, Members: members, Partitions: partitions, Owners: make([]int, len(partitions))}
	for j := range partitions {
		a.Owners[j] = j % len(members)
	}
	return a
}

// NextAssignment computes the sticky assignor's next record (spec/protocol.md §6.2.1) from the
// previous one (nil for the first), the sorted live members, the sorted assignable partitions and
// the current epoch. place evaluates the topic's partitioners; it is called for prev's epoch and
// the current one only. Moved and MovedModulo are filled in (§6.2.2), and the history carried
// over. The result does not depend on now except for its At fields.
func NextAssignment(prev *wire.Assignment, members []string, partitions []int, epoch int, place PlaceFunc, now time.Time) (*wire.Assignment, error) {
	m, n := len(members), len(partitions)
	if m == 0 {
		return nil, fmt.Errorf("%w: an assignment needs at least one member", wire.ErrBadRequest)
	}
	if !sort.StringsAreSorted(members) || !sort.IntsAreSorted(partitions) {
		return nil, fmt.Errorf("%w: members and partitions must be sorted", wire.ErrBadRequest)
	}
	next := &wire.Assignment{Assignor: wire.AssignorSticky, Round: 1, Epoch: epoch,
		Members: append([]string(nil), members...), Partitions: append([]int(nil), partitions...),
		Owners: make([]int, n), At: now.UTC().Format(time.RFC3339)}
	index := map[string]int{}
	for i, x := range members {
		index[x] = i
	}
	slot := map[int]int{}
	for j, q := range partitions {
		slot[q] = j
	}

	// Weights w(q, x) = num/den (step 2), sparse: most partitions have one or few members.
	type weight struct{ j, x, num, den int }
	var cands []weight
	if prev != nil {
		next.Round = prev.Round + 1
		prevOwner := map[int]int{} // partition -> index in members (live ones only)
		for j, q := range prev.Partitions {
			if j < len(prev.Owners) && prev.Owners[j] >= 0 && prev.Owners[j] < len(prev.Members) {
				if x, ok := index[prev.Members[prev.Owners[j]]]; ok {
					prevOwner[q] = x
				}
			}
		}
		direct := func(j int) {
			if x, ok := prevOwner[partitions[j]]; ok {
				cands = append(cands, weight{j, x, 1, 1})
			}
		}
		if prev.Epoch == epoch {
			for j := range partitions {
				direct(j)
			}
		} else {
			oldP, newP := make([]int32, len(sampleKeys)), make([]int32, len(sampleKeys))
			if err := place(prev.Epoch, sampleKeys, oldP); err != nil {
				return nil, err
			}
			if err := place(epoch, sampleKeys, newP); err != nil {
				return nil, err
			}
			den := make([]int, n)
			num := map[[2]int]int{}
			for k := range sampleKeys {
				j, ok := slot[int(newP[k])]
				if !ok {
					continue
				}
				den[j]++
				if x, ok := prevOwner[int(oldP[k])]; ok {
					num[[2]int{j, x}]++
				}
			}
			for jx, c := range num {
				cands = append(cands, weight{jx[0], jx[1], c, den[jx[0]]})
			}
			for j := range partitions {
				if den[j] == 0 {
					direct(j)
				}
			}
		}
	}
	sort.Slice(cands, func(a, b int) bool {
		ca, cb := cands[a], cands[b]
		if l, r := ca.num*cb.den, cb.num*ca.den; l != r {
			return l > r
		}
		if ca.j != cb.j {
			return ca.j < cb.j
		}
		return ca.x < cb.x
	})

	// Quotas (step 3), keep (step 4), spread (step 5).
	base, extra := n/m, n%m
	count := make([]int, m)
	big := 0
	mayTake := func(x int) bool { return count[x] < base || (count[x] == base && big < extra) }
	give := func(j, x int) {
		next.Owners[j] = x
		count[x]++
		if count[x] == base+1 {
			big++
		}
	}
	done := make([]bool, n)
	for _, c := range cands {
		if !done[c.j] && mayTake(c.x) {
			give(c.j, c.x)
			done[c.j] = true
		}
	}
	for j := range partitions {
		if done[j] {
			continue
		}
		best := -1
		for x := 0; x < m; x++ {
			if mayTake(x) && (best < 0 || count[x] < count[best]) {
				best = x
			}
		}
		give(j, best)
		done[j] = true
	}

	if prev != nil {
		mv, err := MovedKeys(prev, next, place)
		if err != nil {
			return nil, err
		}
		mm, err := MovedKeys(ModuloAssignment(prev.Members, prev.Partitions, prev.Epoch), ModuloAssignment(next.Members, next.Partitions, next.Epoch), place)
		if err != nil {
			return nil, err
		}
		next.Moved, next.MovedModulo = &mv, &mm
		next.History = append(next.History, prev.History...)
	}
	next.History = append(next.History, wire.AssignmentSummary{Round: next.Round, Epoch: epoch, Members: m, Partitions: n,
		Moved: next.Moved, MovedModulo: next.MovedModulo, At: next.At})
	if len(next.History) > historyLen {
		next.History = next.History[len(next.History)-historyLen:]
	}
	return next, nil
}

// MovedKeys is the fraction of the key sample whose owner differs between two assignments
// (spec/protocol.md §6.2.2): a key's owner is the member its assignment gives the key's partition
// under the assignment's epoch. Keys whose partition either assignment leaves out do not count.
func MovedKeys(from, to *wire.Assignment, place PlaceFunc) (float64, error) {
	owners := func(a *wire.Assignment) ([]string, error) {
		ps := make([]int32, len(sampleKeys))
		if err := place(a.Epoch, sampleKeys, ps); err != nil {
			return nil, err
		}
		own := map[int]string{}
		for j, q := range a.Partitions {
			if j < len(a.Owners) && a.Owners[j] >= 0 && a.Owners[j] < len(a.Members) {
				own[q] = a.Members[a.Owners[j]]
			}
		}
		out := make([]string, len(ps))
		for k, p := range ps {
			out[k] = own[int(p)]
		}
		return out, nil
	}
	a, err := owners(from)
	if err != nil {
		return 0, err
	}
	b, err := owners(to)
	if err != nil {
		return 0, err
	}
	moved, total := 0, 0
	for k := range a {
		if a[k] == "" || b[k] == "" {
			continue
		}
		total++
		if a[k] != b[k] {
			moved++
		}
	}
	if total == 0 {
		return 0, nil
	}
	return float64(moved) / float64(total), nil
}

// needsAssignment reports whether a recorded assignment no longer matches the group (§6.2.1,
// "Who writes"): its members, partitions or epoch differ.
func needsAssignment(a *wire.Assignment, members []string, partitions []int, epoch int) bool {
	if a == nil || a.Epoch != epoch || len(a.Members) != len(members) || len(a.Partitions) != len(partitions) {
		return true
	}
	for i := range members {
		if a.Members[i] != members[i] {
			return true
		}
	}
	for i := range partitions {
		if a.Partitions[i] != partitions[i] {
			return true
		}
	}
	return false
}

// TopicPlacer returns a PlaceFunc for a topic's epochs, with the client's partitioners (the
// epochs' modules, fetched and verified by digest).
func (c *Client) TopicPlacer(ctx context.Context, t *wire.Topic) PlaceFunc {
	return func(epoch int, keys [][]byte, out []int32) error {
		e := t.Epoch(epoch)
		if e == nil {
			return fmt.Errorf("%w: topic %s has no epoch %d", wire.ErrNotFound, t.Name, epoch)
		}
		p, err := c.Partitioner(ctx, e.Partitioner)
		if err != nil {
			return err
		}
		return p.PartitionBatch(keys, int32(e.Partitions), out)
	}
}
