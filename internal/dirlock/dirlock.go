// Package dirlock keeps one process at a time on a data directory.
//
// A broker's data directory holds JetStream's files and the role credentials; two embedded
// servers on one directory each believe they own the files, and answer differently (issue 16
// found exactly that). Acquire takes an exclusive flock(2) on <dir>/LOCK and writes who holds it
// (pid, command line, start time) into the file; a second Acquire, from this process or another,
// fails at once with a *HeldError naming that holder. The kernel drops a flock when its holder
// exits, however it exits, so a crashed holder never blocks the next start: there is no stale
// lock to clean up (the holder text left in the file is then simply overwritten).
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FileName is the lock file inside the directory.
const FileName = "LOCK"

// Holder describes the process that holds a lock, as it wrote it when it took the lock.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Host    string    `json:"host,omitempty"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d", h.PID)
	if h.Host != "" {
		s += " on " + h.Host
	}
	if h.Command != "" {
		s += fmt.Sprintf(" (%s)", h.Command)
	}
	if !h.Started.IsZero() {
		s += ", started " + h.Started.Format(time.RFC3339)
	}
	return s
}

// ErrHeld is what a *HeldError wraps: the directory is locked by another holder.
var ErrHeld = errors.New("data directory in use")

// HeldError is returned by Acquire when another process (or another Acquire in this one) holds
// the lock.
type HeldError struct {
	Dir    string
	Holder Holder // zero when the holder has not written itself yet
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.Holder.PID != 0 {
		who = e.Holder.String()
	}
	return fmt.Sprintf("%v: %s is locked by %s; stop that broker first, or give this one another --data directory", ErrHeld, e.Dir, who)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held lock. Release it with Release; the kernel releases it when the process exits.
type Lock struct {
	f *os.File
}

// Acquire locks dir (which must exist) for this process, or fails at once with *HeldError.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flock(f); err != nil {
		defer f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, &HeldError{Dir: dir, Holder: readHolder(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	host, _ := os.Hostname()
	h := Holder{PID: os.Getpid(), Command: commandLine(), Started: time.Now().UTC().Truncate(time.Millisecond), Host: host}
	body, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(append(body, '\n'), 0)
		_ = f.Sync()
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. It is idempotent. The file stays (removing it would race with the
// next holder opening it).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	_ = f.Truncate(0)
	unflock(f)
	return f.Close()
}

// ReadHolder returns who holds (or last held) dir's lock, as written in the lock file.
func ReadHolder(dir string) Holder { return readHolder(filepath.Join(dir, FileName)) }

func readHolder(path string) Holder {
	var h Holder
	b, err := os.ReadFile(path)
	if err == nil {
		_ = json.Unmarshal(b, &h)
	}
	return h
}

// commandLine is this process's command line, shortened to something one log line can carry.
func commandLine() string {
	s := strings.Join(os.Args, " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
