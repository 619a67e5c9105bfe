package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// The wasi-deterministic import profile (spec/abi-v1.md §6.2): exactly these functions of module
// wasi_snapshot_preview1, with exactly these signatures.
const wasiModule = "wasi_snapshot_preview1"

const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoFault   = 21
	errnoInval   = 28
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

type wasiFunc struct {
	params, results []api.ValueType
	fn              func(ctx context.Context, mod api.Module, stack []uint64)
	// bytes is how many bytes of memory the arguments let the call read or write: with
	// wasiCallFuel, what the call costs (spec/abi-v1.md §7.2, rule 4).
	bytes func(stack []uint64) uint64
}

// Charges of spec/abi-v1.md §7.2, rule 4: PCTL_WASI_CALL_FUEL per call, plus wasiByteFuel per
// byte the call may touch.
const (
	wasiCallFuel = 16384
	wasiByteFuel = 64
)

func noBytes(_ []uint64) uint64    { return 0 }
func eightBytes(_ []uint64) uint64 { return 8 }

var wasiFuncs = map[string]wasiFunc{
	"args_sizes_get":    {[]api.ValueType{i32, i32}, []api.ValueType{i32}, zeroSizes, eightBytes},
	"args_get":          {[]api.ValueType{i32, i32}, []api.ValueType{i32}, nothing, noBytes},
	"environ_sizes_get": {[]api.ValueType{i32, i32}, []api.ValueType{i32}, zeroSizes, eightBytes},
	"environ_get":       {[]api.ValueType{i32, i32}, []api.ValueType{i32}, nothing, noBytes},
	"clock_time_get":    {[]api.ValueType{i32, i64, i32}, []api.ValueType{i32}, clockTimeGet, eightBytes},
	"random_get":        {[]api.ValueType{i32, i32}, []api.ValueType{i32}, randomGet, func(s []uint64) uint64 { return uint64(uint32(s[1])) }},
	"fd_write":          {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}, fdWrite, func(s []uint64) uint64 { return 8*uint64(uint32(s[2])) + 4 }},
	"poll_oneoff":       {[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}, pollOneoff, func(s []uint64) uint64 { return 80*uint64(uint32(s[2])) + 4 }},
	"sched_yield":       {nil, []api.ValueType{i32}, schedYield, noBytes},
	"proc_exit":         {[]api.ValueType{i32}, nil, procExit, noBytes},
}

// wasiState is the per-instance state of the deterministic WASI: the clock value and the
// position in the SplitMix64 random stream. It travels in the context of every call into the
// instance, so host functions find it without a lookup table.
type wasiState struct {
	time  uint64
	state uint64            // SplitMix64 state
	buf   [8]byte           // current output
	left  int               // unread bytes of buf (taken from its end)
	fuel  api.MutableGlobal // the instance's work budget (nil when unguarded)
}

// errFuel ends a WASI call that its crossing's budget cannot pay for; the instance's fuel is then
// negative, so the call is reported as a time limit (spec/abi-v1.md §7.2, rule 4).
var errFuel = errors.New("pctl: work budget exhausted in a WASI call")

// charge takes cost units from the calling instance's budget before the call touches memory, and
// stops the call (a panic, which wazero turns into the guest call's error) if it cannot pay.
func (w *wasiState) charge(cost uint64) {
	if w.fuel == nil {
		return
	}
	left := int64(w.fuel.Get()) - int64(cost) // cost < 2^45: no overflow
	w.fuel.Set(uint64(left))
	if left < 0 {
		panic(errFuel)
	}
}

type wasiKey struct{}

func newWASIState(cfg *Config) *wasiState {
	return &wasiState{time: cfg.WASITime, state: cfg.WASISeed}
}

func (w *wasiState) next() {
	w.state += 0x9E3779B97F4A7C15
	z := w.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	binary.LittleEndian.PutUint64(w.buf[:], z^(z>>31))
	w.left = 8
}

// read fills p with the next bytes of the stream.
func (w *wasiState) read(p []byte) {
	for len(p) > 0 {
		if w.left == 0 {
			w.next()
		}
		n := copy(p, w.buf[8-w.left:])
		w.left -= n
		p = p[n:]
	}
}

// wasiStates maps a guest instance (api.Module) to its state for calls made after instantiation.
// Calls into guests use context.Background(), because a context with values makes every wazero
// call slower (it looks up its own keys in the chain); instantiation, which may run a start
// function before the api.Module exists, carries the state in its context instead.
var wasiStates sync.Map

