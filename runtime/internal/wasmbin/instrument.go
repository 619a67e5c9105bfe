package wasmbin

import (
	"fmt"
	"strings"
)

// Export names of the globals that Instrument adds. The leading "pctl." cannot collide with a C
// identifier, and Instrument refuses a module that already exports either name.
const (
	FuelExport    = "pctl.fuel"
	DepthExport   = "pctl.depth"
	MemFailExport = "pctl.memfail"
	// StartExport names the wrapper of the module's start function, when MoveStart moved it.
	StartExport = "pctl.start"
)

// Bulk-instruction charges of spec/abi-v1.md §7.2, rule 3: fuel per byte of memory.fill,
// memory.copy and memory.init, and per element of table.fill, table.copy and table.init (as a
// shift: 128 = 1 << 7).
const (
	MemoryByteCost        = 1
	TableElementCostShift = 7
)

// Limits configures Instrument.
type Limits struct {
	// InitialFuel is the fuel the module starts with, spent by its start function and by
	// _initialize. The host sets fuel again before every call.
	InitialFuel int64
	// MaxDepth is the deepest nesting of WebAssembly calls allowed; the call that would exceed it
	// traps.
	MaxDepth uint32
	// ExportFuel names the exported functions that start a crossing, with the fuel each crossing
	// gets. Each such export is replaced by a wrapper that sets the fuel global and calls the
	// original, so the host never writes the global on the hot path.
	ExportFuel map[string]int64
	// MaxMemoryPages lowers every memory's maximum to at most this many pages (0: no change).
	MaxMemoryPages uint32
	// MaxTableElements lowers every table's maximum to at most this many elements (0: no
	// change). The host checks the tables against it first (spec/abi-v1.md §7.3).
	MaxTableElements uint64
	// MoveStart drops the start section and exports the start function instead, under
	// StartExport, through a wrapper that sets the fuel to InitialFuel: the host calls it right
	// after instantiation, like any crossing, so that a limit hit there is classified like one.
	MoveStart bool
	// LocalFuel keeps the fuel in a local of every function that charges more than once (it has a
	// loop or a bulk instruction): loaded from the global with the entry charge, and stored back
	// before every call, return and fuel trap and at the function's end, so that a loop
	// iteration's charge touches no global. The charges, their order and the trap point are those
	// of the reference rewriting (LocalFuel unset), which the other hosts' ports reproduce byte for
	// byte; only the global's value while the function runs, and after any trap other than the
	// fuel trap, differs: it may be the value of the last synchronisation point.
	LocalFuel bool
}

