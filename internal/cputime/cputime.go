// Package cputime reads the CPU time of the calling thread, for benchmarks on a machine shared
// with other work: unlike wall-clock time it leaves out the time the thread waited for a core.
// The caller locks its goroutine to the thread (runtime.LockOSThread) around what it measures.
package cputime
