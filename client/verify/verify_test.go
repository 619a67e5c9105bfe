package verify

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// sentLog is the producers' log of most cases: producer p sends a, b, a, a (not acknowledged)
// and a keyless record; producer q sends one record of key a.
var sentLog = []Sent{
	{Producer: "p", PSeq: 1, Key: []byte("a"), Acked: true},
	{Producer: "p", PSeq: 2, Key: []byte("b"), Acked: true},
	{Producer: "p", PSeq: 3, Key: []byte("a"), Acked: true},
	{Producer: "p", PSeq: 4, Key: []byte("a"), Acked: false},
	{Producer: "p", PSeq: 5, NoKey: true, Acked: true},
	{Producer: "q", PSeq: 1, Key: []byte("a"), Acked: true},
}

func d(order int64, pseq uint64, key string) Delivered {
	return Delivered{Group: "g", Order: order, Producer: "p", PSeq: pseq, Key: []byte(key)}
}

func keyless(order int64, pseq uint64) Delivered {
	return Delivered{Group: "g", Order: order, Producer: "p", PSeq: pseq, NoKey: true}
}

func fromQ(order int64) Delivered {
	return Delivered{Group: "g", Order: order, Producer: "q", PSeq: 1, Key: []byte("a")}
}

// all is a correct delivery of every acknowledged record.
func all(extra ...Delivered) []Delivered {
	return append([]Delivered{d(1, 1, "a"), d(2, 2, "b"), d(3, 3, "a"), keyless(4, 5), fromQ(5)}, extra...)
}

// counts are the numbers a case expects (the rest of the report must be zero).
type counts struct {
	lost, violations, wrongKey, duplicates, unacked, unexpected, unlogged int
}

func (c counts) of(r Report) counts {
	return counts{r.Lost, r.Violations, r.WrongKey, r.Duplicates, r.Unacked, r.Unexpected, r.Unlogged}
}

