package wasmbin

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func instantiate(t *testing.T, b []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	m, err := r.Instantiate(ctx, b)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	return m
}

// TestInstrumentPreservesResults runs every export of testdata/shapes.wasm (control-flow shapes:
// multi-value, branches to the function label, returns in nested blocks, br_table, recursion)
// before and after instrumentation and requires identical results and a balanced depth counter.
func TestInstrumentPreservesResults(t *testing.T) {
	orig, err := os.ReadFile("testdata/shapes.wasm")
	if err != nil {
		t.Fatal(err)
	}
	inst, _, err := Instrument(orig, Limits{InitialFuel: 1 << 40, MaxDepth: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a, b := instantiate(t, orig), instantiate(t, inst)
	depth := b.ExportedGlobal(DepthExport)
	tests := []struct {
		name string
		fn   string
		args []uint64
	}{
		{"multi-value", "pair", []uint64{7, 3}},
		{"call multi-value", "sum_pair", []uint64{7, 3}},
		{"br to function label taken", "br_top", []uint64{0}},
		{"br to function label not taken", "br_top", []uint64{5}},
		{"return inside loop", "find", []uint64{10}},
		{"loop exits normally", "find", []uint64{5}},
		{"br_table block 0", "table", []uint64{0}},
		{"br_table block 1", "table", []uint64{1}},
		{"br_table block 2", "table", []uint64{2}},
		{"br_table function label", "table", []uint64{3}},
		{"br_table default", "table", []uint64{99}},
		{"recursion", "fact", []uint64{20}},
		{"loop", "spin", []uint64{1000}},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := a.ExportedFunction(tc.fn).Call(ctx, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.ExportedFunction(tc.fn).Call(ctx, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("result %d = %d, want %d", i, got[i], want[i])
				}
			}
			if d := depth.Get(); d != 0 {
				t.Errorf("depth counter is %d after the call, want 0 (an exit path misses the decrement)", d)
			}
		})
	}
}

