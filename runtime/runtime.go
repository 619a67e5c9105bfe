// Package runtime is pctl's WebAssembly host for partitioner modules (spec/abi-v1.md), built on
// wazero.
//
// A Runtime loads modules: it checks the bytes against the ABI (exports, signatures, import
// profile, features, limits), instruments them so that limits cost nothing outside the guest,
// compiles them once per digest and reads their metadata. A Module makes Pools: sets of
// instances that many goroutines can call at once, each instance used by one goroutine at a
// time. A guest that traps, loops or exceeds a limit fails that call with a *CallError naming the
// plugin; its instance is replaced and the pool keeps serving.
//
// The package has no dependency besides wazero; in particular it never imports NATS.
package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/runtime/internal/wasmbin"
)

// Runtime loads and compiles modules. It is safe for concurrent use.
type Runtime struct {
	cfg   Config
	rt    wazero.Runtime
	cache wazero.CompilationCache
	// unguarded and referenceFuel: the switches of internal/rthook, read from New's context.
	unguarded, referenceFuel bool

	mu      sync.Mutex
	modules map[string]*Module   // by digest
	loading map[string]*loadCall // loads in progress, by digest
	wasi    api.Module           // instantiated on first use
	closed  bool
}

// loadCall is one Load of a digest in progress: concurrent Loads of the same bytes wait for it
// instead of compiling again (wazero's compiler races with itself when it compiles the same
// module twice at once, and the work would be wasted anyway).
type loadCall struct {
	done chan struct{}
	m    *Module
	err  error
}

// New returns a Runtime with the given configuration (zero value: all defaults).
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var rc wazero.RuntimeConfig
	if cfg.Engine == EngineInterpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	} else {
		rc = wazero.NewRuntimeConfig()
	}
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("runtime: compilation cache in %s: %w", cfg.CacheDir, err)
		}
	} else {
		cache = wazero.NewCompilationCache()
	}
	// No WithCloseOnContextDone: wazero's guard starts a goroutine per call. Limits are enforced
	// by instrumentation instead (see RATIONALE.md, "Why fuel instead of wazero's context guard?").
	rc = rc.WithMemoryLimitPages(cfg.MaxMemoryPages).
		WithCompilationCache(cache).
		WithCoreFeatures(api.CoreFeaturesV2).
		WithDebugInfoEnabled(false)
	return &Runtime{
		cfg:           cfg,
		unguarded:     testhook.Unguarded(ctx),
		referenceFuel: testhook.ReferenceFuel(ctx),
		rt:            wazero.NewRuntimeWithConfig(ctx, rc),
		cache:         cache,
		modules:       make(map[string]*Module),
	}, nil
}

// Config returns the runtime's configuration with defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// Close releases every module, pool and compiled code of the runtime.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.rt.Close(ctx)
	if cerr := r.cache.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// Digest returns the module identity of spec/abi-v1.md §1: the hex SHA-256 of its bytes.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// LoadFile reads a module from a file and loads it; errors name the file.
func (r *Runtime) LoadFile(ctx context.Context, path string) (*Module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read plugin %s: %w", path, err)
	}
	m, err := r.Load(ctx, b)
	var le *LoadError
	if errors.As(err, &le) {
		le.Source = path
	}
	return m, err
}

