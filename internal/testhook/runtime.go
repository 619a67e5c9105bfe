package testhook

// The runtime's switches for tests and benchmarks, kept out of the public API of package runtime
// (issue 12): a context passed to runtime.New carries them.

import "context"

type key int

const (
	unguarded key = iota
	referenceFuel
)

// WithUnguarded returns a context that makes runtime.New run modules without the instrumentation
// that enforces the work and call-depth limits: for benchmarks that measure what the guard costs,
// only (a module that loops then hangs its caller forever).
func WithUnguarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, unguarded, true)
}

// Unguarded reports whether ctx was made by WithUnguarded.
func Unguarded(ctx context.Context) bool {
	v, _ := ctx.Value(unguarded).(bool)
	return v
}

// WithReferenceFuel returns a context that makes runtime.New instrument modules with the
// reference rewriting of spec/abi-v1.md §7.2 (the fuel in the global at every charge, the bytes
// the other hosts produce) instead of the fuel kept in a local: tests compare the two counts.
func WithReferenceFuel(ctx context.Context) context.Context {
	return context.WithValue(ctx, referenceFuel, true)
}

// ReferenceFuel reports whether ctx was made by WithReferenceFuel.
func ReferenceFuel(ctx context.Context) bool {
	v, _ := ctx.Value(referenceFuel).(bool)
	return v
}
