package builtin

import (
	"fmt"
	"testing"
)

// BenchmarkBuiltins is the native baseline of the "WASM ≤ 6× native" comparison. Each
// iteration partitions the next of 256 distinct keys of the given size among 1000
// partitions: with one fixed key, jump's loop count (about ln n, data-dependent) and the
// branch predictor would measure that key rather than the partitioner.
func BenchmarkBuiltins(b *testing.B) {
	for _, bi := range All() {
		for _, size := range []int{16, 64, 1024} {
			keys := testKeysOfSize(256, size)
			b.Run(fmt.Sprintf("%s/%dB", bi.Name, size), func(b *testing.B) {
				f := bi.Func
				b.SetBytes(int64(size))
				b.ReportAllocs()
				var sink int32
				i := 0
				for b.Loop() {
					sink += f(keys[i&255], 1000)
					i++
				}
				_ = sink
			})
		}
	}
}

// testKeysOfSize returns count deterministic keys of exactly size bytes.
func testKeysOfSize(count, size int) [][]byte {
	keys := testKeys(uint64(size), count, 0)
	for i := range keys {
		keys[i] = make([]byte, size)
		for j := range keys[i] {
			keys[i][j] = byte((i+1)*(j+7)*131 + i>>3)
		}
	}
	return keys
}

func BenchmarkPrimitives(b *testing.B) {
	key := make([]byte, 64)
	b.Run("Murmur2/64B", func(b *testing.B) {
		for b.Loop() {
			Murmur2(key)
		}
	})
	b.Run("XXH64/64B", func(b *testing.B) {
		for b.Loop() {
			XXH64(key, 0)
		}
	})
	b.Run("Jump/n=1000", func(b *testing.B) {
		var k uint64
		for b.Loop() {
			k++
			Jump(k, 1000)
		}
	})
}
