package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// brokerProc is one 'pctl serve --nats' process.
type brokerProc struct {
	r    *run
	name string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}

	// faultMu is held by a fault on this broker from its kill to the end of its restart: two
	// kill-broker faults that ride on one change may draw the same broker, and the second must
	// kill the process the first restarted, not start a second process on the first's data
	// directory (seed 210: the directory's lock refused it for 20 s, and the run failed).
	faultMu sync.Mutex
}

func (r *run) startBroker(i int) (*brokerProc, error) {
	name := fmt.Sprintf("b%d", i+1)
	dir := filepath.Join(r.cfg.Dir, "broker-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "serve.json")
	if err := os.WriteFile(conf, []byte(`{"replicas": 3}`+"\n"), 0o600); err != nil {
		return nil, err
	}
	b := &brokerProc{r: r, name: name, log: filepath.Join(r.cfg.Dir, name+".log"),
		args: []string{"serve", "--nats", r.cluster.ClientURLs(), "--creds", r.cluster.Creds(), "--data", filepath.Join(dir, "data"), "--config", conf}}
	if err := b.start(); err != nil {
		return nil, err
	}
	return b, nil
}

// start starts the process and waits for its ready line.
func (b *brokerProc) start() error {
	lf, err := os.OpenFile(b.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "=== chaos: starting %s at %s\n", b.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(b.r.cluster.Bin(), b.args...)
	cmd.Stderr = lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start broker %s: %w", b.name, err)
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "pctl: broker ready") {
				close(ready)
			}
		}
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(done)
	}()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()
	select {
	case <-ready:
		b.r.cfg.Logf("chaos: broker %s ready (pid %d)", b.name, cmd.Process.Pid)
		return nil
	case <-done:
		return fmt.Errorf("broker %s exited while starting; its log %s ends:\n%s", b.name, b.log, tail(b.log, 10))
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("broker %s not ready within 60s; its log %s ends:\n%s", b.name, b.log, tail(b.log, 10))
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (b *brokerProc) kill() { b.signal(syscall.SIGKILL, 0) }

// close stops the broker cleanly (SIGTERM), killing it after 15s.
func (b *brokerProc) close() { b.signal(syscall.SIGTERM, 15*time.Second) }

func (b *brokerProc) signal(sig syscall.Signal, grace time.Duration) {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			// SIGQUIT makes the Go runtime write every goroutine's stack to the log: where it hangs.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(3 * time.Second):
			}
			b.r.problem("broker %s did not stop within %v of SIGTERM (its goroutines are in %s); where pctl's goroutines were:\n%s", b.name, grace, b.log, pctlStacks(b.log, 80))
			_ = cmd.Process.Kill()
		}
	}
	<-done
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pctlStacks summarises the goroutine dump SIGQUIT wrote at the end of a broker's log, for a
// failure message (the log itself lives in the run's temporary directory, gone after a CI run):
// the goroutines with a frame in pctl's code, identical stacks counted once, at most max lines.
func pctlStacks(path string, max int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	text := string(data)
	if i := strings.Index(text, "\ngoroutine "); i >= 0 {
		text = text[i+1:]
	} else {
		return "(no goroutine dump in the log)"
	}
	type stack struct {
		head  string // "goroutine N [state, minutes]:" without its number
		body  string
		count int
	}
	var order []string
	seen := map[string]*stack{}
	for _, g := range strings.Split(text, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") || !strings.Contains(g, "pctl.dev/pctl/") {
			continue
		}
		head := lines[0]
		if i := strings.Index(head, " ["); i >= 0 {
			head = head[i+1:]
		}
		var frames []string
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") {
				continue // function lines only (not their file:line), the runtime's left out
			}
			if i := strings.LastIndex(l, "("); i > 0 && strings.HasSuffix(l, ")") {
				l = l[:i] // without the arguments, so that identical stacks compare equal
			}
			if i := strings.Index(l, " in goroutine "); i > 0 {
				l = l[:i]
			}
			frames = append(frames, "  "+l)
		}
		body := strings.Join(frames, "\n")
		key := head + body
		if st, ok := seen[key]; ok {
			st.count++
			continue
		}
		seen[key] = &stack{head: head, body: body, count: 1}
		order = append(order, key)
	}
	if len(order) == 0 {
		return "(no goroutine with a frame in pctl's code)"
	}
	var out []string
	for _, k := range order {
		st := seen[k]
		out = append(out, fmt.Sprintf("%d x %s", st.count, st.head))
		out = append(out, strings.Split(st.body, "\n")...)
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("... (%d lines more)", len(out)-max))
	}
	return strings.Join(out, "\n")
}
