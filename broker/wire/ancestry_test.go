package wire_test

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
)

// declared returns the ancestry a built-in declares for a change from..to (the plugin's own
// pctl_ancestry: independent of the encoding under test).
func declared(t *testing.T, name string, from, to int) [][][2]int {
	t.Helper()
	p, err := partitioner.Native(name)
	if err != nil {
		t.Fatal(err)
	}
	parents := make([][][2]int, to)
	for c := range parents {
		rs, err := p.Ancestry(int32(from), int32(to), int32(c))
		if err != nil {
			t.Fatal(err)
		}
		parents[c] = [][2]int{}
		for _, r := range rs {
			parents[c] = append(parents[c], [2]int{int(r.Lo), int(r.Hi)})
		}
	}
	return parents
}

// randomParents: children with 0-3 random ranges each, and stretches of shifted copies (the
// shapes runs compress), from a fixed seed.
func randomParents(seed uint64, n, from int) [][][2]int {
	rng := rand.New(rand.NewPCG(seed, 1))
	parents := make([][][2]int, n)
	for c := 0; c < n; c++ {
		if c > 0 && rng.IntN(3) == 0 {
			step := rng.IntN(3) - 1
			rs := make([][2]int, len(parents[c-1]))
			for j, r := range parents[c-1] {
				rs[j] = [2]int{r[0] + step, r[1] + step}
			}
			parents[c] = rs
			continue
		}
		rs := [][2]int{}
		lo := 0
		for k := rng.IntN(4); k > 0 && lo < from; k-- {
			a := lo + rng.IntN(from-lo)
			b := a + 1 + rng.IntN(from-a)
			rs = append(rs, [2]int{a, b})
			lo = b + 1
		}
		parents[c] = rs
	}
	return parents
}

// TestAncestryRoundTrip: an ancestry written and read again has the same parents for every
// child, in either form; epochs of more than AncestryRunsAbove partitions are written as runs
// (spec/protocol.md §4), smaller ones as the list they always were, and jump's growth, the
// case of a 16,384-partition topic, takes two runs.
func TestAncestryRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		parents  [][][2]int
		runs     bool
		wantRuns int // -1: do not check
	}{
		{"jump 1024 -> 16384", declared(t, "jump", 1024, 16384), true, 2},
		{"jump 8192 -> 16384", declared(t, "jump", 8192, 16384), true, 2},
		{"jump 2 -> 4, small", declared(t, "jump", 2, 4), false, -1},
		{"jump 1025 -> 1024, a shrink", declared(t, "jump", 1025, 1024), false, -1},
		{"jump 3000 -> 2000, a shrink", declared(t, "jump", 3000, 2000), true, -1},
		{"all, 5000 children", func() [][][2]int {
			p := make([][][2]int, 5000)
			for c := range p {
				p[c] = [][2]int{{0, 4000}}
			}
			return p
		}(), true, 1},
		{"random, 3000 children", randomParents(1, 3000, 500), true, -1},
		{"random, 2000 children, seed 2", randomParents(2, 2000, 64), true, -1},
		{"random, 1024 children", randomParents(3, 1024, 64), false, -1},
		{"pending", nil, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := wire.Ancestry{Source: "declared", Parents: tc.parents}
			body, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(body, &raw); err != nil {
				t.Fatal(err)
			}
			_, hasRuns := raw["runs"]
			_, hasParents := raw["parents"]
			if hasRuns != tc.runs || hasParents == tc.runs {
				t.Fatalf("written with runs=%v parents=%v, want runs=%v: %.200s", hasRuns, hasParents, tc.runs, body)
			}
			if tc.wantRuns >= 0 {
				var runs []wire.AncestryRun
				if err := json.Unmarshal(raw["runs"], &runs); err != nil || len(runs) != tc.wantRuns {
					t.Fatalf("%d runs (%v), want %d: %.300s", len(runs), err, tc.wantRuns, raw["runs"])
				}
			}
			var out wire.Ancestry
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatal(err)
			}
			if out.Source != in.Source || len(out.Parents) != len(in.Parents) {
				t.Fatalf("read back %s with %d children, want %s with %d", out.Source, len(out.Parents), in.Source, len(in.Parents))
			}
			for c := range in.Parents {
				if len(in.Parents[c]) == 0 && len(out.Parents[c]) == 0 {
					continue
				}
				if !reflect.DeepEqual(in.Parents[c], out.Parents[c]) {
					t.Fatalf("child %d: read back %v, want %v", c, out.Parents[c], in.Parents[c])
				}
			}
		})
	}
}

