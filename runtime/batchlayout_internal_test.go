package runtime

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"testing"

	"pctl.dev/pctl/internal/cputime"
)

// TestLayBatchLayout: layBatch writes exactly spec/abi-v1.md §2.4's layout (count little-endian
// u32 lengths, then the keys back to back), built here independently with append, for batches
// of every key length from 0 to 40 bytes (the word copies' edges: 4, 8, 16, 32), mixed with 255,
// 4096 and MaxKeyBytes, in random order; it leaves every byte after the layout as it was; a
// buffer that fits the layout to the byte is enough, and one byte less makes it panic before it
// writes past the buffer.
func TestLayBatchLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 61))
	key := func(n int) []byte {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte(r.Uint32())
		}
		return k
	}
	batches := map[string][][]byte{"no keys": nil}
	var every [][]byte
	for n := 0; n <= 40; n++ {
		every = append(every, key(n))
		batches[fmt.Sprintf("one key of %d bytes", n)] = [][]byte{key(n)}
	}
	batches["every length 0-40"] = every
	var mixed [][]byte
	for range 500 {
		mixed = append(mixed, key(r.IntN(41)))
	}
	mixed = append(mixed, key(255), key(4096), key(MaxKeyBytes), key(16))
	r.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	batches["mixed lengths"] = mixed
	var sixteen [][]byte
	for range 4096 {
		sixteen = append(sixteen, key(16))
	}
	batches["4096 keys of 16 bytes"] = sixteen

	for name, keys := range batches {
		var want []byte
		for _, k := range keys {
			want = binary.LittleEndian.AppendUint32(want, uint32(len(k)))
		}
		for _, k := range keys {
			want = append(want, k...)
		}
		buf := bytes.Repeat([]byte{0xa5}, len(want)+40)
		layBatch(buf, keys)
		if !bytes.Equal(buf[:len(want)], want) {
			for i := range want {
				if buf[i] != want[i] {
					t.Fatalf("%s: byte %d of the layout is %#x, want %#x", name, i, buf[i], want[i])
				}
			}
		}
		for i, b := range buf[len(want):] {
			if b != 0xa5 {
				t.Fatalf("%s: byte %d after the layout was overwritten (%#x)", name, i, b)
			}
		}
		exact := make([]byte, len(want))
		layBatch(exact, keys)
		if !bytes.Equal(exact, want) {
			t.Fatalf("%s: in a buffer of exactly the layout's size, the layout differs", name)
		}
		if len(want) > 0 {
			short := make([]byte, len(want)-1+40)
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("%s: a buffer one byte short of the layout did not panic", name)
					}
				}()
				layBatch(short[:len(want)-1], keys)
			}()
			for i, b := range short[len(want)-1:] {
				if b != 0 {
					t.Fatalf("%s: a buffer one byte short: byte %d past it was written (%#x)", name, i, b)
				}
			}
		}
	}
}

// TestReadBatchResults: readBatch copies results in [0, n) and stops at the first one outside,
// n itself and a negative i32 included, returning its index with out written up to it.
func TestReadBatchResults(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name    string
		results []uint32
		bad     int
	}{
		{"all in range", []uint32{0, 1, 999, 500}, -1},
		{"none", nil, -1},
		{"n itself", []uint32{0, 999, n, 3}, 2},
		{"negative", []uint32{0xffffffff, 1}, 0},
		{"the last, far out", []uint32{7, 8, 1 << 31}, 2},
	} {
		v := make([]byte, 4*len(tc.results)+8)
		for i, r := range tc.results {
			binary.LittleEndian.PutUint32(v[4*i:], r)
		}
		out := make([]int32, len(tc.results))
		for i := range out {
			out[i] = -7
		}
		if got := readBatch(v, n, out); got != tc.bad {
			t.Fatalf("%s: readBatch returned %d, want %d", tc.name, got, tc.bad)
		}
		upTo := len(out)
		if tc.bad >= 0 {
			upTo = tc.bad
		}
		for i := range out {
			want := int32(-7)
			if i < upTo {
				want = int32(tc.results[i])
			}
			if out[i] != want {
				t.Fatalf("%s: out[%d] = %d, want %d", tc.name, i, out[i], want)
			}
		}
	}
}

// laySlices is the batch path's layout loop before layBatch (slices, bounds-checked): the
// baseline of BenchmarkLayBatch.
func laySlices(v []byte, keys [][]byte) {
	off := 4 * len(keys)
	lens := v[:off]
	for i, k := range keys {
		le.PutUint32(lens[4*i:], uint32(len(k)))
		if !copyShort(v[off:], k) {
			copyKey(v[off:], k)
		}
		off += len(k)
	}
}

// BenchmarkLayBatch measures the host's layout pass alone, 4096 keys of 16 bytes (the batch of
// partitioner's BenchmarkPartition) into a 1 MiB buffer, with layBatch and with the slice loop
// it replaced, per key in the thread's CPU time where there is a thread clock.
func BenchmarkLayBatch(b *testing.B) {
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("%016d", i*7919))
	}
	v := make([]byte, 1<<20)
	for _, bc := range []struct {
		name string
		lay  func([]byte, [][]byte)
	}{{"layBatch", layBatch}, {"slices", laySlices}} {
		b.Run(bc.name, func(b *testing.B) {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			c0, cpu := cputime.Thread()
			for b.Loop() {
				bc.lay(v, keys)
			}
			c1, _ := cputime.Thread()
			if cpu {
				b.ReportMetric(float64(c1-c0)/float64(b.N*len(keys)), "cpu-ns/key")
			}
		})
	}
}
