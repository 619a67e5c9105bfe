package natscluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// setDeathSignal makes the kernel kill a node when the process that started it dies, so that a
// crashed test leaves no nodes behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits (up to a second) until the kernel reports the process stopped (SIGSTOP has
// taken effect) or not: a signal is delivered asynchronously, and a fault that has not begun
// yet must not be reported as begun.
func waitStopped(pid int, stopped bool) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name in parentheses, which may contain spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) {
			return
		}
		st := s[i+2]
		if (st == 'T' || st == 't') == stopped {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
