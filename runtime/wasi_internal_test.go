package runtime

import (
	"bytes"
	"testing"

	"pctl.dev/pctl/spec/vectors"
)

// TestRandomStreamMatchesSpec: the deterministic WASI random stream (spec/abi-v1.md §6.2) against
// its first 64 bytes as computed by an independent Python SplitMix64 (spec/vectors/wasi-random.json),
// read in uneven pieces, because a random_get may end in the middle of an output.
func TestRandomStreamMatchesSpec(t *testing.T) {
	v, err := vectors.LoadWASIRandom()
	if err != nil {
		t.Fatal(err)
	}
	want := v.Bytes
	if len(want) < 64 {
		t.Fatalf("vectors carry %d bytes, want 64", len(want))
	}
	for _, sizes := range [][]int{{64}, {1, 2, 3, 5, 7, 11, 13, 22}, {8, 8, 8, 8, 8, 8, 8, 8}, {63, 1}} {
		s := newWASIState(&Config{})
		var got []byte
		for _, n := range sizes {
			p := make([]byte, n)
			s.read(p)
			got = append(got, p...)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("reads of %v: got %x, want %x: every host's Go-built modules would start with other map seeds", sizes, got, want)
		}
	}
}
