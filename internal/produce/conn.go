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
// OnViolation and OnConnEvent: the connection's handlers call Violation and ConnEvent.
type Listeners struct {
	mu   sync.Mutex
	next int
	v    map[int]func(subject string)
	c    map[int]func(connected bool)
}

// OnViolation registers f for permission violations; the returned func removes it.
func (l *Listeners) OnViolation(f func(subject string)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.v == nil {
		l.v = map[int]func(string){}
	}
	id := l.next
	l.next++
	l.v[id] = f
	return func() {
		l.mu.Lock()
		delete(l.v, id)
		l.mu.Unlock()
	}
}

// OnConnEvent registers f for disconnects (false) and reconnects (true); the returned func
// removes it.
func (l *Listeners) OnConnEvent(f func(connected bool)) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		l.c = map[int]func(bool){}
	}
	id := l.next
	l.next++
	l.c[id] = f
	return func() {
		l.mu.Lock()
		delete(l.c, id)
		l.mu.Unlock()
	}
}

// Violation tells the violation listeners (outside the lock).
func (l *Listeners) Violation(subject string) {
	l.mu.Lock()
	fs := make([]func(string), 0, len(l.v))
	for _, f := range l.v {
		fs = append(fs, f)
	}
	l.mu.Unlock()
	for _, f := range fs {
		f(subject)
	}
}

// ConnEvent tells the connection listeners (outside the lock).
func (l *Listeners) ConnEvent(connected bool) {
	l.mu.Lock()
	fs := make([]func(bool), 0, len(l.c))
	for _, f := range l.c {
		fs = append(fs, f)
	}
	l.mu.Unlock()
	for _, f := range fs {
		f(connected)
	}
}