// Instrument returns a copy of the module whose code enforces two limits with no cost outside
// the guest:
//
//   - Fuel: a mutable i64 global, exported as FuelExport. On entry to every function and at the
//     head of every loop iteration the code subtracts the number of instructions in the straight
//     part that follows (the function's top level, or the loop's body without its inner loops:
//     an upper bound of the instructions executed until the next charge) and traps with
//     `unreachable` once fuel is negative. Every non-terminating execution passes a loop head or a
//     function entry infinitely often, so a call always ends; its work is bounded by the fuel the
//     host sets before the call, and the count is deterministic, the same on every engine.
//
//   - Depth: a mutable i32 global, exported as DepthExport, incremented on function entry and
//     decremented on every exit (the body is wrapped in a block so that branches to the
//     function's label still pass the decrement; each `return` is preceded by it). Entering a
//     function deeper than MaxDepth traps.
//
//     Bulk instructions (memory.fill/copy/init, table.fill/copy/init) are charged their length
//     operand (bytes, or 128 per table element) before they run, so one instruction can never
//     do unbounded work past the budget (spec/abi-v1.md §7.2, rule 3).
//
//   - Memory: a mutable i32 global, exported as MemFailExport, set to 1 whenever memory.grow
//     fails (returns -1). A module that traps after a refused grow has hit the memory limit,
//     whatever size it had reached.
//
// With MaxMemoryPages and MaxTableElements set, every memory's and table's maximum is lowered to
// the limit; with MoveStart, the start function becomes the export StartExport.
//
// After a trap the host reads the globals: fuel < 0 means the work limit was hit, depth >
// MaxDepth means the call-depth limit, memfail = 1 the memory limit. The host must discard an instance after any trap (the
// depth counter is not unwound by a trap).
//
// Custom sections named ".debug*" are dropped (their code offsets would be stale); the "name"
// section is kept. Function, global and type indices of the original module are unchanged.
func Instrument(b []byte, lim Limits) ([]byte, *Module, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := m.Export(FuelExport); ok {
		return nil, nil, &Error{Where: "export section", Msg: fmt.Sprintf("export name %q is reserved by the pctl host", FuelExport), Err: ErrMalformed}
	}
	reserved := []string{DepthExport, MemFailExport}
	if lim.MoveStart {
		reserved = append(reserved, StartExport)
	}
	for _, name := range reserved {
		if _, ok := m.Export(name); ok {
			return nil, nil, &Error{Where: "export section", Msg: fmt.Sprintf("export name %q is reserved by the pctl host", name), Err: ErrMalformed}
		}
	}
	fuelIdx := uint32(m.impGlob + m.numGlobal)
	depthIdx := fuelIdx + 1
	memFailIdx := fuelIdx + 2

	// Block types for wrapping bodies of multi-value functions: [] -> results.
	newTypes := []FuncType{}
	wrapType := make(map[uint32]uint32) // function type index -> type index of its wrapper block
	for _, ti := range m.Funcs {
		if int(ti) >= len(m.Types) {
			return nil, nil, &Error{Where: "function section", Msg: fmt.Sprintf("function uses type %d of %d", ti, len(m.Types)), Err: ErrMalformed}
		}
		t := m.Types[ti]
		if len(t.Results) <= 1 {
			continue
		}
		if _, ok := wrapType[ti]; ok {
			continue
		}
		want := FuncType{Results: t.Results}
		found := -1
		for i, et := range m.Types {
			if et.Equal(want) {
				found = i
				break
			}
		}
		if found < 0 {
			for i, nt := range newTypes {
				if nt.Equal(want) {
					found = len(m.Types) + i
					break
				}
			}
		}
		if found < 0 {
			found = len(m.Types) + len(newTypes)
			newTypes = append(newTypes, want)
		}
		wrapType[ti] = uint32(found)
	}

	// Wrappers for the exports that start a crossing (defined functions only: an exported import
	// is a host function and needs no budget).
	type wrapper struct {
		export int // index into m.Exports; -1 for the start function's wrapper
		target uint32
		typ    uint32
		fuel   int64
	}
	var wrappers []wrapper
	for i, e := range m.Exports {
		f, ok := lim.ExportFuel[e.Name]
		if !ok || e.Kind != KindFunc || int(e.Index) < m.impFuncs || int(e.Index)-m.impFuncs >= len(m.Funcs) {
			continue
		}
		wrappers = append(wrappers, wrapper{export: i, target: e.Index, typ: m.Funcs[int(e.Index)-m.impFuncs], fuel: f})
	}
	moveStart := lim.MoveStart && m.HasStart
	if moveStart {
		ft, ok := m.FuncType(m.StartFunc)
		if !ok || len(ft.Params) != 0 || len(ft.Results) != 0 {
			return nil, nil, &Error{Where: "start section", Msg: fmt.Sprintf("start function %d must exist and have type () -> ()", m.StartFunc), Err: ErrMalformed}
		}
		// The start function may be an import; a wrapper works for both.
		typ := -1
		for i, t := range m.Types {
			if len(t.Params) == 0 && len(t.Results) == 0 {
				typ = i
				break
			}
		}
		if typ < 0 {
			for i, t := range newTypes {
				if len(t.Params) == 0 && len(t.Results) == 0 {
					typ = len(m.Types) + i
					break
				}
			}
		}
		if typ < 0 {
			typ = len(m.Types) + len(newTypes)
			newTypes = append(newTypes, FuncType{})
		}
		wrappers = append(wrappers, wrapper{export: -1, target: m.StartFunc, typ: uint32(typ), fuel: lim.InitialFuel})
	}
	typeOf := func(ti uint32) FuncType {
		if int(ti) < len(m.Types) {
			return m.Types[ti]
		}
		return newTypes[int(ti)-len(m.Types)]
	}
	exports := append([]Export(nil), m.Exports...)
	for j, w := range wrappers {
		idx := uint32(m.impFuncs + len(m.Funcs) + j)
		if w.export >= 0 {
			exports[w.export].Index = idx
		} else {
			exports = append(exports, Export{Name: StartExport, Kind: KindFunc, Index: idx})
		}
	}
	if len(wrappers) > 0 && !m.hasSection(secCode) {
		return nil, nil, &Error{Where: "code section", Msg: "module exports functions but has no code section", Err: ErrMalformed}
	}

	in := &instrumenter{m: m, fuel: fuelIdx, depth: depthIdx, memFail: memFailIdx, maxDepth: lim.MaxDepth, wrapType: wrapType, localFuel: lim.LocalFuel}
	out := make([]byte, 0, len(b)+len(b)/4+64)
	out = append(out, b[:8]...)
	wroteGlobals, wroteExports, wroteTypes := false, false, false
	emitGlobals := func(existing *section) {
		var body []byte
		n := uint32(0)
		var rest []byte
		if existing != nil {
			r := &reader{b: b[:existing.end], pos: existing.start}
			n = r.u32()
			rest = b[r.pos:existing.end]
		}
		body = appendU32(body, n+3)
		body = append(body, rest...)
		body = append(body, byte(I64), 1, 0x42)
		body = appendS64(body, lim.InitialFuel)
		body = append(body, 0x0b)
		body = append(body, byte(I32), 1, 0x41, 0, 0x0b)
		body = append(body, byte(I32), 1, 0x41, 0, 0x0b)
		out = appendSection(out, secGlobal, body)
		wroteGlobals = true
	}
	emitExports := func() {
		body := appendU32(nil, uint32(len(exports)+3))
		for _, e := range exports {
			body = appendName(body, e.Name)
			body = append(body, byte(e.Kind))
			body = appendU32(body, e.Index)
		}
		body = appendName(body, FuelExport)
		body = append(body, byte(KindGlobal))
		body = appendU32(body, fuelIdx)
		body = appendName(body, DepthExport)
		body = append(body, byte(KindGlobal))
		body = appendU32(body, depthIdx)
		body = appendName(body, MemFailExport)
		body = append(body, byte(KindGlobal))
		body = appendU32(body, memFailIdx)
		out = appendSection(out, secExport, body)
		wroteExports = true
	}
	emitTypes := func(existing *section) {
		var body []byte
		n := uint32(0)
		var rest []byte
		if existing != nil {
			r := &reader{b: b[:existing.end], pos: existing.start}
			n = r.u32()
			rest = b[r.pos:existing.end]
		}
		body = appendU32(body, n+uint32(len(newTypes)))
		body = append(body, rest...)
		for _, t := range newTypes {
			body = append(body, 0x60)
			body = appendU32(body, uint32(len(t.Params)))
			for _, p := range t.Params {
				body = append(body, byte(p))
			}
			body = appendU32(body, uint32(len(t.Results)))
			for _, r := range t.Results {
				body = append(body, byte(r))
			}
		}
		out = appendSection(out, secType, body)
		wroteTypes = true
	}

	emitMemories := func(s *section) {
		r := &reader{b: b[:s.end], pos: s.start, where: "memory section"}
		n := r.u32()
		body := appendU32(nil, n)
		for i := uint32(0); i < n; i++ {
			l := r.limits()
			max := uint64(lim.MaxMemoryPages)
			if l.HasMax && l.Max < max {
				max = l.Max
			}
			body = append(body, 0x01)
			body = appendU64(body, l.Min)
			body = appendU64(body, max)
		}
		out = appendSection(out, secMemory, body)
	}
	emitTables := func(s *section) {
		body := appendU32(nil, uint32(len(m.Tables)))
		for _, t := range m.Tables {
			max := lim.MaxTableElements
			if t.HasMax && t.Max < max {
				max = t.Max
			}
			body = append(body, byte(t.RefType), 0x01)
			body = appendU64(body, t.Min)
			body = appendU64(body, max)
		}
		out = appendSection(out, secTable, body)
	}

	for i := range m.sections {
		s := &m.sections[i]
		// Insert missing sections before the first section that must follow them.
		if s.id != secCustom {
			if !wroteTypes && len(newTypes) > 0 && order(s.id) > order(secType) {
				emitTypes(nil)
			}
			if !wroteGlobals && order(s.id) > order(secGlobal) {
				emitGlobals(nil)
			}
			if !wroteExports && order(s.id) > order(secExport) {
				emitExports()
			}
		}
		switch s.id {
		case secType:
			if len(newTypes) > 0 {
				emitTypes(s)
			} else {
				out = appendSection(out, s.id, b[s.start:s.end])
				wroteTypes = true
			}
		case secGlobal:
			emitGlobals(s)
		case secExport:
			emitExports()
		case secMemory:
			if lim.MaxMemoryPages == 0 {
				out = appendSection(out, s.id, b[s.start:s.end])
			} else {
				emitMemories(s)
			}
		case secTable:
			if lim.MaxTableElements == 0 {
				out = appendSection(out, s.id, b[s.start:s.end])
			} else {
				emitTables(s)
			}
		case secStart:
			if !moveStart {
				out = appendSection(out, s.id, b[s.start:s.end])
			}
		case secFunction:
			body := appendU32(nil, uint32(len(m.Funcs)+len(wrappers)))
			for _, t := range m.Funcs {
				body = appendU32(body, t)
			}
			for _, w := range wrappers {
				body = appendU32(body, w.typ)
			}
			out = appendSection(out, secFunction, body)
		case secCode:
			body, err := in.code(b[:s.end], s.start, len(wrappers))
			if err != nil {
				return nil, nil, err
			}
			for _, w := range wrappers {
				var fb []byte
				fb = append(fb, 0) // no locals
				fb = append(fb, 0x42)
				fb = appendS64(fb, w.fuel)
				fb = append(fb, 0x24)
				fb = appendU32(fb, fuelIdx)
				for p := range typeOf(w.typ).Params {
					fb = append(fb, 0x20)
					fb = appendU32(fb, uint32(p))
				}
				fb = append(fb, 0x10)
				fb = appendU32(fb, w.target)
				fb = append(fb, 0x0b)
				body = appendU32(body, uint32(len(fb)))
				body = append(body, fb...)
			}
			out = appendSection(out, secCode, body)
		case secCustom:
			r := &reader{b: b[:s.end], pos: s.start}
			name := r.name()
			if r.err == nil && strings.HasPrefix(name, ".debug") {
				continue
			}
			out = appendSection(out, s.id, b[s.start:s.end])
		default:
			out = appendSection(out, s.id, b[s.start:s.end])
		}
	}
	if !wroteTypes && len(newTypes) > 0 {
		emitTypes(nil)
	}
	if !wroteGlobals {
		emitGlobals(nil)
	}
	if !wroteExports {
		emitExports()
	}
	return out, m, nil
}

