package clientconf

import (
	"strings"
	"testing"
)

// TestCurrentEpochCheckerFailsWrongOutcomes: the compacted row's check of the current-epoch
// group (checkCurrentEpoch) passes exactly each key's latest value, and fails a stale value, a
// resurrected key, a key delivered twice, a missing key, a record of an older epoch and a live
// key delivered as deleted — each with the failure that names it. The input is written by hand:
// a producer wrote a=1, b=2, a=3, tombstone b (4), c=5 (pseqs 1..5); the current epoch is 3.
func TestCurrentEpochCheckerFailsWrongOutcomes(t *testing.T) {
	sent := []line{{key: "a", value: "1"}, {key: "b", value: "2"}, {key: "a", value: "3"}, {key: "b", value: tombstoneMarker}, {key: "c", value: "5"}}
	res := map[uint64]result{1: {Acked: true}, 2: {Acked: true}, 3: {Acked: true}, 4: {Acked: true}, 5: {Acked: true}}
	want := latestAcked(sent, res)
	if w := want["a"]; w.pseq != 3 || w.value != "3" || w.tombstone {
		t.Fatalf("latest of a = %+v, want pseq 3 value 3", w)
	}
	if w := want["b"]; w.pseq != 4 || !w.tombstone {
		t.Fatalf("latest of b = %+v, want the tombstone at pseq 4", w)
	}
	d := func(key string, pseq uint64, value string, epoch int) delivery {
		k := key
		x := delivery{Key: &k, PSeq: pseq, Epoch: epoch, Producer: "p", TS: int64(pseq)}
		if value == tombstoneMarker {
			x.Tombstone = true
		} else {
			v := value
			x.Value = &v
		}
		return x
	}
	cases := []struct {
		name string
		got  []delivery
		want string // a substring of the failures; "" means none
	}{
		{"each key's latest", []delivery{d("a", 3, "3", 3), d("c", 5, "5", 3)}, ""},
		{"with the deleted key's tombstone", []delivery{d("b", 4, tombstoneMarker, 3), d("a", 3, "3", 3), d("c", 5, "5", 3)}, ""},
		{"a stale value", []delivery{d("a", 1, "1", 3), d("c", 5, "5", 3)}, "1 stale records (not the key's latest): key \"a\": pseq 1, its latest is pseq 3"},
		{"a resurrected key", []delivery{d("a", 3, "3", 3), d("b", 2, "2", 3), d("c", 5, "5", 3)}, "1 deleted keys resurrected: key \"b\" deleted by pseq 4, delivered with the value of pseq 2"},
		{"a key twice", []delivery{d("a", 3, "3", 3), d("a", 3, "3", 3), d("c", 5, "5", 3)}, "1 keys delivered twice"},
		{"a missing key", []delivery{d("a", 3, "3", 3)}, "1 live keys missing: key \"c\" (latest pseq 5)"},
		{"an older epoch's record", []delivery{d("a", 3, "3", 2), d("c", 5, "5", 3)}, "1 records of an older epoch"},
		{"a live key as deleted", []delivery{d("a", 3, tombstoneMarker, 3), d("c", 5, "5", 3)}, "1 live keys delivered as deleted"},
		{"a wrong value", []delivery{d("a", 3, "x", 3), d("c", 5, "5", 3)}, "1 values that differ from the one sent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fails := strings.Join(checkCurrentEpoch(want, tc.got, 3), " || ")
			switch {
			case tc.want == "" && fails != "":
				t.Fatalf("a correct outcome failed: %s", fails)
			case tc.want != "" && !strings.Contains(fails, tc.want):
				t.Fatalf("failures %q; want one with %q", fails, tc.want)
			}
		})
	}
}
