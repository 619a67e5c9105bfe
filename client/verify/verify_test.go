package verify

import "testing"

func TestCheck(t *testing.T) {
	sent := []Sent{
		{Producer: "p", PSeq: 1, Key: []byte("a"), Acked: true},
		{Producer: "p", PSeq: 2, Key: []byte("b"), Acked: true},
		{Producer: "p", PSeq: 3, Key: []byte("a"), Acked: true},
		{Producer: "p", PSeq: 4, Key: []byte("a"), Acked: false},
		{Producer: "p", PSeq: 5, NoKey: true, Acked: true},
	}
	d := func(order int64, pseq uint64, key string) Delivered {
		return Delivered{Group: "g", Order: order, Producer: "p", PSeq: pseq, Key: []byte(key)}
	}
	tests := []struct {
		name                         string
		deliveries                   []Delivered
		lost, violations, duplicates int
	}{
		{"all in order", []Delivered{d(1, 1, "a"), d(2, 2, "b"), d(3, 3, "a"), d(4, 5, "")}, 0, 0, 0},
		{"other keys interleave freely", []Delivered{d(1, 2, "b"), d(2, 1, "a"), d(3, 5, ""), d(4, 3, "a")}, 0, 0, 0},
		{"same key out of order", []Delivered{d(1, 3, "a"), d(2, 1, "a"), d(3, 2, "b"), d(4, 5, "")}, 0, 1, 0},
		{"lost record", []Delivered{d(1, 1, "a"), d(2, 2, "b"), d(3, 5, "")}, 1, 0, 0},
		{"skipping a record is a violation and a loss", []Delivered{d(1, 3, "a"), d(2, 2, "b"), d(3, 5, "")}, 1, 1, 0},
		{"redelivery after crash", []Delivered{d(1, 1, "a"), d(2, 3, "a"), d(3, 1, "a"), d(4, 3, "a"), d(5, 2, "b"), d(6, 5, "")}, 0, 0, 2},
		{"delivery order, not slice order", []Delivered{d(3, 3, "a"), d(1, 1, "a"), d(2, 2, "b"), d(4, 5, "")}, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckGroup("g", sent, tc.deliveries)
			if r.Lost != tc.lost || r.Violations != tc.violations || r.Duplicates != tc.duplicates {
				t.Fatalf("%s; want %d lost, %d violations, %d duplicates; examples %v", r, tc.lost, tc.violations, tc.duplicates, r.Examples)
			}
			if r.Acked != 4 {
				t.Fatalf("acked %d, want 4", r.Acked)
			}
		})
	}
}

func TestUnackedDeliveryIsUnexpectedNotViolation(t *testing.T) {
	sent := []Sent{{Producer: "p", PSeq: 1, Key: []byte("a"), Acked: true}, {Producer: "p", PSeq: 2, Key: []byte("a")}}
	r := CheckGroup("g", sent, []Delivered{{Group: "g", Order: 1, Producer: "p", PSeq: 2, Key: []byte("a")}, {Group: "g", Order: 2, Producer: "p", PSeq: 1, Key: []byte("a")}})
	if r.Unexpected != 1 || r.Violations != 0 || !r.OK() {
		t.Fatalf("%s", r)
	}
}
