//go:build !linux

package cputime

// Thread: no per-thread CPU clock here; callers fall back to wall-clock time.
func Thread() (int64, bool) { return 0, false }
