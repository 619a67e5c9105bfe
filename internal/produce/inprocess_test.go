package produce

import (
	"errors"
	"strings"
	"testing"

	"pctl.dev/pctl/broker/wire"
)

// TestInProcessRule: an id is stuck after InProcessLimit 10158 answers and not before; other
// answers in between (a wrong last sequence 10071, no answer) do not start the count again (a
// stuck id with an out-of-date expected sequence gets both by turns); a renewed id does. The expected answers are written out by hand from
// spec/protocol.md §5.1.5, not computed with the rule.
func TestInProcessRule(t *testing.T) {
	const inProc, wrongLast, none = 10158, 10071, 0
	cases := []struct {
		name    string
		answers []int
		stuck   []bool
	}{
		{"four in a row", []int{inProc, inProc, inProc, inProc}, []bool{false, false, false, true}},
		{"by turns with a wrong last sequence", []int{inProc, wrongLast, inProc, wrongLast, inProc, wrongLast, inProc}, []bool{false, false, false, false, false, false, true}},
		{"with no answer between", []int{inProc, none, inProc, none, inProc, inProc}, []bool{false, false, false, false, false, true}},
		{"three", []int{inProc, inProc, inProc, wrongLast, none}, []bool{false, false, false, false, false}},
		{"stays stuck", []int{inProc, inProc, inProc, inProc, inProc}, []bool{false, false, false, true, true}},
	}
	for _, tc := range cases {
		var c InProcess
		for i, code := range tc.answers {
			if got := c.Note(code); got != tc.stuck[i] {
				t.Errorf("%s: answer %d (%d): stuck %v, want %v", tc.name, i+1, code, got, tc.stuck[i])
			}
		}
	}
	var c InProcess
	for i := 0; i < 4; i++ {
		c.Note(inProc)
	}
	c.Renewed()
	if c.Count() != 0 || c.Note(inProc) {
		t.Errorf("a renewed id must start its count again: count %d", c.Count())
	}
}

// TestInProcessErrorIsTyped: a record failed by the rule is both ErrMsgIDInProcess and
// wire.ErrUnavailable (its fate is unknown), and its message names 10158 and what to do.
func TestInProcessErrorIsTyped(t *testing.T) {
	err := inProcessError(7, "p-7-abc", 2, 4)
	if !errors.Is(err, ErrMsgIDInProcess) || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("error %v: want ErrMsgIDInProcess and wire.ErrUnavailable", err)
	}
	for _, want := range []string{"10158", "p-7-abc", "partition 2", "fate is unknown", "read partition 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
