package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// TestForEachBoundsAndNamesFailures: a step over partitions keeps at most its bound in flight,
// and its error names every failed partition (ascending, the first few spelled out), unwraps to
// the lowest one (its code is the step's), and stops starting partitions after a failure.
func TestForEachBoundsAndNamesFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, limit int
		fail     map[int]error
		want     []string // substrings of the error, in order
		wantIs   error
	}{
		{"none fail", 100, 8, nil, nil, nil},
		{"one fails", 50, 4, map[int]error{17: fmt.Errorf("%w: stream 17 full", wire.ErrUnavailable)},
			[]string{"partition 17: unavailable: stream 17 full"}, wire.ErrUnavailable},
		{"many fail, named ascending", 20, 20, map[int]error{
			9: fmt.Errorf("%w: x9", wire.ErrConflict), 3: fmt.Errorf("%w: x3", wire.ErrInternal), 5: errors.New("x5"),
			4: errors.New("x4"), 11: errors.New("x11")},
			[]string{"5 partitions failed: ", "partition 3: internal", "x3", "; partition 4: x4", "; partition 5: x5", "and 2 more (partitions [9 11])"}, wire.ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inFlight, most atomic.Int64
			var mu sync.Mutex
			started := map[int]bool{}
			everyone := make(chan struct{}) // closed when every partition has started
			err := forEach(context.Background(), tc.n, tc.limit, func(q int) error {
				now := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				mu.Lock()
				started[q] = true
				all := len(started) == tc.n
				mu.Unlock()
				if all {
					close(everyone)
				}
				if e, ok := tc.fail[q]; ok {
					if tc.limit >= tc.n {
						// Every partition may run at once: fail only once all have started, or
						// one failing first stops the others from starting (under -race a
						// failure can come before partition 9 is started at all).
						select {
						case <-everyone:
						case <-time.After(10 * time.Second):
						}
					}
					return e
				}
				return nil
			})
			if most.Load() > int64(tc.limit) {
				t.Errorf("%d in flight, bound %d", most.Load(), tc.limit)
			}
			if tc.want == nil {
				if err != nil || len(started) != tc.n {
					t.Fatalf("err %v, %d of %d partitions run", err, len(started), tc.n)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			msg, at := err.Error(), 0
			for _, w := range tc.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error %q lacks %q after position %d", msg, w, at)
				}
				at += i + len(w)
			}
			if !errors.Is(err, tc.wantIs) || wire.Code(err) != wire.Code(tc.wantIs) {
				t.Fatalf("error %q: code %s, want %s", msg, wire.Code(err), wire.Code(tc.wantIs))
			}
		})
	}
}

// TestForEachStopsStartingAfterAFailure: with one in flight, nothing after the failed partition
// starts.
func TestForEachStopsStartingAfterAFailure(t *testing.T) {
	var last atomic.Int64
	err := forEach(context.Background(), 100, 1, func(q int) error {
		last.Store(int64(q))
		if q == 10 {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || last.Load() != 10 {
		t.Fatalf("err %v, last partition started %d, want 10", err, last.Load())
	}
}
