package conformance

import (
	"fmt"
	"strings"

	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/spec/vectors"
)

// CompatibilityDetails is the Details of the compatibility check: one entry per claim.
type CompatibilityDetails struct {
	Claims []CompatibilityClaim `json:"claims"`
}

// CompatibilityClaim is the verdict on one "compatible:<builtin>" property. Vectors counts the
// reference cases of spec/vectors/<builtin>.json compared; RandomResults the results of the range
// check (every key, every n) compared with the native built-in (partitioner/builtin).
type CompatibilityClaim struct {
	Builtin       string          `json:"builtin"`
	Status        Status          `json:"status"`
	Reason        string          `json:"reason"`
	Vectors       int             `json:"vectors"`
	VectorSource  string          `json:"vector_source,omitempty"`
	RandomResults int             `json:"random_results"`
	Mismatch      *CompatMismatch `json:"mismatch,omitempty"`
}

// CompatMismatch is a key on which the module and the built-in disagree.
type CompatMismatch struct {
	KeyRef
	N    int32  `json:"n"`
	Got  int32  `json:"got"`  // the module's partition
	Want int32  `json:"want"` // the built-in's
	By   string `json:"by"`   // "vectors" (a reference implementation) or "native" (partitioner/builtin)
}

// checkCompatibility verifies each "compatible:<builtin>" claim (spec/abi-v1.md §2.6): the module
// must match the built-in on every reference vector and on every result of the range check.
func (c *checker) checkCompatibility() (Result, error) {
	claims := c.m.Metadata.CompatibleWith()
	if len(claims) == 0 {
		return Result{Name: CheckCompatibility, Status: StatusSkip, Reason: "no compatible:<builtin> claim"}, nil
	}
	var det CompatibilityDetails
	var firstFail string
	var passed []string
	for _, name := range claims {
		cl, err := c.checkClaim(name)
		if err != nil {
			return Result{}, err
		}
		det.Claims = append(det.Claims, cl)
		switch {
		case cl.Status == StatusFail && firstFail == "":
			firstFail = cl.Reason
		case cl.Status == StatusPass:
			passed = append(passed, fmt.Sprintf("%s (%d vectors, %d results)", name, cl.Vectors, cl.RandomResults))
		}
	}
	switch {
	case firstFail != "":
		return Result{Name: CheckCompatibility, Status: StatusFail, Reason: oneLine(firstFail), Details: det}, nil
	case len(passed) == 0:
		return Result{Name: CheckCompatibility, Status: StatusSkip, Reason: det.Claims[0].Reason, Details: det}, nil
	}
	return Result{Name: CheckCompatibility, Status: StatusPass, Reason: "matches " + strings.Join(passed, ", "), Details: det}, nil
}

func (c *checker) checkClaim(name string) (CompatibilityClaim, error) {
	cl := CompatibilityClaim{Builtin: name, Status: StatusPass}
	b, ok := builtin.Lookup(name)
	if !ok {
		var names []string
		for _, b := range builtin.All() {
			names = append(names, b.Name)
		}
		cl.Status = StatusFail
		cl.Reason = fmt.Sprintf("claims compatible:%s, which is not a built-in (%s)", name, strings.Join(names, ", "))
		return cl, nil
	}
	if !c.rangeOK {
		cl.Status, cl.Reason = StatusSkip, skipAfterRange(CheckCompatibility).Reason
		return cl, nil
	}
	vf, err := vectors.Load(name)
	if err != nil {
		return cl, fmt.Errorf("conformance: %w", err) // a built-in without vectors is a build defect
	}
	cl.VectorSource = vf.Source
	in, done, err := c.fresh(c.m)
	if err != nil {
		cl.Status, cl.Reason = StatusFail, "cannot create an instance: "+callErrText(err)
		return cl, c.ctx.Err()
	}
	defer done()
	for i, tc := range vf.Cases {
		if err := c.cancelled(i); err != nil {
			return cl, err
		}
		got, err := in.Partition(tc.Key, tc.N)
		cl.Vectors++
		if err != nil {
			f := &callFailure{key: tc.Key, n: tc.N, err: err}
			cl.Status, cl.Reason = StatusFail, fmt.Sprintf("compatible:%s: fails on a reference vector: %s", name, f)
			return cl, nil
		}
		if got != tc.Partition {
			cl.Status = StatusFail
			cl.Mismatch = &CompatMismatch{KeyRef: keyRef(tc.Key), N: tc.N, Got: got, Want: tc.Partition, By: "vectors"}
			cl.Reason = fmt.Sprintf("not compatible with %s: key %s, n=%d: %d, the reference gives %d (spec/vectors/%s.json)", name, keyDesc(tc.Key), tc.N, got, tc.Partition, name)
			return cl, nil
		}
	}
	for j, n := range rangeNs {
		for i, k := range c.keys.all {
			got, want := c.results[j][i], b.Func(k, n)
			cl.RandomResults++
			if got != want {
				cl.Status = StatusFail
				cl.Mismatch = &CompatMismatch{KeyRef: keyRef(k), N: n, Got: got, Want: want, By: "native"}
				cl.Reason = fmt.Sprintf("not compatible with %s: key %s, n=%d: %d, the built-in gives %d", name, keyDesc(k), n, got, want)
				return cl, nil
			}
		}
	}
	cl.Reason = fmt.Sprintf("matches %s on %d reference vectors and %d results", name, cl.Vectors, cl.RandomResults)
	return cl, nil
}
