//go:build unix

package dirlock

import (
	"os"
	"syscall"
)

var errWouldBlock error = syscall.EWOULDBLOCK

func flock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

func unflock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
