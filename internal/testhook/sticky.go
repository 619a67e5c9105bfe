package testhook

import (
	"fmt"
	"os"
	"testing"
)

// CheckStickyEnv is the environment variable that turns the producers' sticky-ambiguity check on
// in a process that is not a test binary: a test binary sets it for the processes it starts (the
// chaos suite's brokers, whose produce service is a producer).
const CheckStickyEnv = "PCTL_CHECK_STICKY"

func init() {
	if testing.Testing() {
		_ = os.Setenv(CheckStickyEnv, "1")
	}
}

// CheckSticky reports whether producers (internal/produce) run the sticky-ambiguity machine
// (proto.StickyCheck, spec/protocol.md §5.1.2) beside their own decisions and check each one
// against it: in every test binary of the module and the processes they start, never in
// production (unless CheckStickyEnv is set by hand).
func CheckSticky() bool { return testing.Testing() || os.Getenv(CheckStickyEnv) == "1" }

// StickyViolation is what a producer does when its decision is not the machine's: it writes msg
// (the decision and the events that led to it) to standard error and panics, so that the test,
// or the broker process a test started, fails loudly whatever goroutine found it.
func StickyViolation(msg string) {
	fmt.Fprintln(os.Stderr, "PCTL STICKY CHECK FAILED:", msg)
	panic(msg)
}
