package wire

import (
	"encoding/json"
	"fmt"
)

// The ancestry of a large epoch is written as runs (spec/protocol.md §4): a jump topic grown to
// 16,384 partitions has 16,384 children whose parents follow two patterns ("child c < N has
// parent c", "every other child has parents [0, N)"), and writing them one by one made ~200 KB of
// every descriptor write. In memory Ancestry.Parents is always the list, child by child; only the
// JSON differs.

// AncestryRunsAbove: the ancestry of an epoch of more partitions than this is written as runs
// (`runs`) instead of a list per child (`parents`). Readers accept both.
const AncestryRunsAbove = 1024

// maxAncestryChildren bounds the children a `runs` ancestry may expand to (a topic has at most
// 16,384 partitions; this only stops a corrupt descriptor from taking the memory).
const maxAncestryChildren = 1 << 20

// AncestryRun is a run of children with the same parent ranges shifted by a constant step:
// children First .. First+Count-1, child First+i having the ranges [lo + i*Step, hi + i*Step)
// of Parents.
type AncestryRun struct {
	First   int      `json:"first"`
	Count   int      `json:"count"`
	Step    int      `json:"step"`
	Parents [][2]int `json:"parents"`
}

// ancestryList is the JSON of an ancestry as a list per child (and of every ancestry before runs).
type ancestryList struct {
	Source  string       `json:"source"`
	Parents [][][2]int   `json:"parents"`
	Keys    [][][2]int64 `json:"keys,omitempty"`
}

type ancestryRuns struct {
	Source string        `json:"source"`
	Runs   []AncestryRun `json:"runs"`
	Keys   [][][2]int64  `json:"keys,omitempty"`
}

// MarshalJSON writes the ancestry as runs when it has more than AncestryRunsAbove children.
func (a Ancestry) MarshalJSON() ([]byte, error) {
	if len(a.Parents) <= AncestryRunsAbove {
		return json.Marshal(ancestryList{Source: a.Source, Parents: a.Parents, Keys: a.Keys})
	}
	return json.Marshal(ancestryRuns{Source: a.Source, Runs: AncestryRuns(a.Parents), Keys: a.Keys})
}

// UnmarshalJSON reads either form. A `runs` ancestry must cover children 0, 1, 2, ... in order.
func (a *Ancestry) UnmarshalJSON(data []byte) error {
	var v struct {
		Source  string         `json:"source"`
		Parents [][][2]int     `json:"parents"`
		Runs    *[]AncestryRun `json:"runs"`
		Keys    [][][2]int64   `json:"keys"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*a = Ancestry{Source: v.Source, Parents: v.Parents, Keys: v.Keys}
	if v.Runs == nil {
		return nil
	}
	if v.Parents != nil {
		return fmt.Errorf("ancestry has both parents and runs")
	}
	parents, err := ExpandAncestryRuns(*v.Runs)
	if err != nil {
		return err
	}
	a.Parents = parents
	return nil
}

// AncestryRuns returns the shortest runs, greedily from child 0, that describe parents.
func AncestryRuns(parents [][][2]int) []AncestryRun {
	var runs []AncestryRun
	for c := 0; c < len(parents); {
		r := AncestryRun{First: c, Count: 1, Parents: parents[c]}
		if r.Parents == nil {
			r.Parents = [][2]int{}
		}
		if c+1 < len(parents) {
			if step, ok := shiftOf(parents[c], parents[c+1]); ok {
				r.Step = step
				for c+r.Count < len(parents) {
					if s, ok := shiftOf(parents[c], parents[c+r.Count]); !ok || s != r.Count*step {
						break
					}
					r.Count++
				}
			}
		}
		runs = append(runs, r)
		c += r.Count
	}
	return runs
}

// shiftOf reports whether b is a shifted by a constant, and the constant.
func shiftOf(a, b [][2]int) (int, bool) {
	if len(a) != len(b) {
		return 0, false
	}
	if len(a) == 0 {
		return 0, true
	}
	s := b[0][0] - a[0][0]
	for j := range a {
		if b[j][0]-a[j][0] != s || b[j][1]-a[j][1] != s {
			return 0, false
		}
	}
	return s, true
}

// ExpandAncestryRuns returns the parents of every child that runs describe.
func ExpandAncestryRuns(runs []AncestryRun) ([][][2]int, error) {
	n := 0
	for i, r := range runs {
		if r.First != n || r.Count < 1 || r.Count > maxAncestryChildren-n {
			return nil, fmt.Errorf("ancestry run %d (first %d, count %d) does not continue the runs before it (child %d next, at most %d children)", i, r.First, r.Count, n, maxAncestryChildren)
		}
		n += r.Count
	}
	parents := make([][][2]int, 0, n)
	for _, r := range runs {
		for i := 0; i < r.Count; i++ {
			rs := make([][2]int, len(r.Parents))
			for j, p := range r.Parents {
				rs[j] = [2]int{p[0] + i*r.Step, p[1] + i*r.Step}
			}
			parents = append(parents, rs)
		}
	}
	return parents, nil
}
