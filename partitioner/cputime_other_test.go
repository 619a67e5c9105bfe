//go:build !linux

package partitioner_test

// threadCPU: no per-thread CPU clock here; the benchmarks fall back to wall-clock time.
func threadCPU() (int64, bool) { return 0, false }