func appendSection(out []byte, id byte, body []byte) []byte {
	out = append(out, id)
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
}

type instrumenter struct {
	m                    *Module
	fuel, depth, memFail uint32
	maxDepth             uint32
	wrapType             map[uint32]uint32
	localFuel            bool
}

// code rewrites the code section whose content starts at b[start:].
func (in *instrumenter) code(b []byte, start int, extra int) ([]byte, error) {
	r := &reader{b: b, pos: start, where: "code section"}
	n := r.u32()
	if r.err != nil {
		return nil, r.fail("")
	}
	if int(n) != len(in.m.Funcs) {
		return nil, &Error{Offset: start, Where: "code section", Msg: fmt.Sprintf("%d bodies for %d functions", n, len(in.m.Funcs)), Err: ErrMalformed}
	}
	out := appendU32(nil, n+uint32(extra))
	var fb []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		bodyStart := r.pos
		r.bytes(int(size))
		if r.err != nil {
			return nil, r.fail("function body")
		}
		var err error
		fb, err = in.function(fb[:0], b[:bodyStart+int(size)], bodyStart, i)
		if err != nil {
			return nil, err
		}
		out = appendU32(out, uint32(len(fb)))
		out = append(out, fb...)
	}
	return out, nil
}

type frame struct {
	loop    bool
	counter int // index into costs of the counter this frame's instructions charge
}

