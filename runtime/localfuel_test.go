package runtime_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// TestLocalFuelSameWork: the rewriting the Go host runs (the fuel kept in a local between
// synchronisation points, wasmbin.Limits.LocalFuel) charges exactly what the reference rewriting
// charges (the fuel in the global at every charge: the bytes the Node, Python and Java hosts
// produce and testdata/instrumented.txt records). Every built-in, every kafka-murmur2 build and
// every hostile module (but start-loop, and the Go build unless asked for) is loaded by both, and every key of a deterministic sample (lengths 0 to
// 300, and fuel-edge.wat's keys around its exact budget) gets, from both, the same partition or
// the same error, and the same WorkUsed; batches of the sample too. The reference is independent
// of the new code: it is the rewriting the golden test pins and the other hosts reproduce.
//
// It can fail: built with `-tags fuelmutant` and PCTL_FUEL_MUTANT=off-by-one (every loop charge
// one unit dearer), no-reload (the local not reloaded after a call) or no-store (not stored
// before one), the rewriting is wrong and this test names the first module and key that differ.
// PCTL_LOCALFUEL_KEYS sets the sample size (default 1500) and adds the Go-built kafka-murmur2.
func TestLocalFuelSameWork(t *testing.T) {
	ctx := context.Background()
	nkeys := 1500
	if s := os.Getenv("PCTL_LOCALFUEL_KEYS"); s != "" {
		var err error
		if nkeys, err = strconv.Atoi(s); err != nil {
			t.Fatalf("PCTL_LOCALFUEL_KEYS=%q: %v", s, err)
		}
	}
	local := newRuntime(t, runtime.Config{})
	ref, err := runtime.New(testhook.WithReferenceFuel(ctx), runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close(ctx) })

	modules := map[string][]byte{}
	for _, name := range plugins.BuiltinNames() {
		modules["builtin/"+name], _ = plugins.Builtin(name)
	}
	for tc, b := range plugins.Murmur2Builds() {
		// The Go build takes minutes to compile twice under -race; its WASI calls in loops are
		// fuel-edge's and wasi-bulk's too. PCTL_LOCALFUEL_KEYS (a bigger run) includes it.
		if tc != "go" || os.Getenv("PCTL_LOCALFUEL_KEYS") != "" {
			modules["murmur2/"+tc] = b
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "hostile", "*.wasm"))
	for _, f := range files {
		// start-loop spends 2^33 units at every load (seconds); its refusal is TestHostile's.
		if filepath.Base(f) != "start-loop.wasm" {
			modules["hostile/"+filepath.Base(f)] = hostile(t, filepath.Base(f))
		}
	}
	names := make([]string, 0, len(modules))
	for name := range modules {
		names = append(names, name)
	}
	sort.Strings(names)

	rng := rand.New(rand.NewPCG(17, 6))
	keys := make([][]byte, 0, nkeys+8)
	for i := 0; i < nkeys; i++ {
		n := rng.IntN(65)
		if i%10 == 0 {
			n = rng.IntN(301)
		}
		k := make([]byte, n)
		for j := range k {
			k[j] = byte(rng.Uint32())
		}
		keys = append(keys, k)
	}
	edge := func(op byte, v uint32) []byte {
		return binary.LittleEndian.AppendUint32([]byte{'f', 'u', 'e', 'l', op}, v)
	}
	keys = append(keys, []byte("fuel"), edge('m', 0), edge('m', 1<<24+1), edge('m', 2147481680), edge('m', 2147481681),
		edge('r', 0), edge('r', 33554175), edge('r', 33554176))

	type outcome struct {
		part int32
		err  string
		work int64
	}
	str := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	compared := 0
	for _, name := range names {
		wasm := modules[name]
		ok := t.Run(name, func(t *testing.T) {
			ml, errL := local.Load(ctx, wasm)
			mr, errR := ref.Load(ctx, wasm)
			if str(errL) != str(errR) {
				t.Fatalf("load: local fuel %v; reference %v", errL, errR)
			}
			if errL != nil {
				return
			}
			pl, errL := ml.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
			pr, errR := mr.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
			if str(errL) != str(errR) {
				t.Fatalf("pool: local fuel %v; reference %v", errL, errR)
			}
			if errL != nil {
				return
			}
			defer pl.Close()
			defer pr.Close()
			call := func(p *runtime.Pool, k []byte) outcome {
				in, err := p.Acquire()
				if err != nil {
					t.Fatal(err)
				}
				defer in.Release()
				part, err := in.Partition(k, 1000)
				return outcome{part, str(err), in.WorkUsed()}
			}
			batch := func(p *runtime.Pool, ks [][]byte) (outcome, []int32) {
				in, err := p.Acquire()
				if err != nil {
					t.Fatal(err)
				}
				defer in.Release()
				out := make([]int32, len(ks))
				err = in.PartitionBatch(ks, 1000, out)
				return outcome{0, str(err), in.WorkUsed()}, out
			}
			// A call that spends the whole budget takes about a second: after one that stops, only
			// fuel-edge's keys (at the end of the sample), whose whole point is the budget's edge.
			stopped := false
			for i, k := range keys {
				if stopped && i < nkeys {
					continue
				}
				if stopped && name != "hostile/fuel-edge.wasm" {
					break
				}
				l, r := call(pl, k), call(pr, k)
				if l != r {
					t.Fatalf("key %d (%d bytes, %.16x...): local fuel gives %+v; the reference %+v", i, len(k), k, l, r)
				}
				compared++
				stopped = stopped || l.err != ""
			}
			if stopped {
				return
			}
			for lo := 0; lo < nkeys; lo += 100 {
				ks := keys[lo:min(lo+100, nkeys)]
				l, lout := batch(pl, ks)
				r, rout := batch(pr, ks)
				if l != r || fmt.Sprint(lout) != fmt.Sprint(rout) {
					t.Fatalf("batch of keys %d..%d: local fuel gives %+v; the reference %+v", lo, lo+len(ks)-1, l, r)
				}
			}
		})
		if !ok {
			t.FailNow() // the first module that differs is enough (a wrong rewriting may run away on the next)
		}
	}
	t.Logf("%d modules, %d single calls compared", len(names), compared)
}
