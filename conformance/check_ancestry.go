package conformance

import (
	"errors"
	"fmt"
	"sort"

	"pctl.dev/pctl/runtime"
)

// ancestryPairs are the (from_n, to_n) changes the ancestry check samples: growth and shrinkage
// by one and by much, equal counts, and the extremes. Every n is in rangeNs, so the partitions of
// every key under both counts are already known.
var ancestryPairs = [][2]int32{
	{7, 8}, {8, 7}, {16, 16}, {1, 3}, {3, 1}, {7, 16}, {16, 7}, {31, 100}, {100, 1000}, {1000, 100},
	{1000, 1024}, {1024, 1000}, {65521, 65536}, {65536, 65521},
	{runtime.MaxPartitions, 2}, {2, runtime.MaxPartitions}, {1, runtime.MaxPartitions}, {runtime.MaxPartitions, 1},
}

// AncestryDetails is the Details of the ancestry check.
type AncestryDetails struct {
	Pairs     []AncestryPair     `json:"pairs"`
	Violation *AncestryViolation `json:"violation,omitempty"`
}

// AncestryPair summarises one (from_n, to_n): how many keys were placed, how many distinct
// children were asked for their parents, and how many of those the module declined
// (PCTL_E_UNSUPPORTED or PCTL_E_BUFFER, which spec/abi-v1.md §2.7 allows).
type AncestryPair struct {
	From     int32 `json:"from_n"`
	To       int32 `json:"to_n"`
	Keys     int   `json:"keys"`
	Children int   `json:"children"`
	Declined int   `json:"declined"`
}

// AncestryViolation is a key whose old partition is missing from the declared parents of its new
// one.
type AncestryViolation struct {
	KeyRef
	From     int32      `json:"from_n"`
	To       int32      `json:"to_n"`
	Child    int32      `json:"child"`  // partition of the key among to_n
	Parent   int32      `json:"parent"` // partition of the key among from_n
	Declared [][2]int32 `json:"declared"`
}

// checkAncestry verifies declared split ancestry (spec/abi-v1.md §2.7): for every sampled pair
// and key k, f(k, from_n) must be among the declared parents of f(k, to_n). The declared set may
// be larger than the true one (a sound over-approximation); ranges are compared as sets.
func (c *checker) checkAncestry() (Result, error) {
	declared := c.m.Metadata.Has("ancestry")
	switch {
	case !declared && c.m.HasAncestry:
		return Result{Name: CheckAncestry, Status: StatusSkip, Reason: `exports pctl_ancestry but does not declare the "ancestry" property, so hosts ignore it`}, nil
	case !declared:
		return Result{Name: CheckAncestry, Status: StatusSkip, Reason: `not declared (no "ancestry" property)`}, nil
	case !c.rangeOK:
		return skipAfterRange(CheckAncestry), nil
	}
	in, done, err := c.fresh(c.m)
	if err != nil {
		return Result{Name: CheckAncestry, Status: StatusFail, Reason: "cannot create an instance: " + callErrText(err)}, c.ctx.Err()
	}
	defer done()
	var det AncestryDetails
	calls, declinedAll, children := 0, 0, 0
	for _, pair := range ancestryPairs {
		from, to := pair[0], pair[1]
		parentsOf := c.results[rangeIndex(from)]
		childOf := c.results[rangeIndex(to)]
		ps := AncestryPair{From: from, To: to, Keys: len(c.keys.all)}
		cache := map[int32][]runtime.Range{}
		declinedSet := map[int32]bool{}
		for i, k := range c.keys.all {
			if err := c.cancelled(calls); err != nil {
				return Result{}, err
			}
			child, parent := childOf[i], parentsOf[i]
			if declinedSet[child] {
				continue
			}
			rs, ok := cache[child]
			if !ok {
				rs, err = in.Ancestry(from, to, child)
				calls++
				ps.Children++
				if errors.Is(err, runtime.ErrUnsupported) {
					declinedSet[child] = true
					ps.Declined++
					continue
				}
				if err != nil {
					det.Pairs = append(det.Pairs, ps)
					return Result{Name: CheckAncestry, Status: StatusFail, Details: det,
						Reason: oneLine(fmt.Sprintf("pctl_ancestry(%d, %d, %d) failed: %s", from, to, child, callErrText(err)))}, nil
				}
				cache[child] = rs
			}
			if !contains(rs, parent) {
				det.Pairs = append(det.Pairs, ps)
				det.Violation = &AncestryViolation{KeyRef: keyRef(k), From: from, To: to, Child: child, Parent: parent, Declared: rangesJSON(rs)}
				return Result{Name: CheckAncestry, Status: StatusFail, Details: det,
					Reason: fmt.Sprintf("key %s: partition %d among %d is not a declared parent of its partition %d among %d (declared %s)",
						keyDesc(k), parent, from, child, to, rangesText(rs))}, nil
			}
		}
		children += ps.Children
		declinedAll += ps.Declined
		det.Pairs = append(det.Pairs, ps)
	}
	if children > 0 && declinedAll == children {
		return Result{Name: CheckAncestry, Status: StatusWarn, Details: det,
			Reason: fmt.Sprintf("declares ancestry but declined all %d queries over %d (from_n, to_n) pairs: hosts get nothing from it", children, len(ancestryPairs))}, nil
	}
	reason := fmt.Sprintf("declared parents contain every observed parent: %d (from_n, to_n) pairs, %d keys, %d children asked", len(ancestryPairs), len(c.keys.all), children)
	if declinedAll > 0 {
		reason += fmt.Sprintf(", %d declined", declinedAll)
	}
	return Result{Name: CheckAncestry, Status: StatusPass, Reason: reason, Details: det}, nil
}

// contains reports whether p lies in one of the sorted, disjoint ranges.
func contains(rs []runtime.Range, p int32) bool {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].Hi > p })
	return i < len(rs) && rs[i].Lo <= p
}

func rangesJSON(rs []runtime.Range) [][2]int32 {
	out := make([][2]int32, len(rs))
	for i, r := range rs {
		out[i] = [2]int32{r.Lo, r.Hi}
	}
	return out
}

func rangesText(rs []runtime.Range) string {
	if len(rs) == 0 {
		return "none"
	}
	s := ""
	for i, r := range rs {
		if i == 4 {
			return s + fmt.Sprintf(" ... (%d ranges)", len(rs))
		}
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("[%d, %d)", r.Lo, r.Hi)
	}
	return s
}