// TestCheck: every kind of wrong outcome is caught and counted on its own, and the right
// outcomes pass. Before the checker compared keys, counted phantom records as failures, reported
// expected groups without deliveries and refused reused sequences, the cases marked "(was OK)"
// passed.
func TestCheck(t *testing.T) {
	tests := []struct {
		name       string
		sent       []Sent // nil: sentLog
		deliveries []Delivered
		opts       Options
		want       counts
		failures   []string // of the group "g"; nil: none
		resultFail []string // of the whole result; nil: the group's
	}{
		{name: "all in order", deliveries: all()},
		{name: "other keys and producers interleave freely", deliveries: []Delivered{fromQ(1), d(2, 2, "b"), d(3, 1, "a"), keyless(4, 5), d(5, 3, "a")}},
		{name: "delivery order, not slice order", deliveries: []Delivered{d(3, 3, "a"), d(1, 1, "a"), d(2, 2, "b"), keyless(4, 5), fromQ(5)}},
		{name: "same key out of order", deliveries: []Delivered{d(1, 3, "a"), d(2, 1, "a"), d(3, 2, "b"), keyless(4, 5), fromQ(5)},
			want: counts{violations: 1}, failures: []string{FailOrder}},
		{name: "lost record", deliveries: []Delivered{d(1, 1, "a"), d(2, 2, "b"), keyless(3, 5), fromQ(5)},
			want: counts{lost: 1}, failures: []string{FailLost}},
		{name: "lost keyless record", deliveries: []Delivered{d(1, 1, "a"), d(2, 2, "b"), d(3, 3, "a"), fromQ(5)},
			want: counts{lost: 1}, failures: []string{FailLost}},
		{name: "skipping a record is a violation and a loss", deliveries: []Delivered{d(1, 3, "a"), d(2, 2, "b"), keyless(3, 5), fromQ(5)},
			want: counts{lost: 1, violations: 1}, failures: []string{FailLost, FailOrder}},
		{name: "redelivery after a crash is counted, not failed", deliveries: all(d(6, 1, "a"), d(7, 3, "a"), d(8, 2, "b")),
			want: counts{duplicates: 3}},
		{name: "duplicates fail when no crash was injected", deliveries: all(d(6, 1, "a")), opts: Options{NoDuplicates: true},
			want: counts{duplicates: 1}, failures: []string{FailDuplicates}},
		{name: "a sent but unacknowledged record may be delivered", deliveries: all(d(6, 4, "a")), want: counts{unacked: 1}},
		{name: "wrong key (was OK)", deliveries: []Delivered{d(1, 1, "a"), d(2, 2, "a"), d(3, 3, "a"), keyless(4, 5), fromQ(5)},
			want: counts{wrongKey: 1}, failures: []string{FailWrongKey}},
		{name: "keyed record delivered keyless (was OK)", deliveries: []Delivered{d(1, 1, "a"), keyless(2, 2), d(3, 3, "a"), keyless(4, 5), fromQ(5)},
			want: counts{wrongKey: 1}, failures: []string{FailWrongKey}},
		{name: "keyless record delivered with a key (was OK)", deliveries: []Delivered{d(1, 1, "a"), d(2, 2, "b"), d(3, 3, "a"), d(4, 5, ""), fromQ(5)},
			want: counts{wrongKey: 1}, failures: []string{FailWrongKey}},
		{name: "empty key is not keyless", sent: []Sent{{Producer: "p", PSeq: 1, Key: []byte{}, Acked: true}}, deliveries: []Delivered{keyless(1, 1)},
			want: counts{wrongKey: 1}, failures: []string{FailWrongKey}},
		{name: "empty key delivered as the empty key", sent: []Sent{{Producer: "p", PSeq: 1, Key: []byte{}, Acked: true}}, deliveries: []Delivered{d(1, 1, "")}},
		{name: "phantom record of a known producer (was OK)", deliveries: all(d(6, 99, "a")),
			want: counts{unexpected: 1}, failures: []string{FailUnexpected}},
		{name: "phantom record of an unknown producer (was OK)", deliveries: all(Delivered{Group: "g", Order: 6, Producer: "x", PSeq: 1, Key: []byte("a")}),
			want: counts{unexpected: 1}, failures: []string{FailUnexpected}},
		{name: "partial logs: an unknown producer's records are unlogged", opts: Options{PartialLogs: true},
			deliveries: all(Delivered{Group: "g", Order: 6, Producer: "x", PSeq: 1, Key: []byte("a")}), want: counts{unlogged: 1}},
		{name: "partial logs: a known producer's phantom still fails", opts: Options{PartialLogs: true}, deliveries: all(d(6, 99, "a")),
			want: counts{unexpected: 1}, failures: []string{FailUnexpected}},
		{name: "reused sequence (was OK)", sent: append(append([]Sent(nil), sentLog...), Sent{Producer: "p", PSeq: 3, Key: []byte("z"), Acked: true}),
			deliveries: all(), resultFail: []string{FailReusedSeq}},
		{name: "the same record logged twice is a reused sequence too", sent: append(append([]Sent(nil), sentLog...), sentLog[0]),
			deliveries: all(), resultFail: []string{FailReusedSeq}},
		{name: "expected group without deliveries (was not reported)", deliveries: nil, opts: Options{Groups: []string{"g"}},
			want: counts{lost: 5}, failures: []string{FailLost}},
		// Compacted topics: a record may be skipped when a later one of its key and producer
		// was delivered; the latest is never optional; first deliveries only go forward.
		{name: "compacted: an overwritten record may be skipped", opts: Options{Compacted: true},
			deliveries: []Delivered{d(1, 3, "a"), d(2, 2, "b"), keyless(3, 5), fromQ(4)}},
		{name: "compacted: the latest record of a key is lost if not delivered", opts: Options{Compacted: true},
			deliveries: []Delivered{d(1, 1, "a"), d(2, 2, "b"), keyless(3, 5), fromQ(4)},
			want:       counts{lost: 1}, failures: []string{FailLost}},
		{name: "compacted: going back is a violation", opts: Options{Compacted: true},
			deliveries: []Delivered{d(1, 3, "a"), d(2, 1, "a"), d(3, 2, "b"), keyless(4, 5), fromQ(5)},
			want:       counts{violations: 1}, failures: []string{FailOrder}},
		{name: "compacted: another producer's later record does not excuse a loss", opts: Options{Compacted: true},
			deliveries: []Delivered{d(1, 2, "b"), keyless(2, 5), fromQ(3)},
			want:       counts{lost: 2}, failures: []string{FailLost}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := tc.sent
			if sent == nil {
				sent = sentLog
			}
			res := Check(sent, tc.deliveries, tc.opts)
			r := res.Group("g")
			if r == nil {
				t.Fatalf("no report of group g: %v", res)
			}
			if got := tc.want.of(*r); got != tc.want {
				t.Errorf("%s\nwant %+v; examples %v", r, tc.want, r.Examples)
			}
			if !slices.Equal(r.Failures, orEmpty(tc.failures)) || r.OK() != (len(tc.failures) == 0) {
				t.Errorf("group failures %v (OK %v), want %v", r.Failures, r.OK(), tc.failures)
			}
			wantRes := tc.resultFail
			if wantRes == nil {
				wantRes = tc.failures
			}
			if !slices.Equal(res.Failures, orEmpty(wantRes)) || res.OK() != (len(wantRes) == 0) {
				t.Errorf("result failures %v (OK %v), want %v\n%s", res.Failures, res.OK(), wantRes, res)
			}
		})
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestCheckGroups: groups are those expected and those that delivered; an expected group that
// delivered nothing fails even when another group is perfect (before, a run whose late group
// never started passed on the live group's report alone), and nothing to check is no success.
func TestCheckGroups(t *testing.T) {
	res := Check(sentLog, all(), Options{Groups: []string{"g", "late"}})
	if res.OK() || len(res.Groups) != 2 {
		t.Fatalf("want two groups and a failure:\n%s", res)
	}
	if late := res.Group("late"); late == nil || late.Lost != 5 || late.Deliveries != 0 || late.OK() {
		t.Fatalf("the late group: %+v", late)
	}
	if g := res.Group("g"); !g.OK() {
		t.Fatalf("group g: %s", g)
	}
	if res := Check(sentLog, all(), Options{}); !res.OK() || len(res.Groups) != 1 {
		t.Fatalf("groups found in the deliveries are reported:\n%s", res)
	}
	if res := Check(sentLog, nil, Options{}); res.OK() || !slices.Equal(res.Failures, []string{FailNoGroups}) {
		t.Fatalf("no group at all must fail:\n%s", res)
	}
	// Nothing acknowledged and nothing delivered: an expected group is OK (there was nothing to lose).
	if res := Check([]Sent{{Producer: "p", PSeq: 1, Key: []byte("a")}}, nil, Options{Groups: []string{"g"}}); !res.OK() {
		t.Fatalf("nothing acknowledged: %s", res)
	}
}

// TestReusedSequenceNotMerged: two records under one (producer, pseq) are reported with both
// keys, and the first one stands for the group check (the second's key is a wrong key).
func TestReusedSequenceNotMerged(t *testing.T) {
	sent := []Sent{{Producer: "p", PSeq: 1, Key: []byte("a"), Acked: true}, {Producer: "p", PSeq: 1, Key: []byte("b"), Acked: true}}
	res := Check(sent, []Delivered{d(1, 1, "b")}, Options{})
	if res.ReusedSeqs != 1 || res.Acked != 1 || res.OK() || len(res.Examples) != 1 || !strings.Contains(res.Examples[0], `"a" and "b"`) {
		t.Fatalf("%s", res)
	}
	if g := res.Group("g"); g.WrongKey != 1 {
		t.Fatalf("%s", g)
	}
}

// TestResultJSON: --json carries every count and the verdict.
func TestResultJSON(t *testing.T) {
	b, err := json.Marshal(Check(sentLog, all(d(6, 99, "a")), Options{Groups: []string{"g"}}))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sent", "acked", "producers", "reused_seqs", "failures", "groups"} {
		if _, ok := m[k]; !ok {
			t.Errorf("result JSON has no %q: %s", k, b)
		}
	}
	g := m["groups"].([]any)[0].(map[string]any)
	for _, k := range []string{"group", "sent", "acked", "deliveries", "distinct", "lost", "violations", "wrong_key", "duplicates", "unacked", "unexpected", "unlogged", "failures"} {
		if _, ok := g[k]; !ok {
			t.Errorf("group JSON has no %q: %s", k, b)
		}
	}
	if g["unexpected"].(float64) != 1 {
		t.Errorf("unexpected: %v", g["unexpected"])
	}
}
