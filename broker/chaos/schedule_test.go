package chaos

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker/scenario"
	"pctl.dev/pctl/client/verify"
)

// TestScheduleCoversEveryKind checks the fixed seeds' promise: seeds 1 to 10 run every fault kind
// (the CI set), a seed's plan is the same every time, and node faults come in time order inside
// the traffic.
func TestScheduleCoversEveryKind(t *testing.T) {
	const traffic = 12 * time.Second
	seen := map[FaultKind]bool{}
	for seed := int64(1); seed <= 10; seed++ {
		p := Schedule(seed, traffic, 2)
		if !reflect.DeepEqual(p, Schedule(seed, traffic, 2)) {
			t.Fatalf("seed %d: two plans differ", seed)
		}
		if len(p.Changes) < 2 || len(p.Faults) != 3 {
			t.Fatalf("seed %d: %d changes, %d faults", seed, len(p.Changes), len(p.Faults))
		}
		var last time.Duration
		for _, f := range p.Faults {
			seen[f.Kind] = true
			if f.Kind == KillBroker {
				if f.During < 1 || f.During > len(p.Changes) {
					t.Errorf("seed %d: %v rides on change %d of %d", seed, f, f.During, len(p.Changes))
				}
				continue
			}
			if f.At < last || f.At+f.For > traffic {
				t.Errorf("seed %d: %v is out of order or past the traffic (%v)", seed, f, traffic)
			}
			last = f.At + f.For
		}
		for _, c := range p.Changes {
			if c.At <= 0 || c.At >= traffic {
				t.Errorf("seed %d: change %v at %v is outside the traffic", seed, c, c.At)
			}
		}
	}
	for _, k := range Kinds {
		if !seen[k] {
			t.Errorf("seeds 1-10 never run %s", k)
		}
	}
}

// TestFailuresNameEveryProblem shows the verdict failing on each wrong outcome it is built from,
// and passing on a clean one.
func TestFailuresNameEveryProblem(t *testing.T) {
	sent := []verify.Sent{{Producer: "p", PSeq: 1, Key: []byte("k"), Acked: true}, {Producer: "p", PSeq: 2, Key: []byte("k"), Acked: true}}
	clean := func() *Result {
		d := []verify.Delivered{{Group: "live", Order: 1, Producer: "p", PSeq: 1, Key: []byte("k")}, {Group: "live", Order: 2, Producer: "p", PSeq: 2, Key: []byte("k")},
			{Group: "late", Order: 3, Producer: "p", PSeq: 1, Key: []byte("k")}, {Group: "late", Order: 4, Producer: "p", PSeq: 2, Key: []byte("k")}}
		return &Result{Verify: verify.Check(sent, d, verify.Options{Groups: []string{"live", "late"}})}
	}
	if r := clean(); !r.OK() {
		t.Fatalf("a clean run fails: %v", r.Failures())
	}
	tests := []struct {
		name  string
		spoil func(r *Result)
		want  string
	}{
		{"order", func(r *Result) {
			d := []verify.Delivered{{Group: "live", Order: 1, Producer: "p", PSeq: 2, Key: []byte("k")}, {Group: "live", Order: 2, Producer: "p", PSeq: 1, Key: []byte("k")}}
			r.Verify = verify.Check(sent, d, verify.Options{Groups: []string{"live"}})
		}, "order violations"},
		{"lost in the late group", func(r *Result) {
			d := []verify.Delivered{{Group: "live", Order: 1, Producer: "p", PSeq: 1, Key: []byte("k")}, {Group: "live", Order: 2, Producer: "p", PSeq: 2, Key: []byte("k")}}
			r.Verify = verify.Check(sent, d, verify.Options{Groups: []string{"live", "late"}})
		}, "group late"},
		{"no checker", func(r *Result) { r.Verify = nil }, "did not run"},
		{"placement", func(r *Result) { r.Placement = scenario.PlacementReport{Checked: 2, Wrong: 1} }, "outside f_epoch"},
		{"boundary", func(r *Result) { r.Misplaced = 3 }, "wrong side of an epoch boundary"},
		{"send failed", func(r *Result) { r.SendFailed = 2 }, "failed to send"},
		{"unresolved", func(r *Result) { r.Unresolved = 5 }, "never resolved"},
		{"live stall", func(r *Result) { r.LiveIncomplete, r.LiveMissing = true, 7 }, "live group: 7"},
		{"late stall", func(r *Result) { r.LateIncomplete = true }, "late group"},
		{"stuck change", func(r *Result) { r.Problems = []string{`epoch change "6 partitions" never completed`} }, "never completed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := clean()
			tc.spoil(r)
			if r.OK() || !strings.Contains(strings.Join(r.Failures(), "\n"), tc.want) {
				t.Fatalf("failures %q do not name %q", r.Failures(), tc.want)
			}
		})
	}
	// Records failed as stuck "in process" (10158, spec/protocol.md §5.1.5) are of unknown fate,
	// not failures of the run: a real cluster answers so while a cut-off leader holds their
	// proposal (chaos seed 109). Stored twice they still fail it, as any record would.
	r := clean()
	r.InProcess = 3
	if !r.OK() {
		t.Fatalf("records of unknown fate fail the run: %v", r.Failures())
	}
}