type insn struct {
	start, end int
	op         byte
	loopIdx    int  // for loop instructions: index into costs
	bulk       byte // 1: memory.fill/copy/init (per byte); 2: table.fill/copy/init (per element)
}

// function rewrites one body (locals and expression) that occupies b[start:len(b)].
func (in *instrumenter) function(out []byte, b []byte, start int, fn uint32) ([]byte, error) {
	where := fmt.Sprintf("code section, function %d", uint32(in.m.impFuncs)+fn)
	r := &reader{b: b, pos: start, where: where}
	groups := r.u32()
	var numLocals uint64
	for g := uint32(0); g < groups && r.err == nil; g++ {
		numLocals += uint64(r.u32())
		r.byte()
	}
	if r.err != nil {
		return nil, r.fail("locals")
	}
	localsEnd := r.pos
	t := in.m.Types[in.m.Funcs[fn]]
	scratch := uint32(uint64(len(t.Params)) + numLocals) // index of the i32 local added for memory.grow and bulk charges
	needScratch := false

	// Pass 1: find instruction boundaries and charge each instruction to the innermost loop (or
	// to the function's top level, counter 0).
	costs := []int64{0}
	stack := []frame{{loop: false, counter: 0}}
	var insns []insn
	bodyEnd := -1
	for r.pos < len(b) {
		at := r.pos
		op := r.byte()
		cur := stack[len(stack)-1].counter
		costs[cur]++
		ins := insn{start: at, op: op, loopIdx: -1}
		switch op {
		case 0x02, 0x04: // block, if
			r.sleb(33)
			stack = append(stack, frame{counter: cur})
		case 0x03: // loop
			r.sleb(33)
			costs = append(costs, 0)
			ins.loopIdx = len(costs) - 1
			stack = append(stack, frame{loop: true, counter: ins.loopIdx})
		case 0x0b: // end
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				bodyEnd = at
			}
		default:
			if op == 0x40 {
				needScratch = true
				in.m.GrowsMemory = true
			}
			if op == 0xfc {
				pr := &reader{b: b, pos: r.pos}
				switch pr.u32() {
				case 8, 10, 11: // memory.init, memory.copy, memory.fill
					ins.bulk = 1
				case 12, 14, 17: // table.init, table.copy, table.fill
					ins.bulk = 2
				}
				needScratch = needScratch || ins.bulk != 0
			}
			if err := skipImmediates(r, op); err != nil {
				return nil, err
			}
		}
		if r.err != nil {
			return nil, r.fail("instruction")
		}
		ins.end = r.pos
		insns = append(insns, ins)
		if bodyEnd >= 0 {
			break
		}
	}
	if bodyEnd < 0 || r.pos != len(b) {
		return nil, &Error{Offset: r.pos, Where: where, Msg: "function body does not end with its final `end`", Err: ErrMalformed}
	}

	// Pass 2: emit. With LocalFuel, a function that charges again after its entry (a loop, a bulk
	// instruction) keeps the fuel in local fl between the synchronisation points; one that charges
	// only at entry is rewritten as in the reference.
	hasBulk := false
	for _, ins := range insns {
		hasBulk = hasBulk || ins.bulk != 0
	}
	local := in.localFuel && (len(costs) > 1 || hasBulk)
	if needScratch || local {
		if numLocals+uint64(len(t.Params)) >= 50000 {
			return nil, &Error{Offset: start, Where: where, Msg: "too many locals", Err: ErrMalformed}
		}
		added := uint32(0)
		if needScratch {
			added++
		}
		if local {
			added++
		}
		out = appendU32(out, groups+added)
		rr := &reader{b: b, pos: start}
		rr.u32()
		out = append(out, b[rr.pos:localsEnd]...)
		if needScratch {
			out = append(out, 1, byte(I32))
		}
		if local {
			out = append(out, 1, byte(I64))
		}
	} else {
		out = append(out, b[start:localsEnd]...)
	}
	fl := scratch // the fuel local follows the scratch local, if any
	if needScratch {
		fl++
	}
	out = in.depthEnter(out)
	if local {
		out = in.chargeEntryLocal(out, costs[0], fl)
	} else {
		out = in.charge(out, costs[0])
	}
	out = append(out, 0x02) // block with the function's results
	switch len(t.Results) {
	case 0:
		out = append(out, 0x40)
	case 1:
		out = append(out, byte(t.Results[0]))
	default:
		out = appendS64(out, int64(in.wrapType[in.m.Funcs[fn]]))
	}
	for _, ins := range insns[:len(insns)-1] { // all but the final end
		call := ins.op == 0x10 || ins.op == 0x11 // call, call_indirect
		if local && (ins.op == 0x0f || (call && mutant != "no-store")) {
			out = in.storeFuel(out, fl)
		}
		if ins.op == 0x0f { // return
			out = in.depthLeave(out)
		}
		if ins.bulk != 0 {
			if local {
				out = in.chargeBulkLocal(out, scratch, fl, ins.bulk == 2)
			} else {
				out = in.chargeBulk(out, scratch, ins.bulk == 2)
			}
		}
		out = append(out, b[ins.start:ins.end]...)
		if local && call && mutant != "no-reload" { // the callee (or a WASI function) charged the global
			out = append(out, 0x23) // global.get fuel
			out = appendU32(out, in.fuel)
			out = append(out, 0x21) // local.set fl
			out = appendU32(out, fl)
		}
		if ins.loopIdx >= 0 {
			if local {
				out = in.chargeLocal(out, costs[ins.loopIdx], fl)
			} else {
				out = in.charge(out, costs[ins.loopIdx])
			}
		}
		if ins.op == 0x40 { // memory.grow: remember a refusal
			out = append(out, 0x22) // local.tee scratch
			out = appendU32(out, scratch)
			out = append(out, 0x41, 0x7f, 0x46, 0x04, 0x40, 0x41, 0x01, 0x24) // i32.const -1, i32.eq, if, i32.const 1, global.set
			out = appendU32(out, in.memFail)
			out = append(out, 0x0b, 0x20) // end, local.get scratch
			out = appendU32(out, scratch)
		}
	}
	out = append(out, 0x0b) // end of wrapper block
	if local {
		out = in.storeFuel(out, fl)
	}
	out = in.depthLeave(out)
	out = append(out, 0x0b) // end of function
	return out, nil
}

