package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/progress"
)

// produceWatch is what 'pctl produce' shows while it works: progress on a terminal, --verbose
// lines, lost and regained connections, and the stall watchdog that ends a produce which has had
// no acknowledgement for --timeout while records were outstanding (issue 16 saw one sit silent
// for 85 s with its broker down).
type produceWatch struct {
	e       *env
	cmd     string
	timeout time.Duration
	verbose bool
	bar     *progress.Bar

	mu          sync.Mutex
	outstanding int
	last        time.Time // the last answer, or when records became outstanding
	stall       error
	cancel      context.CancelCauseFunc
	stop        chan struct{}
	stopOnce    sync.Once
}

func newProduceWatch(e *env, cmd string, timeout time.Duration, verbose bool) *produceWatch {
	return &produceWatch{e: e, cmd: cmd, timeout: timeout, verbose: verbose, stop: make(chan struct{}),
		bar: progress.New(e.stderr, e.getenv, -1, "producing", "records")}
}

// start returns the context records are sent under: parent's, also cancelled by the watchdog.
func (w *produceWatch) start(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	w.cancel = cancel
	go func() {
		t := time.NewTicker(max(min(w.timeout/4, 250*time.Millisecond), time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			w.mu.Lock()
			if w.outstanding > 0 && time.Since(w.last) > w.timeout && w.stall == nil {
				w.stall = fmt.Errorf("no acknowledgement for %v with %d record(s) outstanding: is the broker up and reachable? (those records may or may not be stored; --timeout sets the wait)", w.timeout, w.outstanding)
			}
			stall := w.stall
			w.mu.Unlock()
			if stall != nil {
				cancel(stall)
				return
			}
		}
	}()
	return ctx
}

// stalled returns the watchdog's verdict (nil: no stall).
func (w *produceWatch) stalled() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stall
}

func (w *produceWatch) sent() {
	w.mu.Lock()
	if w.outstanding == 0 {
		w.last = time.Now()
	}
	w.outstanding++
	w.mu.Unlock()
}

func (w *produceWatch) answered(r client.Result) {
	w.mu.Lock()
	w.outstanding--
	w.last = time.Now()
	w.mu.Unlock()
	if r.Err == nil {
		w.bar.Add(1)
	}
}

// print writes a line on standard error, above the progress display.
func (w *produceWatch) print(format string, args ...any) {
	line := fmt.Sprintf("pctl %s: %s", w.cmd, oneLine(fmt.Sprintf(format, args...)))
	if w.bar != nil {
		w.bar.Printf("%s", line)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintln(w.e.stderr, line)
}

// logf is the producer's Logf: its decisions after failures, with --verbose.
func (w *produceWatch) logf(format string, args ...any) {
	if w.verbose {
		w.print(format, args...)
	}
}

// OnProduceRepartitioned implements client.HookProduceRepartitioned.
func (w *produceWatch) OnProduceRepartitioned(topic string, epoch, resent int) {
	w.bar.Describe("producing (epoch %d)", epoch)
	if w.verbose {
		w.print("fenced by an epoch change: now producing to epoch %d of %s; re-sent %d unacknowledged record(s) in their original order", epoch, topic, resent)
	}
}

// watchConn reports a lost and a regained connection, after the client's own handlers (the
// producer's sinks learn of both through them: replacing them left a producer that never
// noticed a reconnect, its records unacknowledged for good after a broker restart).
func (w *produceWatch) watchConn(c *client.Client) {
	nc := c.Conn()
	prevLost, prevBack := nc.Opts.DisconnectedErrCB, nc.Opts.ReconnectedCB
	nc.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
		if prevLost != nil {
			prevLost(nc, err)
		}
		if nc.IsClosed() {
			return
		}
		msg := "connection lost"
		if err != nil {
			msg += " (" + err.Error() + ")"
		}
		w.print("%s; reconnecting: unacknowledged records are kept and re-sent", msg)
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		if prevBack != nil {
			prevBack(nc)
		}
		w.print("reconnected to %s", nc.ConnectedUrlRedacted())
	})
}

// finish ends the watchdog and the progress display. Idempotent.
func (w *produceWatch) finish() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.bar.Finish()
	})
}

var _ client.HookProduceRepartitioned = (*produceWatch)(nil)
