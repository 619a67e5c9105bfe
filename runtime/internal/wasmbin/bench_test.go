package wasmbin

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"testing"

	"github.com/tetratelabs/wazero"

	"pctl.dev/pctl/internal/cputime"
)

// BenchmarkFuelLoop: testdata/shapes.wasm's spin (a 15-instruction loop, nothing else) for
// 10,000 turns, unguarded, with the reference rewriting (fuel in the global at every charge) and
// with LocalFuel, on wazero's compiler; it prints each guard's cost against the unguarded loop of
// the same run, by the CPU time of the benchmark's thread where there is a thread clock.
func BenchmarkFuelLoop(b *testing.B) {
	orig, err := os.ReadFile("testdata/shapes.wasm")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	const turns = 10000
	perTurn := map[string]float64{}
	for _, v := range []struct {
		name  string
		local bool
		guard bool
	}{{"unguarded", false, false}, {"reference", false, true}, {"local", true, true}} {
		mod := orig
		if v.guard {
			if mod, _, err = Instrument(orig, Limits{InitialFuel: 1 << 62, MaxDepth: 1000, LocalFuel: v.local}); err != nil {
				b.Fatal(err)
			}
		}
		m, err := r.InstantiateWithConfig(ctx, mod, wazero.NewModuleConfig().WithName(v.name))
		if err != nil {
			b.Fatal(err)
		}
		spin := m.ExportedFunction("spin")
		b.Run(v.name, func(b *testing.B) {
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			stack := make([]uint64, 1)
			c0, cpu := cputime.Thread()
			for b.Loop() {
				stack[0] = turns
				if err := spin.CallWithStack(ctx, stack); err != nil {
					b.Fatal(err)
				}
			}
			c1, _ := cputime.Thread()
			perTurn[v.name] = float64(b.Elapsed().Nanoseconds()) / float64(b.N*turns)
			if cpu {
				perTurn[v.name] = float64(c1-c0) / float64(b.N*turns)
				b.ReportMetric(perTurn[v.name], "cpu-ns/turn")
			}
		})
	}
	if u := perTurn["unguarded"]; u > 0 {
		fmt.Printf("\nguard cost per loop turn against unguarded (%.2f ns): reference %+.0f%%, local fuel %+.0f%%\n",
			u, 100*(perTurn["reference"]/u-1), 100*(perTurn["local"]/u-1))
	}
}
