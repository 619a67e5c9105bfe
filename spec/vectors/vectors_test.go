package vectors_test

import (
	"encoding/binary"
	"testing"

	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/spec/vectors"
)

// TestEveryBuiltinHasVectors: the conformance checker verifies a "compatible:<builtin>" claim on
// these files, so each built-in of spec/builtins.md needs one, and each must load.
func TestEveryBuiltinHasVectors(t *testing.T) {
	names := vectors.Names()
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, b := range builtin.All() {
		if !have[b.Name] {
			t.Errorf("no %s.json in spec/vectors", b.Name)
			continue
		}
		f, err := vectors.Load(b.Name)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Cases) == 0 || f.Source == "" {
			t.Fatalf("%s: %d cases, source %q", b.Name, len(f.Cases), f.Source)
		}
		// Spot-check the loader against the native code (the full comparison is
		// partitioner/builtin's TestReferenceVectors).
		for _, c := range f.Cases[:50] {
			if got := b.Func(c.Key, c.N); got != c.Partition {
				t.Fatalf("%s: key %x n=%d: native %d, vector %d", b.Name, c.Key, c.N, got, c.Partition)
			}
		}
	}
	if len(names) != len(builtin.All()) {
		t.Errorf("vector files for %v; built-ins are %d", names, len(builtin.All()))
	}
}

func TestLoadRefusesNonPartitioners(t *testing.T) {
	for _, name := range []string{"wasi-random", "nope", "../abi-v1", ""} {
		if _, err := vectors.Load(name); err == nil {
			t.Errorf("Load(%q) succeeded", name)
		}
	}
}

func TestWASIRandom(t *testing.T) {
	w, err := vectors.LoadWASIRandom()
	if err != nil {
		t.Fatal(err)
	}
	if w.State0 != 0 || len(w.Outputs) != 8 || len(w.Bytes) != 64 || w.Outputs[0] != 0xe220a8397b1dcdaf {
		t.Fatalf("unexpected %+v", w)
	}
	for i, o := range w.Outputs {
		if got := binary.LittleEndian.Uint64(w.Bytes[8*i:]); got != o {
			t.Fatalf("output %d: bytes give %#x, outputs say %#x", i+1, got, o)
		}
	}
}