// TestFuelIsDeterministic checks that fuel use depends only on the work done: the same call
// spends the same fuel, and a loop of n iterations spends fuel linear in n.
func TestFuelIsDeterministic(t *testing.T) {
	orig, _ := os.ReadFile("testdata/shapes.wasm")
	inst, _, err := Instrument(orig, Limits{InitialFuel: 1 << 40, MaxDepth: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := instantiate(t, inst)
	fuel := m.ExportedGlobal(FuelExport).(api.MutableGlobal)
	spent := func(n uint64) int64 {
		fuel.Set(1 << 40)
		if _, err := m.ExportedFunction("spin").Call(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		return 1<<40 - int64(fuel.Get())
	}
	s1, s1b, s2 := spent(1000), spent(1000), spent(2000)
	if s1 != s1b {
		t.Fatalf("same call spent %d then %d fuel", s1, s1b)
	}
	perIter := (s2 - s1) / 1000
	if perIter < 5 || s2-s1 != perIter*1000 {
		t.Fatalf("spin(1000) spent %d, spin(2000) %d: want a fixed cost per iteration of at least the loop body's size", s1, s2)
	}
}

func TestLimitsTrap(t *testing.T) {
	orig, _ := os.ReadFile("testdata/shapes.wasm")
	inst, _, err := Instrument(orig, Limits{InitialFuel: 1 << 40, MaxDepth: 100})
	if err != nil {
		t.Fatal(err)
	}
	m := instantiate(t, inst)
	ctx := context.Background()
	if _, err := m.ExportedFunction("fact").Call(ctx, 90); err != nil {
		t.Fatalf("fact(90) nests 90 calls, under the limit of 100: %v", err)
	}
	if _, err := m.ExportedFunction("fact").Call(ctx, 200); err == nil {
		t.Fatal("fact(200) nests 200 calls, over the limit of 100: want a trap")
	}
	if d := m.ExportedGlobal(DepthExport).Get(); uint32(d) <= 100 {
		t.Fatalf("after the depth trap the counter is %d, want > 100 (the host reads it to name the limit)", d)
	}

	m2 := instantiate(t, inst)
	fuel := m2.ExportedGlobal(FuelExport).(api.MutableGlobal)
	fuel.Set(10000)
	if _, err := m2.ExportedFunction("spin").Call(ctx, 1_000_000); err == nil {
		t.Fatal("spin(1e6) with 10000 fuel: want a trap")
	}
	if f := int64(fuel.Get()); f >= 0 {
		t.Fatalf("after running out, fuel is %d, want < 0", f)
	}
}

func TestExportWrappersSetFuel(t *testing.T) {
	orig, _ := os.ReadFile("testdata/shapes.wasm")
	inst, _, err := Instrument(orig, Limits{InitialFuel: 5, MaxDepth: 1000, ExportFuel: map[string]int64{"spin": 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	// find is not wrapped: it runs on the initial fuel (5) and traps.
	if _, err := instantiate(t, inst).ExportedFunction("find").Call(context.Background(), 10); err == nil {
		t.Fatal("find is not wrapped and the module starts with 5 fuel: want a trap")
	}
	// spin is wrapped: each call gets 1<<20, whatever the previous call left.
	m := instantiate(t, inst)
	for i := 0; i < 3; i++ {
		if _, err := m.ExportedFunction("spin").Call(context.Background(), 1000); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	hdr := []byte("\x00asm\x01\x00\x00\x00")
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"not wasm", []byte("hello world"), ErrMalformed},
		{"component binary", []byte("\x00asm\x0d\x00\x01\x00"), ErrUnsupportedFeature},
		{"truncated section", append(hdr, 1, 10, 0), ErrMalformed},
		{"sections out of order", append(append([]byte{}, hdr...), 3, 1, 0, 1, 1, 0), ErrMalformed},
		{"shared memory", append(append([]byte{}, hdr...), 5, 4, 1, 3, 1, 1), ErrUnsupportedFeature},
		{"tag section", append(append([]byte{}, hdr...), 13, 1, 0), ErrUnsupportedFeature},
		// type () -> (), one function, body: return_call 0
		{"tail call", append(append([]byte{}, hdr...), 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0, 10, 6, 1, 4, 0, 0x12, 0, 0x0b), ErrUnsupportedFeature},
		// atomic fence
		{"threads", append(append([]byte{}, hdr...), 1, 4, 1, 0x60, 0, 0, 3, 2, 1, 0, 10, 7, 1, 5, 0, 0xfe, 3, 0, 0x0b), ErrUnsupportedFeature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(tc.b, Limits{InitialFuel: 1, MaxDepth: 1})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.Msg == "" {
				t.Fatalf("want a *Error with a message, got %T %v", err, err)
			}
		})
	}
}

// TestBulkCharges: each bulk instruction of testdata/bulk.wat costs its length operand (bytes),
// or 128 per table element, on top of its function's 5 instructions (spec/abi-v1.md §7.2, rule 3),
// and an instruction the budget cannot pay for does not run at all.
func TestBulkCharges(t *testing.T) {
	orig, err := os.ReadFile("testdata/bulk.wasm")
	if err != nil {
		t.Fatal(err)
	}
	inst, _, err := Instrument(orig, Limits{InitialFuel: 1 << 40, MaxDepth: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tests := []struct {
		fn   string
		n    uint64
		cost int64
	}{
		{"fill", 0, 5}, {"fill", 1000, 5 + 1000}, {"fill", 65536, 5 + 65536},
		{"copy", 300, 5 + 300},
		{"init", 32, 5 + 32},
		{"tfill", 16, 5 + 128*16},
		{"tcopy", 8, 5 + 128*8},
		{"tinit", 4, 5 + 128*4},
	}
	for _, tc := range tests {
		m := instantiate(t, inst)
		fuel := m.ExportedGlobal(FuelExport).(api.MutableGlobal)
		fuel.Set(1 << 40)
		if _, err := m.ExportedFunction(tc.fn).Call(ctx, tc.n); err != nil {
			t.Fatalf("%s(%d): %v", tc.fn, tc.n, err)
		}
		if used := 1<<40 - int64(fuel.Get()); used != tc.cost {
			t.Errorf("%s(%d) used %d units; §7.2 gives %d", tc.fn, tc.n, used, tc.cost)
		}
		// One unit short: the charge traps before the instruction runs.
		m = instantiate(t, inst)
		fuel = m.ExportedGlobal(FuelExport).(api.MutableGlobal)
		fuel.Set(uint64(tc.cost - 1))
		_, err := m.ExportedFunction(tc.fn).Call(ctx, tc.n)
		if tc.n > 0 && (err == nil || int64(fuel.Get()) >= 0) {
			t.Errorf("%s(%d) with %d units: got %v, fuel %d; want a trap with negative fuel", tc.fn, tc.n, tc.cost-1, err, int64(fuel.Get()))
		}
		if tc.fn == "fill" && tc.n > 0 {
			if b, _ := m.Memory().ReadByte(0); b != 0 {
				t.Errorf("fill(%d) ran although the budget could not pay for it", tc.n)
			}
		}
	}
}

// TestLimitsRewrite: the memory's declared maximum (1000 pages) and the table's absent one are
// lowered to the limits, the start function becomes the export StartExport (the module no longer
// runs it at instantiation), and a module that exports that name itself is refused.
func TestLimitsRewrite(t *testing.T) {
	orig, err := os.ReadFile("testdata/bulk.wasm")
	if err != nil {
		t.Fatal(err)
	}
	inst, _, err := Instrument(orig, Limits{InitialFuel: 1 << 40, MaxDepth: 1000, MaxMemoryPages: 512, MaxTableElements: 100, MoveStart: true,
		ExportFuel: map[string]int64{"tgrow": 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(inst)
	if err != nil {
		t.Fatal(err)
	}
	if mem := p.Memories[0]; !mem.HasMax || mem.Max != 512 || mem.Min != 1 {
		t.Errorf("memory limits %+v, want min 1, max 512", mem)
	}
	if tab := p.Tables[0]; !tab.HasMax || tab.Max != 100 || tab.Min != 16 {
		t.Errorf("table limits %+v, want min 16, max 100", tab)
	}
	if p.HasStart {
		t.Error("the start section is still there")
	}
	ctx := context.Background()
	m := instantiate(t, inst)
	if m.ExportedGlobal("started").Get() != 0 {
		t.Fatal("the start function ran at instantiation")
	}
	if _, err := m.ExportedFunction(StartExport).Call(ctx); err != nil {
		t.Fatal(err)
	}
	if m.ExportedGlobal("started").Get() != 1 {
		t.Fatal("calling pctl.start did not run the start function")
	}
	grow := m.ExportedFunction("tgrow")
	if r, _ := grow.Call(ctx, 84); int32(r[0]) != 16 {
		t.Errorf("growing 16 elements to the limit of 100 returned %d, want 16", int32(r[0]))
	}
	if r, _ := grow.Call(ctx, 1); int32(r[0]) != -1 {
		t.Errorf("growing past the limit returned %d, want -1", int32(r[0]))
	}
	// () -> (), one function exported as "pctl.start".
	own := append([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0e\x01\x0apctl.start\x00\x00"), 0x0a, 4, 1, 2, 0, 0x0b)
	if _, _, err := Instrument(own, Limits{MoveStart: true}); err == nil || !strings.Contains(err.Error(), StartExport) {
		t.Errorf("a module that exports %q itself: got %v, want a refusal naming it", StartExport, err)
	}
}

// TestGrowsMemory: Instrument reports a memory.grow anywhere in the code (the runtime then checks
// the memory's size before each crossing) and none in a module without one (it skips the check).
func TestGrowsMemory(t *testing.T) {
	for file, want := range map[string]bool{
		"../../testdata/hostile/memory-grow.wasm":     true,
		"../../testdata/hostile/loop-forever.wasm":    false,
		"../../../plugins/builtin/kafka-murmur2.wasm": false,
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, m, err := Instrument(b, Limits{InitialFuel: 1, MaxDepth: 1})
		if err != nil {
			t.Fatal(err)
		}
		if m.GrowsMemory != want {
			t.Errorf("%s: GrowsMemory = %v, want %v", file, m.GrowsMemory, want)
		}
	}
}
