package partitioner_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/internal/rthook"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// BenchmarkPartition measures, for every built-in and for the Go-built kafka-murmur2 (whose code
// uses memory.fill and memory.copy, so it pays the bulk charges of spec/abi-v1.md §7.2; its
// baseline is the native kafka-murmur2), and key lengths 16 and 64:
//
//	native               the Go implementation (the baseline)
//	wasm                 one key per call through an Instance (the producer's hot path), guarded
//	wasm-pool            one key per call through the shared Pool (two atomics more), guarded
//	wasm-batch           4096 keys per crossing, guarded
//	wasm-unguarded       as wasm, on the module without fuel/depth instrumentation
//	wasm-batch-unguarded as wasm-batch, without instrumentation
//
// and prints, at the end, each path's ratio to native and the guard's cost (guarded/unguarded).
// ns/op is per key everywhere.
func BenchmarkPartition(b *testing.B) {
	ctx := context.Background()
	guarded, _ := runtime.New(ctx, runtime.Config{})
	unguarded, _ := runtime.New(rthook.WithUnguarded(ctx), runtime.Config{})
	defer guarded.Close(ctx)
	defer unguarded.Close(ctx)
	results := map[string]float64{} // "plugin/path/keylen" -> ns per key
	type bench struct{ name, native string }
	var benches []bench
	for _, name := range plugins.BuiltinNames() {
		benches = append(benches, bench{name, name})
	}
	benches = append(benches, bench{"kafka-murmur2-go", "kafka-murmur2"})
	for _, bn := range benches {
		name := bn.name
		wasm, ok := plugins.Builtin(name)
		if !ok {
			wasm = plugins.Murmur2Builds()["go"]
		}
		mg, err := guarded.Load(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		mu, err := unguarded.Load(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		pg, _ := partitioner.NewWASM(ctx, mg, nil, runtime.PoolOptions{Size: 1})
		pu, _ := partitioner.NewWASM(ctx, mu, nil, runtime.PoolOptions{Size: 1})
		nat, _ := partitioner.Native(bn.native)
		for _, keyLen := range []int{16, 64} {
			keys := make([][]byte, 4096)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("%0*d", keyLen, i*7919))
			}
			out := make([]int32, len(keys))
			const n = 1000
			record := func(path string, b *testing.B) {
				results[fmt.Sprintf("%s/%s/%d", name, path, keyLen)] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			}
			single := func(path string, p *partitioner.WASM) {
				b.Run(fmt.Sprintf("%s/%s/%d", name, path, keyLen), func(b *testing.B) {
					in, _ := p.Pool().Acquire()
					defer in.Release()
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						if _, err := in.Partition(keys[i&4095], n); err != nil {
							b.Fatal(err)
						}
					}
					record(path, b)
				})
			}
			batch := func(path string, p *partitioner.WASM) {
				b.Run(fmt.Sprintf("%s/%s/%d", name, path, keyLen), func(b *testing.B) {
					in, _ := p.Pool().Acquire()
					defer in.Release()
					b.ReportAllocs()
					for b.Loop() {
						if err := in.PartitionBatch(keys, n, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
					results[fmt.Sprintf("%s/%s/%d", name, path, keyLen)] = float64(b.Elapsed().Nanoseconds()) / float64(b.N*len(keys))
				})
			}
			b.Run(fmt.Sprintf("%s/native/%d", name, keyLen), func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					nat.Partition(keys[i&4095], n)
				}
				record("native", b)
			})
			single("wasm", pg)
			b.Run(fmt.Sprintf("%s/wasm-pool/%d", name, keyLen), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := pg.Partition(keys[i&4095], n); err != nil {
						b.Fatal(err)
					}
				}
				record("wasm-pool", b)
			})
			batch("wasm-batch", pg)
			single("wasm-unguarded", pu)
			batch("wasm-batch-unguarded", pu)
		}
		pg.Close()
		pu.Close()
	}
	printRatios(results)
}

func printRatios(results map[string]float64) {
	var keys []string
	for k := range results {
		if strings.Contains(k, "/native/") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nratios to native (per key; lower is better)            guard cost\n")
	fmt.Fprintf(&sb, "%-28s %7s %7s %7s %7s   %7s %7s\n", "plugin/keylen", "native", "wasm", "pool", "batch", "single", "batch")
	for _, k := range keys {
		parts := strings.Split(k, "/")
		name, kl := parts[0], parts[2]
		get := func(path string) float64 { return results[name+"/"+path+"/"+kl] }
		nat := get("native")
		fmt.Fprintf(&sb, "%-28s %5.1fns %6.2fx %6.2fx %6.2fx   %+6.0f%% %+6.0f%%\n", name+"/"+kl, nat,
			get("wasm")/nat, get("wasm-pool")/nat, get("wasm-batch")/nat,
			100*(get("wasm")/get("wasm-unguarded")-1), 100*(get("wasm-batch")/get("wasm-batch-unguarded")-1))
	}
	fmt.Fprint(os.Stdout, sb.String())
	_ = time.Now
}
