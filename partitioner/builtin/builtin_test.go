package builtin

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"regexp"
	"sort"
	"sync"
	"testing"
)

// testKeys returns count deterministic pseudo-random keys of lengths 0..maxLen.
func testKeys(seed uint64, count, maxLen int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x70637463))
	keys := make([][]byte, count)
	for i := range keys {
		k := make([]byte, r.IntN(maxLen+1))
		for j := range k {
			k[j] = byte(r.Uint32())
		}
		keys[i] = k
	}
	return keys
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`) // abi-v1.md §2.6

func TestRegistry(t *testing.T) {
	all := All()
	want := []string{"jump", "kafka-murmur2", "librdkafka-consistent", "librdkafka-fnv1a", "linear-murmur2", "sarama-fnv1a"}
	if len(all) != len(want) {
		t.Fatalf("All() has %d builtins, want %d", len(all), len(want))
	}
	if !sort.SliceIsSorted(all, func(i, j int) bool { return all[i].Name < all[j].Name }) {
		t.Errorf("All() is not sorted by name")
	}
	for i, b := range all {
		if b.Name != want[i] {
			t.Errorf("All()[%d].Name = %q, want %q", i, b.Name, want[i])
		}
		if !nameRE.MatchString(b.Name) {
			t.Errorf("%q is not a valid metadata name (abi-v1.md §2.6)", b.Name)
		}
		if b.Description == "" || b.Func == nil {
			t.Errorf("%q lacks a description or a Func", b.Name)
		}
		got, ok := Lookup(b.Name)
		if !ok || got.Name != b.Name {
			t.Errorf("Lookup(%q) = %q, %v", b.Name, got.Name, ok)
		}
		hasAncestry := b.Name == "jump" || b.Name == "linear-murmur2"
		if (b.Ancestry != nil) != hasAncestry {
			t.Errorf("%q: Ancestry declared = %v, want %v", b.Name, b.Ancestry != nil, hasAncestry)
		}
	}
	all[0].Name = "mutated"
	if All()[0].Name == "mutated" {
		t.Errorf("All() shares its slice with the registry")
	}
	for _, name := range []string{"", "kafka", "Kafka-murmur2", "zzz", "jump "} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found a builtin", name)
		}
	}
}

func TestRangeOfResults(t *testing.T) {
	keys := testKeys(1, 2000, 100)
	ns := []int32{1, 2, 3, 5, 7, 8, 100, 1 << 16, 1<<30 - 1, 1 << 30, 1<<30 + 1, 0x7ffffffe, 0x7fffffff}
	for _, b := range All() {
		t.Run(b.Name, func(t *testing.T) {
			for _, n := range ns {
				for _, k := range keys {
					if p := b.Func(k, n); p < 0 || p >= n {
						t.Fatalf("%s(%x, %d) = %d, out of [0, n)", b.Name, k, n, p)
					}
				}
			}
		})
	}
}

func TestInvalidNPanics(t *testing.T) {
	for _, b := range All() {
		for _, n := range []int32{0, -1, -2147483648} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s(key, %d) did not panic", b.Name, n)
					}
				}()
				b.Func([]byte("k"), n)
			}()
		}
	}
}

func TestZeroAllocation(t *testing.T) {
	keys := [][]byte{nil, {}, []byte("k"), make([]byte, 16), make([]byte, 64), make([]byte, 1000), make([]byte, 65536)}
	for _, b := range All() {
		t.Run(b.Name, func(t *testing.T) {
			for _, k := range keys {
				allocs := testing.AllocsPerRun(100, func() {
					_ = b.Func(k, 1000)
					_ = b.Func(k, 0x7fffffff)
				})
				if allocs != 0 {
					t.Errorf("%s allocates %.1f times per call for a %d-byte key; a Func must not allocate", b.Name, allocs, len(k))
				}
			}
		})
	}
	if a := testing.AllocsPerRun(100, func() {
		_ = Murmur2(keys[4])
		_ = XXH64(keys[5], 7)
		_ = Jump(12345, 1000)
	}); a != 0 {
		t.Errorf("hash primitives allocate %.1f times per call", a)
	}
}

// TestFNV1aClientsAgree documents a fact the two definitions imply: librdkafka's fnv1a
// (written to match Sarama) and Sarama's NewHashPartitioner give the same partition for
// every key and n, including the INT32_MIN hash. Each has its own vectors all the same.
func TestFNV1aClientsAgree(t *testing.T) {
	rdk, _ := Lookup("librdkafka-fnv1a")
	sar, _ := Lookup("sarama-fnv1a")
	keys := append(testKeys(2, 5000, 40), []byte("1468509572224"))
	for _, n := range []int32{1, 2, 3, 7, 10, 100, 1 << 20, 0x7fffffff} {
		for _, k := range keys {
			if a, b := rdk.Func(k, n), sar.Func(k, n); a != b {
				t.Fatalf("key %x n=%d: librdkafka-fnv1a %d, sarama-fnv1a %d", k, n, a, b)
			}
		}
	}
}

func TestCRCMatchesStdlib(t *testing.T) {
	for _, k := range testKeys(17, 3000, 200) {
		if got, want := crcIEEE(k), crc32.ChecksumIEEE(k); got != want {
			t.Fatalf("crcIEEE(%d bytes %x) = %#x, hash/crc32 says %#x", len(k), k, got, want)
		}
	}
	for n := 0; n < 140; n++ {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte(0xff - i)
		}
		if got, want := crcIEEE(k), crc32.ChecksumIEEE(k); got != want {
			t.Fatalf("crcIEEE(len %d) = %#x, hash/crc32 says %#x", n, got, want)
		}
	}
}

// TestConcurrentUse: a Func is safe for concurrent use (run with -race).
func TestConcurrentUse(t *testing.T) {
	keys := testKeys(19, 300, 80)
	for _, b := range All() {
		want := make([]int32, len(keys))
		for i, k := range keys {
			want[i] = b.Func(k, 977)
		}
		errs := make(chan string, 8)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rep := 0; rep < 20; rep++ {
					for i, k := range keys {
						if got := b.Func(k, 977); got != want[i] {
							errs <- fmt.Sprintf("%s: concurrent call gave %d, sequential %d", b.Name, got, want[i])
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	}
}
