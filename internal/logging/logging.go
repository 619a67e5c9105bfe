// Package logging sets up pctl's structured logs (log/slog) and keeps long values short.
//
// Every line is one event with its fields (topic, epoch, step, plugin, took, ...), in slog's
// text or JSON format. Lists that can be long — a 16,384-partition epoch's boundaries, a topic's
// partitions — are never printed whole: Uints and Ints summarise them (count, min, max, sum and
// the first few values), so one line stays one line.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// Formats and levels, for flags.
var (
	Formats = []string{"text", "json"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// ParseLevel parses debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: give debug, info, warn or error", s)
}

// New returns a logger writing format ("text" or "json") lines at level and above to w. Writes
// are serialised, so w needs no lock of its own.
func New(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	w = &lockedWriter{w: w}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: give text or json", format)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Discard is a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Logf returns a logger that hands each line, formatted as "msg key=value ...", to logf: for
// callers (tests, older code) that take printf-style lines. Debug lines are dropped.
func Logf(logf func(format string, args ...any)) *slog.Logger {
	return slog.New(&logfHandler{logf: logf})
}

type logfHandler struct {
	logf  func(string, ...any)
	attrs []slog.Attr
	group string
}

func (h *logfHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *logfHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if r.Level >= slog.LevelWarn {
		b.WriteString(r.Level.String() + " ")
	}
	b.WriteString(r.Message)
	add := func(a slog.Attr) {
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteByte(' ')
		if h.group != "" {
			b.WriteString(h.group + ".")
		}
		v := a.Value.Resolve().String()
		if strings.ContainsAny(v, " \"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(a.Key + "=" + v)
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	h.logf("%s", b.String())
	return nil
}

func (h *logfHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logfHandler{logf: h.logf, attrs: append(append([]slog.Attr(nil), h.attrs...), as...), group: h.group}
}

func (h *logfHandler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &logfHandler{logf: h.logf, attrs: h.attrs, group: g}
}

// MaxListed is how many values of a list a log line shows in full.
const MaxListed = 16

// Uints summarises a list for a log line: all of it up to MaxListed values, else "n=16384
// min=0 max=977 sum=123456 first=[...]".
func Uints(xs []uint64) slog.LogValuer { return uintList(xs) }

type uintList []uint64

func (l uintList) LogValue() slog.Value {
	if len(l) <= MaxListed {
		return slog.StringValue(fmt.Sprint([]uint64(l)))
	}
	lo, hi, sum := l[0], l[0], uint64(0)
	for _, x := range l {
		lo, hi, sum = min(lo, x), max(hi, x), sum+x
	}
	return slog.StringValue(fmt.Sprintf("n=%d min=%d max=%d sum=%d first=%v...", len(l), lo, hi, sum, []uint64(l[:8])))
}

// Ints is Uints for ints.
func Ints(xs []int) slog.LogValuer { return intList(xs) }

type intList []int

func (l intList) LogValue() slog.Value {
	if len(l) <= MaxListed {
		return slog.StringValue(fmt.Sprint([]int(l)))
	}
	lo, hi := l[0], l[0]
	for _, x := range l {
		lo, hi = min(lo, x), max(hi, x)
	}
	return slog.StringValue(fmt.Sprintf("n=%d min=%d max=%d first=%v...", len(l), lo, hi, []int(l[:8])))
}

// Strings summarises a list of strings: all of them up to MaxListed, else the count and the first few.
func Strings(xs []string) slog.LogValuer { return stringList(xs) }

type stringList []string

func (l stringList) LogValue() slog.Value {
	if len(l) <= MaxListed {
		return slog.StringValue(strings.Join(l, ","))
	}
	return slog.StringValue(fmt.Sprintf("n=%d first=%s...", len(l), strings.Join(l[:8], ",")))
}
