package dirlock

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHeldInProcess: a second Acquire of a held directory fails at once, naming this process;
// after Release the directory can be taken again.
func TestHeldInProcess(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	var he *HeldError
	if !errors.As(err, &he) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second Acquire: got %v, want a *HeldError", err)
	}
	if he.Holder.PID != os.Getpid() {
		t.Fatalf("holder pid %d, want this process %d", he.Holder.PID, os.Getpid())
	}
	if !strings.Contains(err.Error(), "pid ") || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("error does not name the holder and what to do: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil { // idempotent
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestHolderProcessAndCrash: a lock held by another process is refused with that process's pid;
// when the process is killed (no chance to clean up) the lock is free at once.
func TestHolderProcessAndCrash(t *testing.T) {
	if os.Getenv("DIRLOCK_HOLD") != "" {
		l, err := Acquire(os.Getenv("DIRLOCK_HOLD"))
		if err != nil {
			os.Exit(3)
		}
		_ = l
		os.Stdout.WriteString("held\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHolderProcessAndCrash$")
	cmd.Env = append(os.Environ(), "DIRLOCK_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("holder did not start: %q %v", buf, err)
	}
	_, err = Acquire(dir)
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("Acquire while another process holds it: %v", err)
	}
	if he.Holder.PID != cmd.Process.Pid {
		t.Fatalf("holder pid %d, want %d (%v)", he.Holder.PID, cmd.Process.Pid, err)
	}
	if !strings.Contains(he.Holder.Command, "TestHolderProcessAndCrash") || he.Holder.Started.IsZero() {
		t.Fatalf("holder without its command or start time: %+v", he.Holder)
	}
	_ = cmd.Process.Kill() // SIGKILL: the holder releases nothing itself
	_ = cmd.Wait()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	l.Release()
}
