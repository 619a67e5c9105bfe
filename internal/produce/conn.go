package produce

import (
	"errors"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

var violationRE = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// ViolationSubject returns the subject of a NATS permissions violation error (what a
// connection's async error handler receives), ok false for any other error.
func ViolationSubject(err error) (subject string, ok bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	m := violationRE.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[2], true
}

// Listeners is a registry of a connection's violation and connection listeners, for a Conn's
// OnViolation and OnConnEvent: the connection's handlers call Violation and ConnEvent. Listeners
// are called outside the registry's lock.
type Listeners struct {
	mu   sync.Mutex
	next int
	v    map[int]func(subject string)
	c    map[int]func(connected bool)
}

// OnViolation registers f for permission violations; the returned func removes it.
func (l *Listeners) OnViolation(f func(subject string)) func() { return add(l, &l.v, f) }

// OnConnEvent registers f for disconnects (false) and reconnects (true); the returned func
// removes it.
func (l *Listeners) OnConnEvent(f func(connected bool)) func() { return add(l, &l.c, f) }

// Violation tells the violation listeners.
func (l *Listeners) Violation(subject string) {
	for _, f := range snapshot(l, &l.v) {
		f(subject)
	}
}

// ConnEvent tells the connection listeners.
func (l *Listeners) ConnEvent(connected bool) {
	for _, f := range snapshot(l, &l.c) {
		f(connected)
	}
}

// Count returns how many violation and connection listeners are registered.
func (l *Listeners) Count() (violation, conn int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.v), len(l.c)
}

func add[F any](l *Listeners, m *map[int]F, f F) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if *m == nil {
		*m = map[int]F{}
	}
	id := l.next
	l.next++
	(*m)[id] = f
	return func() {
		l.mu.Lock()
		delete(*m, id)
		l.mu.Unlock()
	}
}

func snapshot[F any](l *Listeners, m *map[int]F) []F {
	l.mu.Lock()
	defer l.mu.Unlock()
	fs := make([]F, 0, len(*m))
	for _, f := range *m {
		fs = append(fs, f)
	}
	return fs
}