// storeFuel writes the fuel local back to the global: local.get fl, global.set fuel.
func (in *instrumenter) storeFuel(out []byte, fl uint32) []byte {
	out = append(out, 0x20)
	out = appendU32(out, fl)
	out = append(out, 0x24)
	return appendU32(out, in.fuel)
}

// trapIfNegative ends a local charge whose result is on the stack (and in fl): i64.const 0,
// i64.lt_s, if, store the fuel (the host reads it to name the limit), unreachable, end.
func (in *instrumenter) trapIfNegative(out []byte, fl uint32) []byte {
	out = append(out, 0x22) // local.tee fl
	out = appendU32(out, fl)
	out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40)
	out = in.storeFuel(out, fl)
	return append(out, 0x00, 0x0b)
}

// chargeEntryLocal is charge for a function that keeps its fuel in fl: it loads the global.
func (in *instrumenter) chargeEntryLocal(out []byte, cost int64, fl uint32) []byte {
	if cost < 1 {
		cost = 1
	}
	out = append(out, 0x23) // global.get fuel
	out = appendU32(out, in.fuel)
	out = append(out, 0x42)
	out = appendS64(out, cost)
	out = append(out, 0x7d) // i64.sub
	return in.trapIfNegative(out, fl)
}

// chargeLocal is charge on the fuel local.
func (in *instrumenter) chargeLocal(out []byte, cost int64, fl uint32) []byte {
	if cost < 1 {
		cost = 1
	}
	cost += mutantChargeDelta
	out = append(out, 0x20) // local.get fl
	out = appendU32(out, fl)
	out = append(out, 0x42)
	out = appendS64(out, cost)
	out = append(out, 0x7d) // i64.sub
	return in.trapIfNegative(out, fl)
}

