package natsver

import (
	"errors"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/wire"
)

// TestAtLeast: the comparison against 2.14 on versions as nats-server releases print them in
// INFO (a release, a release candidate, a "v" some tools prefix), and forms it cannot read.
// Expected values are the release order, not this code: 2.11.0-RC.1 and 2.10.22 are older
// than 2.14, 3.0.0 is newer although its minor is 0, 1.99.0 older although its minor is 99.
func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"2.14.0", true},
		{"2.14.0-RC.1", true}, // a 2.14 pre-release has fast batches and the header
		{"v2.15.2", true},
		{"2.15.2", true},
		{"2.20.0", true},
		{"3.0.0", true},
		{"2.13.9", false},
		{"2.11.0-RC.1", false},
		{"2.11.4", false},
		{"2.10.22", false},
		{"2.9.25", false},
		{"1.99.0", false},
		{"", false},
		{"2", false},
		{"garbage", false},
		{"x.14.0", false},
	} {
		if got := AtLeast(c.v, 2, 14); got != c.want {
			t.Errorf("AtLeast(%q, 2, 14) = %v, want %v", c.v, got, c.want)
		}
	}
	if !AtLeast(Min, minMajor, minMinor) || AtLeast("2.13.99", minMajor, minMinor) {
		t.Errorf("Min %s and its numbers %d.%d disagree", Min, minMajor, minMinor)
	}
}

// TestCheck: the refusal is unavailable and names the server, the version it reports, the
// minimum, who needs it and what to do; a new enough server passes.
func TestCheck(t *testing.T) {
	for _, v := range []string{"2.14.0", "v2.15.2", "2.14.0-RC.1"} {
		if err := Check(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1"); err != nil {
			t.Errorf("Check(%q) = %v, want nil", v, err)
		}
	}
	for _, v := range []string{"2.10.22", "2.11.0-RC.1", "2.13.9", ""} {
		err := Check(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1")
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("Check(%q) = %v, want wire.ErrUnavailable", v, err)
		}
		for _, part := range []string{"nats://127.0.0.1:4222", `"` + v + `"`, "2.14.0 or later", "pctl's consumer", "§6.1", "upgrade the NATS servers"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("Check(%q): %q does not say %q", v, err, part)
			}
		}
	}
}
