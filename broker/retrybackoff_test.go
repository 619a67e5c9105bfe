package broker_test

import (
	"testing"
	"time"

	"pctl.dev/pctl/broker"
)

// TestRetryBackoff: the pauses spec/protocol.md §7 ("Unfinished work") gives the retry loop: the
// interval doubled per failed attempt, up to 30 s; up to 4 intervals for an epoch change.
func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		every    time.Duration
		attempts int
		change   bool
		want     time.Duration
	}{
		{2 * time.Second, 1, false, 4 * time.Second},
		{2 * time.Second, 3, false, 16 * time.Second},
		{2 * time.Second, 4, false, 30 * time.Second},
		{2 * time.Second, 40, false, 30 * time.Second},
		{2 * time.Second, 1, true, 4 * time.Second},
		{2 * time.Second, 2, true, 8 * time.Second},
		{2 * time.Second, 3, true, 8 * time.Second},
		{2 * time.Second, 40, true, 8 * time.Second},
		{150 * time.Millisecond, 40, true, 600 * time.Millisecond},
		{150 * time.Millisecond, 40, false, 4800 * time.Millisecond},
		{20 * time.Second, 2, true, 30 * time.Second},
	} {
		if got := broker.RetryBackoff(tc.every, tc.attempts, tc.change); got != tc.want {
			t.Errorf("every %v, %d attempts, change %v: %v, want %v", tc.every, tc.attempts, tc.change, got, tc.want)
		}
	}
}
