// Package progress shows a long command's progress on standard error when it is a terminal, and
// nothing otherwise (pipes, files, CI logs stay clean). It wraps github.com/schollz/progressbar:
// a bar when the total is known, a counter with a rate when it is not.
//
// PCTL_PROGRESS=always shows it on any writer (tests), never hides it everywhere. Every method is
// safe on a nil *Bar (progress off) and from several goroutines.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Enabled reports whether progress goes to w: a terminal, or PCTL_PROGRESS=always.
func Enabled(w io.Writer, getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch getenv("PCTL_PROGRESS") {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Bar is a progress display, or nil when progress is off.
type Bar struct {
	mu  sync.Mutex
	bar *progressbar.ProgressBar
	w   io.Writer
}

// New starts a display of total units (total < 0: unknown) described by desc, or returns nil
// when progress is off for w.
func New(w io.Writer, getenv func(string) string, total int64, desc, unit string) *Bar {
	if !Enabled(w, getenv) {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc), progressbar.OptionThrottle(200 * time.Millisecond),
		progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit),
		progressbar.OptionSetElapsedTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(24),
		progressbar.OptionSpinnerType(14), progressbar.OptionUseANSICodes(true),
	}
	if total >= 0 {
		opts = append(opts, progressbar.OptionSetPredictTime(true))
	}
	return &Bar{bar: progressbar.NewOptions64(total, opts...), w: w}
}

// Add counts n more units done.
func (b *Bar) Add(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	_ = b.bar.Add(n)
	b.mu.Unlock()
}

// Describe changes the description (a step, an epoch, a state).
func (b *Bar) Describe(format string, args ...any) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.bar.Describe(fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// Set sets the units done.
func (b *Bar) Set(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	_ = b.bar.Set64(n)
	b.mu.Unlock()
}

// Printf prints a line above the display (a log line during the work).
func (b *Bar) Printf(format string, args ...any) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.bar.Clear()
	fmt.Fprintf(b.w, format+"\n", args...)
	_ = b.bar.RenderBlank()
}

// Finish clears the display, so that what follows starts on a clean line. Idempotent.
func (b *Bar) Finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.bar.Exit()
	_ = b.bar.Clear()
}
