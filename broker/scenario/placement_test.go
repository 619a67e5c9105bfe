package scenario

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
	"pctl.dev/pctl/spec/vectors"
)

// TestCheckPlacements: the placement check counts a wrong partition, and counts every delivery
// it cannot check (an unknown epoch, a module that traps on the key, a module whose bytes do not
// match the epoch's digest, one it cannot fetch) as an error, never as "placed correctly" (the
// old check in the consumer handler returned true in each of those cases). Expected partitions
// come from spec/vectors (kafka-murmur2) and from the hostile module's documented behaviour
// (runtime/testdata/hostile/README.md: trap-some-keys gives len(key) % n and traps when the first byte is 0xff).
func TestCheckPlacements(t *testing.T) {
	murmur, _ := plugins.Builtin("kafka-murmur2")
	trap, err := os.ReadFile("../../runtime/testdata/hostile/trap-some-keys.wasm")
	if err != nil {
		t.Fatal(err)
	}
	topic := &wire.Topic{Name: "t", Epochs: []wire.Epoch{
		{Epoch: 1, Partitioner: wire.Partitioner{Name: "kafka-murmur2", Digest: runtime.Digest(murmur)}, Partitions: 1000},
		{Epoch: 2, Partitioner: wire.Partitioner{Name: "trap-some-keys", Digest: runtime.Digest(trap)}, Partitions: 10},
		{Epoch: 3, Partitioner: wire.Partitioner{Name: "unobtainable", Digest: strings.Repeat("ab", 32)}, Partitions: 10},
		{Epoch: 4, Partitioner: wire.Partitioner{Name: "lies", Digest: strings.Repeat("cd", 32)}, Partitions: 10},
	}}
	src := func(_ context.Context, digest string) ([]byte, error) {
		switch digest {
		case runtime.Digest(trap):
			return trap, nil
		case strings.Repeat("cd", 32):
			return trap, nil // other bytes than the digest names
		}
		return nil, errors.New("no such module")
	}
	vec, err := vectors.Load("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	var right []Placement
	for _, c := range vec.Cases {
		if c.N == 1000 && len(right) < 50 {
			right = append(right, Placement{Epoch: 1, Partition: int(c.Partition), Key: c.Key})
		}
	}
	right = append(right,
		Placement{Epoch: 2, Partition: 1, Key: []byte{0x00}}, // the interpreter runs the non-built-in
		Placement{Epoch: 2, Partition: 2, Key: []byte{0x01, 0x02}},
		Placement{Epoch: 2, Partition: 0, Key: []byte{}},
	)
	if len(right) != 53 {
		t.Fatalf("%d vector cases at n=1000", len(right)-3)
	}
	tests := []struct {
		name          string
		places        []Placement
		wrong, errors int
	}{
		{"all right", right, 0, 0},
		{"a wrong partition of a built-in", append(right[:1:1], Placement{Epoch: 1, Partition: (right[0].Partition + 1) % 1000, Key: right[0].Key}), 1, 0},
		{"a wrong partition of another module", []Placement{{Epoch: 2, Partition: 3, Key: []byte{0x01}}}, 1, 0},
		{"unknown epoch", []Placement{{Epoch: 9, Partition: 0, Key: []byte("k")}}, 0, 1},
		{"the module traps on the key", []Placement{{Epoch: 2, Partition: 0, Key: []byte{0xff, 0x01}}}, 0, 1},
		{"the module cannot be had", []Placement{{Epoch: 3, Partition: 0, Key: []byte("k")}, {Epoch: 3, Partition: 0, Key: []byte("j")}}, 0, 2},
		{"bytes that are not the epoch's module", []Placement{{Epoch: 4, Partition: 0, Key: []byte{0x00}}}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckPlacements(context.Background(), topic, src, tc.places)
			if rep.Checked != len(tc.places) || rep.Wrong != tc.wrong || rep.Errors != tc.errors || rep.OK() != (tc.wrong+tc.errors == 0) {
				t.Fatalf("checked %d, wrong %d, errors %d (want %d, %d, %d): %v", rep.Checked, rep.Wrong, rep.Errors, len(tc.places), tc.wrong, tc.errors, rep.Examples)
			}
		})
	}
}

// TestResultOK: a run passes only with every check run and passed: an order-checker report for
// every group it started (before, any non-empty report list would do) and a placement check
// that could check every delivery.
func TestResultOK(t *testing.T) {
	sent := []verify.Sent{{Producer: "p", PSeq: 1, Key: []byte("a"), Acked: true}}
	live := []verify.Delivered{{Group: "live", Order: 1, Producer: "p", PSeq: 1, Key: []byte("a")}}
	ok := func() *Result {
		v := verify.Check(sent, live, verify.Options{Groups: []string{"live"}})
		return &Result{Groups: []string{"live"}, Verify: v, Reports: v.Groups, Placement: PlacementReport{Checked: 1}}
	}
	tests := []struct {
		name   string
		mutate func(r *Result)
		ok     bool
	}{
		{"all checks passed", func(*Result) {}, true},
		{"the order checker did not run", func(r *Result) { r.Verify = nil }, false},
		{"no group ran", func(r *Result) { r.Groups = nil }, false},
		{"a group without a report", func(r *Result) { r.Groups = append(r.Groups, "late") }, false},
		{"a group lost records", func(r *Result) {
			r.Groups = append(r.Groups, "late")
			r.Verify = verify.Check(sent, live, verify.Options{Groups: r.Groups})
		}, false},
		{"a wrong partition", func(r *Result) { r.Placement.Wrong = 1 }, false},
		{"a placement that could not be checked", func(r *Result) { r.Placement.Errors = 1 }, false},
		{"a record across a boundary", func(r *Result) { r.MisplacedRecords = 1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.mutate(r)
			if r.OK() != tc.ok || (len(r.Failures()) == 0) != tc.ok {
				t.Fatalf("OK %v, failures %q; want OK %v", r.OK(), r.Failures(), tc.ok)
			}
		})
	}
}
