package client

import (
	"testing"
	"time"
)

// TestStallLimit: a reader may stay silent readerStall (4s), doubled for each replacement in a
// row at one position after the first, up to 32s.
func TestStallLimit(t *testing.T) {
	for _, c := range []struct {
		restarts int
		want     time.Duration
	}{{0, 4 * time.Second}, {1, 4 * time.Second}, {2, 8 * time.Second}, {3, 16 * time.Second}, {4, 32 * time.Second}, {5, 32 * time.Second}, {40, 32 * time.Second}} {
		if got := stallLimit(c.restarts); got != c.want {
			t.Errorf("stallLimit(%d) = %v, want %v", c.restarts, got, c.want)
		}
	}
}

// TestWatchdogKickNamesItsReader: a kick is taken only while the worker waits for the reader the
// watchdog saw, at the position and since the moment it saw; a kick queued for a reader that was
// replaced meanwhile is dropped when the next reader is set. Issue 10: a kick sent while the
// worker opened its next reader killed that reader as soon as it was made.
func TestWatchdogKickNamesItsReader(t *testing.T) {
	fresh := func() (*worker, readerStallSeen) {
		w := newWorker(nil, 0, 374, 1)
		w.setReader(1, nil)
		w.mu.Lock()
		w.waitSince = time.Now().Add(-time.Minute)
		s := readerStallSeen{n: 1, since: w.waitSince, pos: 374}
		w.mu.Unlock()
		return w, s
	}
	for _, c := range []struct {
		name   string
		change func(w *worker)
		kicked bool
	}{
		{"unchanged", func(*worker) {}, true},
		{"another reader", func(w *worker) { w.setReader(2, nil) }, false},
		{"opening a reader", func(w *worker) { w.setReader(0, nil) }, false},
		{"a record handed over", func(w *worker) { w.mu.Lock(); w.delivered = 375; w.mu.Unlock() }, false},
		{"handling a record", func(w *worker) { w.setWaiting(false, false) }, false},
		{"waiting again since", func(w *worker) { w.setWaiting(true, true) }, false},
		{"lost", func(w *worker) { w.mu.Lock(); w.isLost = true; w.mu.Unlock() }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, s := fresh()
			c.change(w)
			n, ok := w.kickIf(s)
			if ok != c.kicked {
				t.Fatalf("kickIf = %v, want %v", ok, c.kicked)
			}
			select {
			case k := <-w.kick:
				if !c.kicked {
					t.Fatalf("kick %d queued, want none", k)
				}
				if k != 1 || n != 1 {
					t.Fatalf("kick for reader %d (replacement %d), want reader 1 (replacement 1)", k, n)
				}
			default:
				if c.kicked {
					t.Fatal("no kick queued")
				}
			}
		})
	}

	t.Run("stale kick dropped by the next reader", func(t *testing.T) {
		w, s := fresh()
		if _, ok := w.kickIf(s); !ok {
			t.Fatal("not kicked")
		}
		w.setReader(0, nil) // the worker opens its next reader...
		w.setReader(2, nil) // ...and waits for it
		select {
		case k := <-w.kick:
			t.Fatalf("kick for reader %d still queued for reader 2", k)
		default:
		}
	})

	t.Run("replacements counted per position", func(t *testing.T) {
		w, _ := fresh()
		kick := func(reader uint64) int {
			w.setReader(reader, nil)
			w.mu.Lock()
			w.waitSince = time.Now().Add(-time.Minute)
			s := readerStallSeen{n: reader, since: w.waitSince, pos: w.delivered}
			w.mu.Unlock()
			if _, ok := w.stalled(); !ok {
				t.Fatalf("reader %d silent for a minute not seen as stalled", reader)
			}
			n, ok := w.kickIf(s)
			if !ok {
				t.Fatalf("reader %d not kicked", reader)
			}
			<-w.kick
			return n
		}
		if a, b, c := kick(1), kick(2), kick(3); a != 1 || b != 2 || c != 3 {
			t.Fatalf("replacements at one position counted %d, %d, %d, want 1, 2, 3", a, b, c)
		}
		w.mu.Lock()
		w.delivered = 400
		w.mu.Unlock()
		if n := kick(4); n != 1 {
			t.Fatalf("first replacement at a new position counted %d, want 1", n)
		}
		// After 4 replacements at one position the 5th reader there may be silent 32s.
		kick(5)
		kick(6)
		kick(7)
		w.setReader(8, nil)
		for _, c := range []struct {
			silent  time.Duration
			stalled bool
		}{{20 * time.Second, false}, {31 * time.Second, false}, {33 * time.Second, true}} {
			w.mu.Lock()
			w.waitSince = time.Now().Add(-c.silent)
			w.mu.Unlock()
			if _, ok := w.stalled(); ok != c.stalled {
				t.Errorf("the 5th reader at one position, silent %v: stalled %v, want %v (it may stay silent 32s)", c.silent, ok, c.stalled)
			}
		}
	})
}
