package cputime

import "syscall"

// Thread returns the CPU time the calling OS thread has used, in nanoseconds, and true
// (getrusage RUSAGE_THREAD).
func Thread() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