// chargeBulkLocal is chargeBulk on the fuel local.
func (in *instrumenter) chargeBulkLocal(out []byte, scratch, fl uint32, table bool) []byte {
	out = append(out, 0x22) // local.tee scratch
	out = appendU32(out, scratch)
	out = append(out, 0x20) // local.get fl
	out = appendU32(out, fl)
	out = append(out, 0x20) // local.get scratch
	out = appendU32(out, scratch)
	out = append(out, 0xad) // i64.extend_i32_u
	if table {
		out = append(out, 0x42, TableElementCostShift, 0x86) // i64.const 7, i64.shl
	}
	out = append(out, 0x7d) // i64.sub
	return in.trapIfNegative(out, fl)
}

func (in *instrumenter) charge(out []byte, cost int64) []byte {
	if cost < 1 {
		cost = 1
	}
	out = append(out, 0x23)
	out = appendU32(out, in.fuel)
	out = append(out, 0x42)
	out = appendS64(out, cost)
	out = append(out, 0x7d, 0x24) // i64.sub, global.set
	out = appendU32(out, in.fuel)
	out = append(out, 0x23)
	out = appendU32(out, in.fuel)
	out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.const 0, i64.lt_s, if, unreachable, end
	return out
}

// chargeBulk charges the length operand on top of the stack (left there for the bulk
// instruction that follows): fuel -= n (tables: n << TableElementCostShift); trap if negative.
func (in *instrumenter) chargeBulk(out []byte, scratch uint32, table bool) []byte {
	out = append(out, 0x22) // local.tee scratch
	out = appendU32(out, scratch)
	out = append(out, 0x23) // global.get fuel
	out = appendU32(out, in.fuel)
	out = append(out, 0x20) // local.get scratch
	out = appendU32(out, scratch)
	out = append(out, 0xad) // i64.extend_i32_u
	if table {
		out = append(out, 0x42, TableElementCostShift, 0x86) // i64.const 7, i64.shl
	}
	out = append(out, 0x7d, 0x24) // i64.sub, global.set fuel
	out = appendU32(out, in.fuel)
	out = append(out, 0x23)
	out = appendU32(out, in.fuel)
	out = append(out, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.const 0, i64.lt_s, if, unreachable, end
	return out
}

func (in *instrumenter) depthEnter(out []byte) []byte {
	out = append(out, 0x23)
	out = appendU32(out, in.depth)
	out = append(out, 0x41, 0x01, 0x6a, 0x24) // i32.const 1, i32.add, global.set
	out = appendU32(out, in.depth)
	out = append(out, 0x23)
	out = appendU32(out, in.depth)
	out = append(out, 0x41)
	out = appendS64(out, int64(in.maxDepth))
	out = append(out, 0x4b, 0x04, 0x40, 0x00, 0x0b) // i32.gt_u, if, unreachable, end
	return out
}

func (in *instrumenter) depthLeave(out []byte) []byte {
	out = append(out, 0x23)
	out = appendU32(out, in.depth)
	out = append(out, 0x41, 0x01, 0x6b, 0x24) // i32.const 1, i32.sub, global.set
	return appendU32(out, in.depth)
}

func unsupported(r *reader, msg string) error {
	return &Error{Offset: r.pos - 1, Where: r.where, Msg: msg + " (spec/abi-v1.md §7.1)", Err: ErrUnsupportedFeature}
}

// skipImmediates advances r past the immediates of the instruction whose opcode was just read.
func skipImmediates(r *reader, op byte) error {
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
	case op >= 0x06 && op <= 0x0a, op == 0x18, op == 0x19, op == 0x1f:
		return unsupported(r, fmt.Sprintf("exception handling instruction 0x%02x is not allowed", op))
	case op == 0x0c || op == 0x0d:
		r.u32()
	case op == 0x0e:
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x10:
		r.u32()
	case op == 0x11:
		r.u32()
		r.u32()
	case op == 0x12 || op == 0x13 || op == 0x15:
		return unsupported(r, "tail calls are not allowed")
	case op == 0x14:
		return unsupported(r, "typed function references (call_ref) are not allowed")
	case op == 0x1c:
		n := r.u32()
		r.bytes(int(n))
	case op >= 0x20 && op <= 0x26:
		r.u32()
	case op >= 0x28 && op <= 0x3e:
		memarg(r)
	case op == 0x3f || op == 0x40:
		r.u32()
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op >= 0x45 && op <= 0xc4:
	case op == 0xd0:
		r.sleb(33)
	case op == 0xd1:
	case op == 0xd2:
		r.u32()
	case op >= 0xd3 && op <= 0xd6, op == 0xfb:
		return unsupported(r, fmt.Sprintf("GC / typed reference instruction 0x%02x is not allowed", op))
	case op == 0xfc:
		sub := r.u32()
		switch {
		case sub <= 7:
		case sub == 8:
			r.u32()
			r.u32()
		case sub == 9 || sub == 13 || sub == 11 || sub == 15 || sub == 16 || sub == 17:
			r.u32()
		case sub == 10 || sub == 12 || sub == 14:
			r.u32()
			r.u32()
		default:
			return unsupported(r, fmt.Sprintf("instruction 0xfc %d is not allowed", sub))
		}
	case op == 0xfd:
		sub := r.u32()
		switch {
		case sub <= 11, sub == 92, sub == 93:
			memarg(r)
		case sub == 12 || sub == 13:
			r.bytes(16)
		case sub >= 21 && sub <= 34:
			r.byte()
		case sub >= 84 && sub <= 91:
			memarg(r)
			r.byte()
		case sub <= 255:
		default:
			return unsupported(r, fmt.Sprintf("relaxed SIMD instruction 0xfd %d is not allowed (its results differ between engines)", sub))
		}
	case op == 0xfe:
		return unsupported(r, "atomic (threads) instructions are not allowed")
	default:
		return &Error{Offset: r.pos - 1, Where: r.where, Msg: fmt.Sprintf("unknown opcode 0x%02x", op), Err: ErrMalformed}
	}
	return nil
}

func memarg(r *reader) {
	align := r.u32()
	if align&0x40 != 0 {
		r.u32() // memory index (multi-memory)
	}
	r.u32()
}
