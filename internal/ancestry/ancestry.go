// Package ancestry computes an epoch change's partition ancestry (spec/protocol.md §4): for each
// partition of the new epoch, the partitions of the old epoch its keys come from, as half-open
// ranges. The broker computes it after an epoch change from the keys stored in the old epoch, and
// `pctl ancestry` from a file of keys; both go through this package, so that the two never give
// different ancestries for the same keys (they used to be two copies of the same loops).
//
// The package does no I/O: the caller evaluates the partition functions and feeds the pairs.
package ancestry

import (
	"sort"

	"pctl.dev/pctl/partitioner"
)

// Declarer is what declares an ancestry: a partitioner (partitioner.Partitioner, or a runtime
// pool) whose plugin exports pctl_ancestry (spec/abi-v1.md §2.7).
type Declarer interface {
	Ancestry(fromN, toN, child int32) ([]partitioner.Range, error)
}

// Declared asks f for the parents of every child of a change from `from` to `to` partitions
// under the same function. The error is f's, unchanged: partitioner.ErrNoAncestry when the plugin
// declares none, which callers answer with an observed ancestry or All.
func Declared(f Declarer, from, to int) ([][][2]int, error) {
	out := make([][][2]int, to)
	for c := 0; c < to; c++ {
		rs, err := f.Ancestry(int32(from), int32(to), int32(c))
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			out[c] = append(out[c], [2]int{int(r.Lo), int(r.Hi)})
		}
	}
	return out, nil
}

// All is the ancestry that assumes nothing: every child takes keys from every old partition.
func All(from, to int) [][][2]int {
	out := make([][][2]int, to)
	for c := range out {
		out[c] = [][2]int{{0, from}}
	}
	return out
}

// Ranges merges partition numbers (any order, repeats allowed) into sorted half-open ranges:
// [0 1 2 5] is [[0 3] [5 6]]; none is nil.
func Ranges(ps []int) [][2]int {
	s := append([]int(nil), ps...)
	sort.Ints(s)
	var out [][2]int
	for _, p := range s {
		if l := len(out); l > 0 && out[l-1][1] > p {
			continue // a repeat
		} else if l > 0 && out[l-1][1] == p {
			out[l-1][1] = p + 1
		} else {
			out = append(out, [2]int{p, p + 1})
		}
	}
	return out
}

// Observer collects the (old partition, new partition) pair of each key of a change and gives
// the observed ancestry.
type Observer struct {
	from, to int
	parents  []map[int]bool
	counts   []map[int]int64 // distinct keys per edge; nil when not counted
	seen     map[string]struct{}
	added    int
}

// NewObserver starts an observation of a change from `from` to `to` partitions. With edgeKeys it
// also counts the distinct keys of every edge (wire.Ancestry.Keys, for graphs); that keeps every
// distinct key in memory.
func NewObserver(from, to int, edgeKeys bool) *Observer {
	o := &Observer{from: from, to: to, parents: make([]map[int]bool, to)}
	if edgeKeys {
		o.counts, o.seen = make([]map[int]int64, to), map[string]struct{}{}
	}
	return o
}

// Add records that key lives in old partition `parent` and new partition `child`. The caller
// checks the ranges (0 <= parent < from, 0 <= child < to): the partition functions' results.
func (o *Observer) Add(key []byte, parent, child int) {
	o.added++
	if o.parents[child] == nil {
		o.parents[child] = map[int]bool{}
	}
	o.parents[child][parent] = true
	if o.seen == nil {
		return
	}
	// A key maps to exactly one edge (both functions are deterministic), so one set of seen
	// keys suffices.
	if _, dup := o.seen[string(key)]; dup {
		return
	}
	o.seen[string(key)] = struct{}{}
	if o.counts[child] == nil {
		o.counts[child] = map[int]int64{}
	}
	o.counts[child][parent]++
}

// Added is the number of Add calls (keys read, repeats included).
func (o *Observer) Added() int { return o.added }

// Parents is the observed ancestry: each child's parents as merged ranges (none for a child no
// key reached).
func (o *Observer) Parents() [][][2]int {
	out := make([][][2]int, o.to)
	for c, set := range o.parents {
		ps := make([]int, 0, len(set))
		for p := range set {
			ps = append(ps, p)
		}
		out[c] = Ranges(ps)
	}
	return out
}

// EdgeKeys is each child's (parent, distinct keys) pairs in parent order, or nil when the
// observer does not count them.
func (o *Observer) EdgeKeys() [][][2]int64 {
	if o.counts == nil {
		return nil
	}
	out := make([][][2]int64, o.to)
	for c := range out {
		out[c] = [][2]int64{}
		for p := 0; p < o.from; p++ {
			if n := o.counts[c][p]; n > 0 {
				out[c] = append(out[c], [2]int64{int64(p), n})
			}
		}
	}
	return out
}

// Contains reports whether partition p lies in one of the ranges.
func Contains(rs [][2]int, p int) bool {
	for _, r := range rs {
		if p >= r[0] && p < r[1] {
			return true
		}
	}
	return false
}
