package docs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// session is one terminal that follows a page: a bash process in a network namespace of its own
// (so the pages' fixed ports, 4222 and the like, are free whatever else runs on the machine),
// working directory the repository copy's root. Every block of the page runs in it, in order:
// shell blocks as they are (sourced, so that exports and background servers carry over to the
// next block, as in a terminal), other languages as the program the block is, started from it.
type session struct {
	root    string // the repository copy
	dir     string // scratch: block files, logs (outside the copy)
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string
	exited  chan struct{}
	waits   int
	timeout time.Duration
}

const prelude = `set -e -o pipefail
ip link set lo up
__doc_wait_ready() { # PID FILE [nats-server]: wait until PID printed a line on stdout (FILE.out), or for a nats-server its "Server is ready" on stderr; fail if it exits
	local i
	for ((i = 0; i < 1200; i++)); do
		if [ -s "$2.out" ] && [ "$(wc -l < "$2.out")" -ge 1 ]; then
			head -n 1 "$2.out"
			return 0
		fi
		if [ "${3:-}" = nats-server ] && grep -q 'Server is ready' "$2.err" 2>/dev/null; then # it logs to stderr
			return 0
		fi
		if ! kill -0 "$1" 2>/dev/null; then
			echo "docs: the background command exited before it was ready; its output:" >&2
			cat "$2.out" "$2.err" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "docs: the background command printed nothing in 60s; its stderr:" >&2
	cat "$2.err" >&2
	return 1
}
__doc_jshell() { # FILE: run a Java block in jshell with the SDK jar; fail on any jshell error
	local cp out
	cp=$(printf '%s:' sdk/java/target/pctl-sdk.jar sdk/java/target/lib/*.jar)
	out="$1.log"
	jshell -q -R-Xss8m --class-path "${cp%:}" "$1" > "$out" 2>&1 || { cat "$out"; return 1; }
	cat "$out"
	if grep -Eq '^\|  (Error|Exception)|^\|  [A-Za-z.]*Exception|Exception in thread' "$out"; then
		echo "docs: jshell reported an error" >&2
		return 1
	fi
}
`

// startSession starts the shell: env is its whole environment.
func startSession(root, dir string, env []string) (*session, error) {
	s := &session{root: root, dir: dir, logPath: filepath.Join(dir, "session.log"), exited: make(chan struct{}), timeout: 3 * time.Minute}
	if err := os.WriteFile(filepath.Join(dir, "prelude.sh"), []byte(prelude), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command("unshare", "-n", "--", "bash", "--noprofile", "--norc")
	s.cmd.Dir = root
	s.cmd.Env = append(env, "__doc_dir="+dir)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.exited) }()
	if err := s.send(fmt.Sprintf("source %q < /dev/null\n", filepath.Join(dir, "prelude.sh")), "prelude"); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// send writes a command line to the shell and waits until it has run: the shell touches a done
// file after it; a failing command ends the shell (set -e).
func (s *session) send(line, name string) error {
	done := filepath.Join(s.dir, name+".done")
	if _, err := io.WriteString(s.stdin, line+fmt.Sprintf(": > %q\n", done)); err != nil {
		return fmt.Errorf("the session has ended: %v", err)
	}
	deadline := time.After(s.timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(done); err == nil {
			return nil
		}
		select {
		case <-s.exited:
			if _, err := os.Stat(done); err == nil {
				return nil
			}
			return fmt.Errorf("it failed (%v)", s.cmd.ProcessState)
		case <-deadline:
			return fmt.Errorf("it did not finish in %v", s.timeout)
		case <-tick.C:
		}
	}
}

// run runs one block. For a failure the error carries the block's output.
func (s *session) run(i int, b Block) error {
	name := fmt.Sprintf("block-%d", i)
	before := s.logSize()
	var line string
	switch b.Runner() {
	case "sh":
		f := filepath.Join(s.dir, name+".sh")
		if err := os.WriteFile(f, []byte(WithReadyWaits(b.Code, &s.waits)), 0o644); err != nil {
			return err
		}
		line = fmt.Sprintf("source %q < /dev/null\n", f)
	case "node":
		// Beside the page (an SDK README's relative imports and its own package name resolve as
		// from its examples); run from the repository root like the shell blocks.
		f := filepath.Join(s.root, filepath.Dir(b.File), fmt.Sprintf(".doc-%s-%d.mjs", strings.TrimSuffix(filepath.Base(b.File), ".md"), i))
		if err := os.WriteFile(f, []byte(b.Code), 0o644); err != nil {
			return err
		}
		line = fmt.Sprintf("node %q < /dev/null\n", f)
	case "python":
		f := filepath.Join(s.dir, name+".py")
		if err := os.WriteFile(f, []byte(b.Code), 0o644); err != nil {
			return err
		}
		line = fmt.Sprintf("sdk/python/.venv/bin/python %q < /dev/null\n", f)
	case "jshell":
		f := filepath.Join(s.dir, name+".jsh")
		if err := os.WriteFile(f, []byte(b.Code+"\n/exit\n"), 0o644); err != nil {
			return err
		}
		line = fmt.Sprintf("__doc_jshell %q < /dev/null\n", f)
	default:
		return nil
	}
	if err := s.send(line, name); err != nil {
		return fmt.Errorf("%s: %v\n--- the block:\n%s--- what it printed:\n%s%s", b, err, b.Code, s.logSince(before), s.backgroundLogs())
	}
	return nil
}

func (s *session) logSize() int64 {
	st, err := os.Stat(s.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

func (s *session) logSince(off int64) string {
	b, _ := os.ReadFile(s.logPath)
	if off > int64(len(b)) {
		off = 0
	}
	b = b[off:]
	if len(b) > 8000 {
		b = append([]byte("...\n"), b[len(b)-8000:]...)
	}
	return string(b)
}

func (s *session) backgroundLogs() string {
	var out bytes.Buffer
	for k := 1; k <= s.waits; k++ {
		for _, ext := range []string{"out", "err"} {
			b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("bg-%d.%s", k, ext)))
			if err == nil && len(b) > 0 {
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				fmt.Fprintf(&out, "--- background command %d, std%s:\n%s\n", k, ext, b)
			}
		}
	}
	return out.String()
}

// close ends the session and everything it started (its process group: the background servers
// too), politely first: SIGTERM lets pctl serve shut its server down.
func (s *session) close() {
	s.stdin.Close()
	pg := -s.cmd.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
	}
	// The shell may be gone while its background processes still stop.
	for i := 0; i < 150; i++ {
		if err := syscall.Kill(pg, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pg, syscall.SIGKILL)
	<-s.exited
}
