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
			b.r.problem("broker %s did not stop within %v of SIGTERM (its goroutines are in %s)", b.name, grace, b.log)
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
