package testhook

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// CheckStickyEnv is the environment variable that makes a producer's disagreement with its
// sticky-ambiguity machine panic ("1") or fail the producer ("0") whatever the process: a test binary sets it to "1" for the processes it
// starts (the chaos suite's brokers, whose produce service is a producer).
const CheckStickyEnv = "PCTL_CHECK_STICKY"

var checkSticky = func() bool {
	switch os.Getenv(CheckStickyEnv) {
	case "1":
		return true
	case "0":
		return false
	}
	return testing.Testing() && !benchmarking(os.Args[1:])
}()

func init() {
	if checkSticky && os.Getenv(CheckStickyEnv) == "" {
		_ = os.Setenv(CheckStickyEnv, "1")
	}
}

// benchmarking reports whether a test binary's arguments ask for benchmarks: they measure what
// production runs, so a disagreement fails the producer there as in production (CheckStickyEnv=1
// makes it panic).
func benchmarking(args []string) bool {
	for i, a := range args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, "test.bench="); ok {
			return v != ""
		}
		if a == "test.bench" && i+1 < len(args) {
			return args[i+1] != ""
		}
	}
	return false
}

// CheckSticky reports whether a producer's decision that is not its sticky-ambiguity machine's
// (proto.StickyCheck, spec/protocol.md §5.1.2) panics (StickyViolation): in every test binary of
// the module (not when it runs benchmarks) and the processes it starts; never in production
// unless CheckStickyEnv is "1". The machine runs in every producer either way (it decides);
// without CheckSticky a disagreement fails the producer with code internal.
func CheckSticky() bool { return checkSticky }

// StickyViolation is what a producer does when its decision is not the machine's: it writes msg
// (the decision and the events that led to it) to standard error and panics, so that the test,
// or the broker process a test started, fails loudly whatever goroutine found it.
func StickyViolation(msg string) {
	fmt.Fprintln(os.Stderr, "PCTL STICKY CHECK FAILED:", msg)
	panic(msg)
}