// TestAncestryReadsEveryForm: a descriptor written before runs (a large epoch's ancestry as a list
// per child) reads as it did; a runs ancestry reads as the list it stands for; malformed runs are
// refused with what is wrong.
func TestAncestryReadsEveryForm(t *testing.T) {
	old := declared(t, "jump", 1024, 2048)
	oldBody, err := json.Marshal(map[string]any{"source": "declared", "parents": old})
	if err != nil {
		t.Fatal(err)
	}
	var a wire.Ancestry
	if err := json.Unmarshal(oldBody, &a); err != nil || !reflect.DeepEqual(a.Parents, old) {
		t.Fatalf("old descriptor's ancestry: %v, parents equal: %v", err, reflect.DeepEqual(a.Parents, old))
	}
	// Hand-written runs: children 0-2 have [c, c+1), 3-4 have [0, 3) and [5, 6), child 5 none.
	var b wire.Ancestry
	if err := json.Unmarshal([]byte(`{"source":"observed","runs":[{"first":0,"count":3,"step":1,"parents":[[0,1]]},{"first":3,"count":2,"step":0,"parents":[[0,3],[5,6]]},{"first":5,"count":1,"step":0,"parents":[]}]}`), &b); err != nil {
		t.Fatal(err)
	}
	want := [][][2]int{{{0, 1}}, {{1, 2}}, {{2, 3}}, {{0, 3}, {5, 6}}, {{0, 3}, {5, 6}}, {}}
	if b.Source != "observed" || !reflect.DeepEqual(b.Parents, want) {
		t.Fatalf("runs read as %s %v, want %v", b.Source, b.Parents, want)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"source":"declared","runs":[{"first":1,"count":3,"step":0,"parents":[]}]}`, "does not continue"},
		{`{"source":"declared","runs":[{"first":0,"count":2,"step":0,"parents":[]},{"first":1,"count":1,"step":0,"parents":[]}]}`, "does not continue"},
		{`{"source":"declared","runs":[{"first":0,"count":0,"step":0,"parents":[]}]}`, "does not continue"},
		{`{"source":"declared","runs":[{"first":0,"count":2000000,"step":0,"parents":[]}]}`, "at most"},
		{`{"source":"declared","parents":[[[0,1]]],"runs":[{"first":0,"count":1,"step":0,"parents":[]}]}`, "both parents and runs"},
	} {
		var x wire.Ancestry
		err := json.Unmarshal([]byte(tc.body), &x)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", tc.body, err, tc.want)
		}
	}
}

// FuzzAncestryRuns: runs always expand back to the parents they were made of.
func FuzzAncestryRuns(f *testing.F) {
	f.Add(uint64(1), 100, 10)
	f.Add(uint64(7), 3000, 2)
	f.Fuzz(func(t *testing.T, seed uint64, n, from int) {
		if n < 0 || n > 5000 || from < 1 || from > 1000 {
			return
		}
		in := randomParents(seed, n, from)
		out, err := wire.ExpandAncestryRuns(wire.AncestryRuns(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(in) {
			t.Fatalf("%d children, want %d", len(out), len(in))
		}
		for c := range in {
			if (len(in[c]) != 0 || len(out[c]) != 0) && !reflect.DeepEqual(in[c], out[c]) {
				t.Fatalf("child %d: %v, want %v", c, out[c], in[c])
			}
		}
	})
}
