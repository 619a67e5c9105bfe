package produce

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// TestBatchCompositionPerKeyRule: how a queue of waiting records is cut into fast batches
// (spec/protocol.md §5.1.2). With the per-key rule (on a cluster) a batch never holds two
// records of one key and a new batch starts at the first record whose key is already in the
// open one; keyless records ("-") join any batch; the empty key is a key. Without the rule only
// the batch size cuts. Expected cuts are written out by hand from the rule.
func TestBatchCompositionPerKeyRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		keys   []string // "-" keyless, "" the empty key
		size   int
		perKey bool
		want   [][]int
	}{
		{"distinct keys share a batch", []string{"a", "b", "c"}, 10, true, [][]int{{0, 1, 2}}},
		{"a repeated key starts a batch", []string{"a", "b", "a", "c"}, 10, true, [][]int{{0, 1}, {2, 3}}},
		{"one hot key: a record per batch", []string{"h", "h", "h"}, 10, true, [][]int{{0}, {1}, {2}}},
		{"keyless records are free", []string{"-", "a", "-", "-", "a"}, 10, true, [][]int{{0, 1, 2, 3}, {4}}},
		{"the empty key is a key", []string{"", "-", ""}, 10, true, [][]int{{0, 1}, {2}}},
		{"the size cuts too", []string{"a", "b", "c", "d", "e"}, 2, true, [][]int{{0, 1}, {2, 3}, {4}}},
		{"the cut forgets the old batch's keys", []string{"a", "b", "b", "a"}, 10, true, [][]int{{0, 1}, {2, 3}}},
		{"without the rule only the size cuts", []string{"h", "h", "h", "a"}, 3, false, [][]int{{0, 1, 2}, {3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q []*pending
			for i, k := range tc.keys {
				pd := &pending{seq: uint64(i + 1), hdr: nats.Header{}}
				if k != "-" {
					pd.rec.Key = []byte(k)
					pd.hdr.Set(wire.HeaderKey, wire.EncodeKey(pd.rec.Key))
				} else {
					pd.rec.NoKey = true
				}
				q = append(q, pd)
			}
			got := composeBatches(q, tc.size, tc.perKey)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("batches %v, want %v", got, tc.want)
			}
			if tc.perKey {
				for _, b := range got {
					seen := map[string]bool{}
					for _, i := range b {
						if k := tc.keys[i]; k != "-" {
							if seen[k] {
								t.Fatalf("batch %v holds key %q twice", b, k)
							}
							seen[k] = true
						}
					}
				}
			}
		})
	}
}

// composeBatches cuts a queue of records, all waiting, into the batches fill sends them in (no
// window limit), with fill's own admission (batch.admits): the indexes of each batch's records.
func composeBatches(queue []*pending, size int, perKey bool) [][]int {
	var out [][]int
	b := &batch{}
	var cur []int
	for i, pd := range queue {
		if len(cur) >= size || !b.admits(pd, perKey) {
			out = append(out, cur)
			b, cur = &batch{}, nil
		}
		cur = append(cur, i)
		b.recs = append(b.recs, pd)
		b.addKey(pd, perKey)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
