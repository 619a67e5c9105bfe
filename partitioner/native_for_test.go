package partitioner_test

import (
	"testing"

	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// TestNativeFor: the native fast path (spec/builtins.md) is taken for exactly the embedded
// built-ins' digests without config, and for nothing else: not with a config, not for the other
// builds of kafka-murmur2 (uploads that claim compatible:kafka-murmur2, with digests of their
// own), not for an unknown digest. The agreement of the native implementations with the modules
// is TestWASMAgreesWithNative's.
func TestNativeFor(t *testing.T) {
	for _, name := range plugins.BuiltinNames() {
		wasm, _ := plugins.Builtin(name)
		d := runtime.Digest(wasm)
		p, ok := partitioner.NativeFor(d, nil)
		if !ok || p.Name() != name || p.Digest() != d {
			t.Fatalf("%s (%s): NativeFor gave %v, %v", name, d, p, ok)
		}
		if _, ok := partitioner.NativeFor(d, []byte("seed=1")); ok {
			t.Errorf("%s with a config: took the native path", name)
		}
	}
	for toolchain, wasm := range plugins.Murmur2Builds() {
		if toolchain == "c" {
			continue // that build is the built-in
		}
		if p, ok := partitioner.NativeFor(runtime.Digest(wasm), nil); ok {
			t.Errorf("kafka-murmur2 built with %s (a module claiming compatibility, digest %s): took the native path (%s)", toolchain, runtime.Digest(wasm), p.Name())
		}
	}
	if _, ok := partitioner.NativeFor("0000000000000000000000000000000000000000000000000000000000000000", nil); ok {
		t.Error("an unknown digest took the native path")
	}
}
