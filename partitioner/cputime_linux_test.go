package partitioner_test

import "syscall"

// threadCPU returns the CPU time the calling OS thread has used, in nanoseconds, and true
// (getrusage RUSAGE_THREAD). On a machine shared with other work it excludes the time the thread
// waited for a core, which wall-clock ns/op does not.
func threadCPU() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
