package ancestry

import (
	"errors"
	"reflect"
	"testing"

	"pctl.dev/pctl/partitioner"
)

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want [][2]int
	}{
		{nil, nil},
		{[]int{3}, [][2]int{{3, 4}}},
		{[]int{0, 1, 2, 5}, [][2]int{{0, 3}, {5, 6}}},
		{[]int{5, 2, 1, 0, 2, 5, 1}, [][2]int{{0, 3}, {5, 6}}}, // any order, repeats
		{[]int{7, 9, 8, 11}, [][2]int{{7, 10}, {11, 12}}},
	} {
		if got := Ranges(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Ranges(%v) = %v; want %v", tc.in, got, tc.want)
		}
	}
}

// The pairs are chosen by hand: a change from 4 to 3 partitions where child 0 takes keys from
// old partitions 0, 1 and 3, child 1 from 2 only, and child 2 from no key at all.
func TestObserver(t *testing.T) {
	o := NewObserver(4, 3, true)
	for _, p := range []struct {
		key           string
		parent, child int
	}{{"a", 0, 0}, {"b", 1, 0}, {"a", 0, 0}, {"c", 3, 0}, {"d", 2, 1}, {"e", 2, 1}, {"e", 2, 1}} {
		o.Add([]byte(p.key), p.parent, p.child)
	}
	if got := o.Added(); got != 7 {
		t.Errorf("Added = %d; want 7 (repeats count)", got)
	}
	if got, want := o.Parents(), [][][2]int{{{0, 2}, {3, 4}}, {{2, 3}}, nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("Parents = %v; want %v", got, want)
	}
	if got, want := o.EdgeKeys(), [][][2]int64{{{0, 1}, {1, 1}, {3, 1}}, {{2, 2}}, {}}; !reflect.DeepEqual(got, want) {
		t.Errorf("EdgeKeys = %v; want %v (distinct keys per edge)", got, want)
	}
	if NewObserver(4, 3, false).EdgeKeys() != nil {
		t.Error("an observer that does not count edges gave edge counts")
	}
}

type declarer func(from, to, child int32) ([]partitioner.Range, error)

func (d declarer) Ancestry(from, to, child int32) ([]partitioner.Range, error) {
	return d(from, to, child)
}

func TestDeclaredAndAll(t *testing.T) {
	// Linear hashing 2 -> 4 by hand (spec/builtins.md, linear-murmur2): child c has parent c mod 2.
	lin := declarer(func(_, _, c int32) ([]partitioner.Range, error) {
		return []partitioner.Range{{Lo: c % 2, Hi: c%2 + 1}}, nil
	})
	got, err := Declared(lin, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][][2]int{{{0, 1}}, {{1, 2}}, {{0, 1}}, {{1, 2}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Declared = %v; want %v", got, want)
	}
	none := declarer(func(_, _, _ int32) ([]partitioner.Range, error) { return nil, partitioner.ErrNoAncestry })
	if _, err := Declared(none, 2, 4); !errors.Is(err, partitioner.ErrNoAncestry) {
		t.Errorf("Declared without a declaration: err %v; want ErrNoAncestry", err)
	}
	if got, want := All(3, 2), [][][2]int{{{0, 3}}, {{0, 3}}}; !reflect.DeepEqual(got, want) {
		t.Errorf("All = %v; want %v", got, want)
	}
	if !Contains([][2]int{{0, 2}, {5, 6}}, 5) || Contains([][2]int{{0, 2}, {5, 6}}, 2) {
		t.Error("Contains is wrong on half-open ranges")
	}
}