func stateOf(ctx context.Context, mod api.Module) *wasiState {
	if s, ok := ctx.Value(wasiKey{}).(*wasiState); ok {
		return s
	}
	if s, ok := wasiStates.Load(mod); ok {
		return s.(*wasiState)
	}
	panic("pctl runtime: WASI call from an unregistered instance") // a host bug; wazero turns it into a trap
}

func instantiateWASI(ctx context.Context, r wazero.Runtime) (api.Module, error) {
	b := r.NewHostModuleBuilder(wasiModule)
	for name, f := range wasiFuncs {
		charged := func(ctx context.Context, mod api.Module, stack []uint64) {
			stateOf(ctx, mod).charge(wasiCallFuel + wasiByteFuel*f.bytes(stack))
			f.fn(ctx, mod, stack)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(charged), f.params, f.results).Export(name)
	}
	return b.Instantiate(ctx)
}

// inMemory reports whether [ptr, ptr+n) lies inside memory. Every function checks all its
// pointers before it writes anything (spec/abi-v1.md §6.2: a bad pointer writes nothing).
func inMemory(mem api.Memory, ptr, n uint32) bool {
	return uint64(ptr)+uint64(n) <= uint64(mem.Size())
}

func zeroSizes(_ context.Context, mod api.Module, stack []uint64) {
	mem := mod.Memory()
	a, b := uint32(stack[0]), uint32(stack[1])
	if !inMemory(mem, a, 4) || !inMemory(mem, b, 4) {
		stack[0] = errnoFault
		return
	}
	mem.WriteUint32Le(a, 0)
	mem.WriteUint32Le(b, 0)
	stack[0] = errnoSuccess
}

func nothing(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoSuccess }

func schedYield(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoSuccess }

func clockTimeGet(ctx context.Context, mod api.Module, stack []uint64) {
	id := uint32(stack[0])
	if id > 3 {
		stack[0] = errnoInval
		return
	}
	if !mod.Memory().WriteUint64Le(uint32(stack[2]), stateOf(ctx, mod).time) {
		stack[0] = errnoFault
		return
	}
	stack[0] = errnoSuccess
}

func randomGet(ctx context.Context, mod api.Module, stack []uint64) {
	buf, n := uint32(stack[0]), uint32(stack[1])
	p, ok := mod.Memory().Read(buf, n)
	if !ok {
		stack[0] = errnoFault
		return
	}
	stateOf(ctx, mod).read(p)
	stack[0] = errnoSuccess
}

func fdWrite(_ context.Context, mod api.Module, stack []uint64) {
	fd, iovs, n, nwritten := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	if fd != 1 && fd != 2 {
		stack[0] = errnoBadf
		return
	}
	mem := mod.Memory()
	vec, ok := mem.Read(iovs, n*8)
	if !ok || uint64(n)*8 > uint64(^uint32(0)) || !inMemory(mem, nwritten, 4) {
		stack[0] = errnoFault
		return
	}
	var total uint32
	for i := uint32(0); i < n; i++ {
		total += binary.LittleEndian.Uint32(vec[i*8+4:])
	}
	mem.WriteUint32Le(nwritten, total)
	stack[0] = errnoSuccess
}

func pollOneoff(_ context.Context, mod api.Module, stack []uint64) {
	in, out, nsubs, neventsPtr := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	if nsubs == 0 {
		stack[0] = errnoInval
		return
	}
	mem := mod.Memory()
	subs, ok1 := mem.Read(in, nsubs*48)
	events, ok2 := mem.Read(out, nsubs*32)
	if !ok1 || !ok2 || uint64(nsubs)*48 > uint64(^uint32(0)) || !inMemory(mem, neventsPtr, 4) {
		stack[0] = errnoFault
		return
	}
	for i := uint32(0); i < nsubs; i++ {
		s := subs[i*48 : i*48+48]
		e := events[i*32 : i*32+32]
		userdata := binary.LittleEndian.Uint64(s[0:])
		tag := s[8]
		clear(e)
		binary.LittleEndian.PutUint64(e[0:], userdata)
		if tag != 0 {
			binary.LittleEndian.PutUint16(e[8:], errnoBadf)
		}
		e[10] = tag
	}
	mem.WriteUint32Le(neventsPtr, nsubs)
	stack[0] = errnoSuccess
}

func procExit(ctx context.Context, mod api.Module, stack []uint64) {
	code := uint32(stack[0])
	_ = mod.CloseWithExitCode(ctx, code)
	panic(sys.NewExitError(code))
}