// Load checks, compiles and probes a module. Loading the same bytes again returns the same
// *Module without recompiling. Errors are *LoadError.
func (r *Runtime) Load(ctx context.Context, wasm []byte) (*Module, error) {
	if len(wasm) > r.cfg.MaxModuleBytes {
		return nil, &LoadError{Err: ErrModuleTooLarge, Detail: fmt.Sprintf("%d bytes, the limit is %d (spec/abi-v1.md §7); strip debug info (e.g. -ldflags=-s, -C strip=symbols) or shrink the module", len(wasm), r.cfg.MaxModuleBytes)}
	}
	if len(wasm) < 4 || string(wasm[:4]) != "\x00asm" {
		return nil, &LoadError{Err: ErrNotWasm, Detail: fmt.Sprintf("the file starts with %q, not \\0asm; give the compiled .wasm binary (a .wat text file must be assembled first, e.g. wat2wasm)", head(wasm))}
	}
	digest := Digest(wasm)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if m, ok := r.modules[digest]; ok {
		r.mu.Unlock()
		return m, nil
	}
	if c, ok := r.loading[digest]; ok {
		r.mu.Unlock()
		select {
		case <-c.done:
			return c.m, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &loadCall{done: make(chan struct{})}
	if r.loading == nil {
		r.loading = make(map[string]*loadCall)
	}
	r.loading[digest] = c
	r.mu.Unlock()

	c.m, c.err = r.load(ctx, wasm, digest)
	r.mu.Lock()
	delete(r.loading, digest)
	if c.err == nil {
		r.modules[digest] = c.m
	}
	r.mu.Unlock()
	close(c.done)
	return c.m, c.err
}

func head(b []byte) []byte {
	if len(b) > 8 {
		return b[:8]
	}
	return b
}

func (r *Runtime) load(ctx context.Context, wasm []byte, digest string) (*Module, error) {
	fail := func(err error, format string, args ...any) error {
		return &LoadError{Digest: digest, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	exportFuel := map[string]int64{"_initialize": r.cfg.InitFuel}
	for _, s := range abiExports {
		if s.name != "_initialize" {
			exportFuel[s.name] = r.cfg.Fuel
		}
	}
	inst, parsed, err := wasmbin.Instrument(wasm, wasmbin.Limits{InitialFuel: r.cfg.InitFuel, MaxDepth: r.cfg.MaxCallDepth, ExportFuel: exportFuel,
		MaxMemoryPages: r.cfg.MaxMemoryPages, MaxTableElements: r.cfg.MaxTableElements, MoveStart: true, LocalFuel: !r.referenceFuel})
	if err == nil && r.unguarded {
		inst = wasm
	}
	if err != nil {
		if errors.Is(err, wasmbin.ErrUnsupportedFeature) {
			return nil, fail(ErrUnsupportedFeature, "%v", err)
		}
		return nil, fail(ErrInvalidModule, "%v", err)
	}
	m := &Module{rt: r, Digest: digest, Size: len(wasm)}

	// Imports decide the profile.
	m.Profile = ProfilePortable
	for _, im := range parsed.Imports {
		m.Imports = append(m.Imports, im.Module+"."+im.Name)
		if im.Module != wasiModule {
			return nil, fail(ErrForbiddenImport, "imports %s.%s (a %s); portable modules import nothing and wasi-deterministic modules import only listed %s functions (spec/abi-v1.md §6)", im.Module, im.Name, im.Kind, wasiModule)
		}
		wf, ok := wasiFuncs[im.Name]
		if im.Kind != wasmbin.KindFunc || !ok {
			return nil, fail(ErrForbiddenImport, "imports %s.%s, which the wasi-deterministic profile does not provide (allowed: args_get, args_sizes_get, clock_time_get, environ_get, environ_sizes_get, fd_write, poll_oneoff, proc_exit, random_get, sched_yield; spec/abi-v1.md §6.2)", im.Module, im.Name)
		}
		if want := valTypes(wf.params, wf.results); !want.Equal(im.Type) {
			return nil, fail(ErrForbiddenImport, "imports %s.%s with signature %s; the profile defines %s", im.Module, im.Name, im.Type, want)
		}
		m.Profile = ProfileWASIDeterministic
	}

	// Exports.
	if err := m.checkExports(parsed); err != nil {
		return nil, &LoadError{Digest: digest, Err: errOf(err), Detail: err.Error()}
	}
	m.growsMemory = parsed.GrowsMemory
	exp, _ := parsed.Export("memory")
	mem, _ := parsed.Memory(exp.Index)
	m.InitialPages = uint32(mem.Min)
	if mem.Min > uint64(r.cfg.MaxMemoryPages) {
		return nil, fail(ErrMemoryLimit, "declares %d initial memory pages (%d MiB); the limit is %d pages (%d MiB)", mem.Min, mem.Min/16, r.cfg.MaxMemoryPages, r.cfg.MaxMemoryPages/16)
	}
	if err := checkLoad(parsed, r.cfg.MaxTableElements); err != nil {
		return nil, &LoadError{Digest: digest, Err: errOf(err), Detail: err.Error()}
	}

	if m.Profile == ProfileWASIDeterministic {
		if err := r.ensureWASI(ctx); err != nil {
			return nil, fail(ErrInvalidModule, "cannot provide the WASI host module: %v", err)
		}
	}
	m.compiled, err = r.rt.CompileModule(ctx, inst)
	if err != nil {
		return nil, fail(ErrInvalidModule, "%v", err)
	}
	// Probe: one instance reads the version and metadata and checks the buffer protocol.
	in, err := m.newInstance(ctx, nil, true)
	if err != nil {
		_ = m.compiled.Close(ctx)
		var le *LoadError
		if errors.As(err, &le) {
			return nil, err
		}
		var ce *CallError
		if errors.As(err, &ce) {
			return nil, &LoadError{Digest: digest, Err: ce.Err, Detail: fmt.Sprintf("while loading: %s: %s", ce.Op, ce.Detail)}
		}
		return nil, fail(ErrInvalidModule, "%v", err)
	}
	in.close(ctx)
	return m, nil
}

func (r *Runtime) ensureWASI(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wasi != nil {
		return nil
	}
	w, err := instantiateWASI(ctx, r.rt)
	if err != nil {
		return err
	}
	r.wasi = w
	return nil
}

func valTypes(params, results []api.ValueType) wasmbin.FuncType {
	var t wasmbin.FuncType
	for _, p := range params {
		t.Params = append(t.Params, wasmbin.ValType(p))
	}
	for _, r := range results {
		t.Results = append(t.Results, wasmbin.ValType(r))
	}
	return t
}

// checkLoad applies the structural checks of spec/abi-v1.md §7.3, in their order: the table
// limit, then the bounds of active element and data segments, which the core specification
// requires and wazero does not check for element segments.
func checkLoad(p *wasmbin.Module, maxTable uint64) error {
	var sum uint64
	for i, t := range p.Tables {
		if t.Min > maxTable {
			return &exportError{ErrTableLimit, fmt.Sprintf("table %d declares %d initial elements; the limit is %d (spec/abi-v1.md §7.3)", i, t.Min, maxTable)}
		}
		max := maxTable
		if t.HasMax && t.Max < max {
			max = t.Max
		}
		sum += max
	}
	if sum > maxTable {
		return &exportError{ErrTableLimit, fmt.Sprintf("%d tables could grow to %d elements together; the limit is %d: declare maxima that sum to at most the limit (spec/abi-v1.md §7.3)", len(p.Tables), sum, maxTable)}
	}
	for i, s := range p.Elements {
		if int(s.Index) >= len(p.Tables) {
			return &exportError{ErrInvalidModule, fmt.Sprintf("element segment %d initialises table %d, which the module does not define", i, s.Index)}
		}
		if !s.OffsetOK {
			return &exportError{ErrInvalidModule, fmt.Sprintf("element segment %d: the offset must be a constant i32.const (spec/abi-v1.md §7.3)", i)}
		}
		if uint64(s.Offset)+s.Count > p.Tables[s.Index].Min {
			return &exportError{ErrInvalidModule, fmt.Sprintf("element segment %d writes elements [%d, %d) of table %d, which has %d: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)", i, s.Offset, uint64(s.Offset)+s.Count, s.Index, p.Tables[s.Index].Min)}
		}
	}
	for i, s := range p.Data {
		mem, ok := p.Memory(s.Index)
		if !ok {
			return &exportError{ErrInvalidModule, fmt.Sprintf("data segment %d initialises memory %d, which the module does not define", i, s.Index)}
		}
		if !s.OffsetOK {
			return &exportError{ErrInvalidModule, fmt.Sprintf("data segment %d: the offset must be a constant i32.const (spec/abi-v1.md §7.3)", i)}
		}
		if uint64(s.Offset)+s.Count > mem.Min*65536 {
			return &exportError{ErrInvalidModule, fmt.Sprintf("data segment %d writes bytes [%d, %d) of memory %d, which has %d: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)", i, s.Offset, uint64(s.Offset)+s.Count, s.Index, mem.Min*65536)}
		}
	}
	return nil
}
