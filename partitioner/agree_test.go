package partitioner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// The partition counts every agreement test covers, from spec/abi-v1.md's range.
var agreeNs = []int32{1, 2, 3, 7, 8, 16, 31, 100, 1000, 65535, 2147483647}

// randomKeys returns count seeded random keys of 0 to 300 bytes, in one arena.
func randomKeys(seed uint64, count int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x70637466))
	keys := make([][]byte, count)
	arena := make([]byte, 0, count*151)
	for i := range keys {
		n := r.IntN(301)
		start := len(arena)
		for j := 0; j < n; j++ {
			arena = append(arena, byte(r.Uint32()))
		}
		keys[i] = arena[start:len(arena):len(arena)]
	}
	return keys
}

func newLib(t testing.TB, engine runtime.Engine) *partitioner.Library {
	t.Helper()
	rt, err := runtime.New(context.Background(), runtime.Config{Engine: engine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return partitioner.NewLibrary(rt)
}

// agreeKeys is the number of random keys of the WASM-vs-native agreement test (the issue asks
// for at least a million); each key is checked against every n in agreeNs.
const agreeKeys = 1_000_000

// TestWASMAgreesWithNative: for every built-in, its WebAssembly module and its Go implementation
// give the same partition for a million random keys (0-300 bytes) and every n in agreeNs. The Go
// implementations are themselves pinned to the real clients by spec/vectors (partitioner/builtin).
// A failure here means the shipped module remaps keys relative to the reference.
func TestWASMAgreesWithNative(t *testing.T) {
	count := agreeKeys
	if raceEnabled {
		count = agreeKeys / 50
	}
	keys := randomKeys(1, count)
	lib := newLib(t, runtime.EngineCompiler)
	for _, name := range plugins.BuiltinNames() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, err := lib.Open(context.Background(), name, nil, runtime.PoolOptions{Size: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			nat, err := partitioner.Native(name)
			if err != nil {
				t.Fatal(err)
			}
			if w.Digest() != nat.Digest() || w.Name() != nat.Name() {
				t.Fatalf("WASM %s/%s vs native %s/%s", w.Name(), w.Digest(), nat.Name(), nat.Digest())
			}
			got := make([]int32, len(keys))
			for _, n := range agreeNs {
				if err := w.PartitionBatch(keys, n, got); err != nil {
					t.Fatal(err)
				}
				for i, k := range keys {
					want, _ := nat.Partition(k, n)
					if got[i] != want {
						t.Fatalf("n=%d key=%x: wasm %d, native %d: the module remaps keys relative to the reference", n, k, got[i], want)
					}
				}
			}
			// Single calls take another path through the module (pctl_partition, not the batch export).
			for i, k := range keys[:20000] {
				n := agreeNs[i%len(agreeNs)]
				r, err := w.Partition(k, n)
				want, _ := nat.Partition(k, n)
				if err != nil || r != want {
					t.Fatalf("single call n=%d key=%x: wasm %d (%v), native %d", n, k, r, err, want)
				}
			}
		})
	}
}

// TestMurmur2Builds: kafka-murmur2 built by four toolchains (C, Go, AssemblyScript, Rust) gives
// identical results to each other and to the native reference, on both wazero engines.
func TestMurmur2Builds(t *testing.T) {
	nat, _ := partitioner.Native("kafka-murmur2")
	for _, engine := range []runtime.Engine{runtime.EngineCompiler, runtime.EngineInterpreter} {
		count := 100_000 // the interpreter is ~30x slower: it gets a tenth
		if engine == runtime.EngineInterpreter {
			count = 10_000
		}
		if raceEnabled {
			count /= 20
		}
		keys := randomKeys(2, count)
		lib := newLib(t, engine)
		for _, toolchain := range sortedBuilds() {
			t.Run(fmt.Sprintf("%s/%s", engine, toolchain), func(t *testing.T) {
				b := plugins.Murmur2Builds()[toolchain]
				d := lib.Add(b)
				w, err := lib.Open(context.Background(), "sha256:"+d, nil, runtime.PoolOptions{Size: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if !hasCompat(w.Module().Metadata.Properties, "kafka-murmur2") {
					t.Errorf("metadata %+v does not claim compatible:kafka-murmur2", w.Module().Metadata)
				}
				got := make([]int32, len(keys))
				for _, n := range agreeNs {
					if err := w.PartitionBatch(keys, n, got); err != nil {
						t.Fatal(err)
					}
					for i, k := range keys {
						if want, _ := nat.Partition(k, n); got[i] != want {
							t.Fatalf("%s build, n=%d key=%x: %d, native %d", toolchain, n, k, got[i], want)
						}
					}
				}
			})
		}
	}
}

func sortedBuilds() []string {
	var out []string
	for k := range plugins.Murmur2Builds() {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func hasCompat(props []string, name string) bool {
	for _, p := range props {
		if p == "compatible:"+name {
			return true
		}
	}
	return false
}

// TestAncestryWASMMatchesNative: the declared ancestry of the linear-murmur2 and jump modules equals
// the native implementation's for many (from, to, child), growing and shrinking.
func TestAncestryWASMMatchesNative(t *testing.T) {
	lib := newLib(t, runtime.EngineCompiler)
	r := rand.New(rand.NewPCG(3, 3))
	for _, name := range []string{"jump", "linear-murmur2"} {
		t.Run(name, func(t *testing.T) {
			w, err := lib.Open(context.Background(), name, nil, runtime.PoolOptions{Size: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			nat, _ := partitioner.Native(name)
			// Includes pairs whose exact linear-hashing answer needs more than PCTL_MAX_RANGES
			// ranges (1<<20 -> 3): every host must then declare the same coarser set.
			pairs := [][2]int32{{1, 2}, {2, 3}, {3, 4}, {4, 8}, {8, 4}, {7, 5}, {16, 17}, {100, 1}, {1, 100}, {1000, 1500}, {65535, 65536}, {2147483647, 2}, {1 << 20, 3}, {1 << 20, 5}, {70000, 4}, {1 << 30, 1 << 29}}
			for i := 0; i < 300; i++ {
				pairs = append(pairs, [2]int32{1 + r.Int32N(5000), 1 + r.Int32N(5000)})
			}
			for _, p := range pairs {
				children := []int32{0, p[1] - 1, p[1] / 2}
				for _, c := range children {
					got, gerr := w.Ancestry(p[0], p[1], c)
					want, werr := nat.Ancestry(p[0], p[1], c)
					if (gerr != nil) != (werr != nil) {
						t.Fatalf("%v child %d: wasm err %v, native err %v", p, c, gerr, werr)
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("%d->%d child %d: wasm %v, native %v", p[0], p[1], c, got, want)
					}
				}
			}
		})
	}
}
