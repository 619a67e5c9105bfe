package scenario

import (
	"testing"

	"pctl.dev/pctl/client/verify"
)

// TestFailuresNameAMemberThatStopped: a member that stops on its own (its Run returned an error
// the run did not cause) is a failure of its own, not only records its group never delivered.
func TestFailuresNameAMemberThatStopped(t *testing.T) {
	ok := &Result{Verify: &verify.Result{Groups: []verify.Report{{Group: "live"}}}, Groups: []string{"live"}}
	if f := ok.Failures(); len(f) != 0 {
		t.Fatalf("a clean result has failures %q", f)
	}
	bad := *ok
	bad.MemberErrors = []string{"group live member m1: plugin fetch: nats: no responders available for request"}
	f := bad.Failures()
	if len(f) != 1 || f[0] != "member stopped: group live member m1: plugin fetch: nats: no responders available for request" {
		t.Fatalf("failures %q, want the stopped member named", f)
	}
}
