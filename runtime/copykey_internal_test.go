package runtime

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestCopyKeyEveryLength: the call sites' copy of a key into guest memory (copyShort, else
// copyKey) writes exactly the key: every length from 0 to 100 bytes, then 255, 4096 and
// MaxKeyBytes, at every offset 0 to 7 of the destination, gives the source bytes (compared with
// bytes.Equal, independent of the word copies) and leaves every byte after the key as it was
// (the next key of a batch starts there).
func TestCopyKeyEveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 6))
	lengths := []int{255, 4096, MaxKeyBytes}
	for n := 0; n <= 100; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for at := 0; at < 8; at++ {
			dst := bytes.Repeat([]byte{0xa5}, at+n+40)
			d := dst[at:]
			if !copyShort(d, src) {
				copyKey(d, src)
			}
			if !bytes.Equal(d[:n], src) {
				t.Fatalf("len %d at offset %d: copied %x, want %x", n, at, d[:n], src)
			}
			for i, b := range dst[at+n:] {
				if b != 0xa5 {
					t.Fatalf("len %d at offset %d: byte %d after the key was overwritten (%#x)", n, at, i, b)
				}
			}
			for i, b := range dst[:at] {
				if b != 0xa5 {
					t.Fatalf("len %d at offset %d: byte %d before the key was overwritten (%#x)", n, at, i, b)
				}
			}
		}
	}
}
