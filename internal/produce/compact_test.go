package produce

import (
	"maps"
	"testing"
)

// TestSupersededInBatch: a record a read-back misses counts as stored only when a later record
// of its key in the same batch was found (its absence is then compaction, not loss); anything
// else is sent again. Without this a confirm after a leader change re-sent the older record of a
// key over the newer one on a compacted topic.
func TestSupersededInBatch(t *testing.T) {
	cases := []struct {
		name  string
		keys  []string
		from  int
		found map[int]uint64
		want  map[int]uint64
	}{
		{"all found", []string{"a", "b"}, 0, map[int]uint64{0: 5, 1: 6}, map[int]uint64{0: 5, 1: 6}},
		{"replaced by a later record of its key", []string{"a", "b", "a"}, 0, map[int]uint64{1: 6, 2: 7}, map[int]uint64{0: 0, 1: 6, 2: 7}},
		{"later record of another key only: lost", []string{"a", "b"}, 0, map[int]uint64{1: 6}, map[int]uint64{1: 6}},
		{"later record of its key lost too", []string{"a", "a"}, 0, map[int]uint64{}, map[int]uint64{}},
		{"an earlier record of its key does not count", []string{"a", "a"}, 0, map[int]uint64{0: 5}, map[int]uint64{0: 5}},
		{"chain", []string{"a", "a", "a"}, 0, map[int]uint64{2: 9}, map[int]uint64{0: 0, 1: 0, 2: 9}},
		{"before from is not touched", []string{"a", "a"}, 1, map[int]uint64{1: 9}, map[int]uint64{1: 9}},
		{"empty key is a key", []string{"", "x", ""}, 0, map[int]uint64{2: 3}, map[int]uint64{0: 0, 2: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			keys := make([][]byte, len(c.keys))
			for i, k := range c.keys {
				keys[i] = []byte(k)
			}
			got := maps.Clone(c.found)
			supersededInBatch(keys, c.from, got)
			if !maps.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}
