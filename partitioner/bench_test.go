package partitioner_test

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/internal/cputime"
	"pctl.dev/pctl/internal/testhook"
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
//	wasm-ref, wasm-batch-ref as wasm and wasm-batch, with the reference rewriting of
//	                     spec/abi-v1.md §7.2 (the fuel in a global at every charge, as the other
//	                     hosts run) instead of the Go host's fuel in a local
//
// and prints, at the end, each path's ratio to native and the guard's cost (guarded/unguarded).
// ns/op is per key everywhere. On Linux each benchmark also reports cpu-ns/op, the CPU time of
// its (locked) thread per key, and the ratios use it: on a machine shared with other work it
// leaves out the time spent waiting for a core.
func BenchmarkPartition(b *testing.B) {
	ctx := context.Background()
	guarded, _ := runtime.New(ctx, runtime.Config{})
	unguarded, _ := runtime.New(testhook.WithUnguarded(ctx), runtime.Config{})
	reference, _ := runtime.New(testhook.WithReferenceFuel(ctx), runtime.Config{})
	defer guarded.Close(ctx)
	defer unguarded.Close(ctx)
	defer reference.Close(ctx)
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
		mr, err := reference.Load(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		pg, _ := partitioner.NewWASM(ctx, mg, nil, runtime.PoolOptions{Size: 1})
		pu, _ := partitioner.NewWASM(ctx, mu, nil, runtime.PoolOptions{Size: 1})
		pr, _ := partitioner.NewWASM(ctx, mr, nil, runtime.PoolOptions{Size: 1})
		nat, _ := partitioner.Native(bn.native)
		for _, keyLen := range []int{16, 64} {
			keys := make([][]byte, 4096)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("%0*d", keyLen, i*7919))
			}
			out := make([]int32, len(keys))
			const n = 1000
			// run runs loop as the benchmark name/path/keyLen and records its time per key (CPU
			// time where there is a thread clock), keysPerOp keys per iteration.
			run := func(path string, keysPerOp int, loop func(b *testing.B)) {
				b.Run(fmt.Sprintf("%s/%s/%d", name, path, keyLen), func(b *testing.B) {
					goruntime.LockOSThread()
					defer goruntime.UnlockOSThread()
					c0, cpu := cputime.Thread()
					loop(b)
					c1, _ := cputime.Thread()
					keys := float64(b.N * keysPerOp)
					perKey := float64(b.Elapsed().Nanoseconds()) / keys
					if cpu {
						perKey = float64(c1-c0) / keys
						b.ReportMetric(perKey, "cpu-ns/key")
					}
					results[fmt.Sprintf("%s/%s/%d", name, path, keyLen)] = perKey
				})
			}
			single := func(path string, p *partitioner.WASM) {
				run(path, 1, func(b *testing.B) {
					in, _ := p.Pool().Acquire()
					defer in.Release()
					b.ReportAllocs()
					for i := 0; b.Loop(); i++ {
						if _, err := in.Partition(keys[i&4095], n); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			batch := func(path string, p *partitioner.WASM) {
				run(path, len(keys), func(b *testing.B) {
					in, _ := p.Pool().Acquire()
					defer in.Release()
					b.ReportAllocs()
					for b.Loop() {
						if err := in.PartitionBatch(keys, n, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
				})
			}
			run("native", 1, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					nat.Partition(keys[i&4095], n)
				}
			})
			single("wasm", pg)
			run("wasm-pool", 1, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := pg.Partition(keys[i&4095], n); err != nil {
						b.Fatal(err)
					}
				}
			})
			batch("wasm-batch", pg)
			single("wasm-unguarded", pu)
			batch("wasm-batch-unguarded", pu)
			single("wasm-ref", pr)
			batch("wasm-batch-ref", pr)
		}
		pg.Close()
		pu.Close()
		pr.Close()
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
	fmt.Fprintf(&sb, "\nratios to native (per key; lower is better)            guard cost        reference rewriting\n")
	fmt.Fprintf(&sb, "%-28s %7s %7s %7s %7s   %7s %7s   %7s %7s\n", "plugin/keylen", "native", "wasm", "pool", "batch", "single", "batch", "wasm", "batch")
	for _, k := range keys {
		parts := strings.Split(k, "/")
		name, kl := parts[0], parts[2]
		get := func(path string) float64 { return results[name+"/"+path+"/"+kl] }
		nat := get("native")
		fmt.Fprintf(&sb, "%-28s %5.1fns %6.2fx %6.2fx %6.2fx   %+6.0f%% %+6.0f%%   %6.2fx %6.2fx\n", name+"/"+kl, nat,
			get("wasm")/nat, get("wasm-pool")/nat, get("wasm-batch")/nat,
			100*(get("wasm")/get("wasm-unguarded")-1), 100*(get("wasm-batch")/get("wasm-batch-unguarded")-1),
			get("wasm-ref")/nat, get("wasm-batch-ref")/nat)
	}
	fmt.Fprint(os.Stdout, sb.String())
	_ = time.Now
}
