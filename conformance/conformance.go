package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"pctl.dev/pctl/runtime"
)

// Options configures Check. The zero value means every default.
type Options struct {
	// Keys is the number of seeded random keys each check uses, besides the fixed keys (the empty
	// key, every single byte, long keys up to PCTL_MAX_KEY). Default 20000 (pctl conformance
	// --keys). The interpreter runs a thirtieth of them.
	Keys int

	// Seed seeds the random keys. Default 1: the same seed gives the same keys, so a failure
	// reproduces exactly (pctl conformance --seed).
	Seed uint64

	// Config is the config every instance gets: canonical bytes as partitioner.EncodeConfig
	// produces them from --config K=V flags (spec/abi-v1.md §2.5). Default empty.
	Config []byte

	// CacheDir, if set, is a directory for wazero's compilation cache, shared by the runtimes
	// Check creates and with other pctl commands. A module built by the Go toolchain takes about
	// a second to compile; the cache makes the second check of it fast. Default: no disk cache.
	CacheDir string

	// Progress, if set, is called before each check that runs the module (range, determinism,
	// limits, ancestry, compatibility, balance) with its name, its index and the number of such
	// checks: 'pctl conformance' shows it on a terminal. Default: none.
	Progress func(check string, i, n int)
}

// DefaultKeys is the default of Options.Keys.
const DefaultKeys = 20000

func (o Options) withDefaults() Options {
	if o.Keys <= 0 {
		o.Keys = DefaultKeys
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// Status is the outcome of one check.
type Status string

const (
	// StatusPass: the module satisfies the check.
	StatusPass Status = "pass"
	// StatusFail: the module breaks the ABI; hosts may refuse or misuse it. The report fails.
	StatusFail Status = "fail"
	// StatusWarn: the module conforms but something deserves attention (slow calls, much memory,
	// poor balance). The report still passes.
	StatusWarn Status = "warn"
	// StatusSkip: the check does not apply (no ancestry declared, no compatibility claimed), or
	// could not run because an earlier check failed; the reason says which.
	StatusSkip Status = "skip"
)

// Names of the checks, in the order they run and are reported. They are stable: tools and CI
// scripts match on them.
const (
	CheckABI           = "abi"
	CheckImports       = "imports"
	CheckRange         = "range"
	CheckDeterminism   = "determinism"
	CheckLimits        = "limits"
	CheckAncestry      = "ancestry"
	CheckCompatibility = "compatibility"
	CheckBalance       = "balance"
)

// Checks returns the names of all checks in report order.
func Checks() []string {
	return []string{CheckABI, CheckImports, CheckRange, CheckDeterminism, CheckLimits, CheckAncestry, CheckCompatibility, CheckBalance}
}

// Result is the outcome of one check. Reason is one line for humans; Details holds the numbers
// behind it (its JSON shape per check is documented in spec/conformance.md).
type Result struct {
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Reason  string `json:"reason"`
	Details any    `json:"details,omitempty"`
}

// ModuleInfo describes the checked module. For a module that did not load, only Digest and Size
// (and Source, if the caller set it) are known.
type ModuleInfo struct {
	Digest      string   `json:"digest"` // hex SHA-256 of the bytes (spec/abi-v1.md §1)
	Source      string   `json:"source,omitempty"`
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	Description string   `json:"description,omitempty"`
	ABIVersion  int32    `json:"abi_version"`
	Profile     string   `json:"profile"`
	Size        int      `json:"size"`
	Imports     []string `json:"imports"`
	Exports     []string `json:"exports"`
	Properties  []string `json:"properties"`
}

// RunOptions records what the checker used, so that a report can be reproduced.
type RunOptions struct {
	Keys   int    `json:"keys"`
	Seed   uint64 `json:"seed"`
	Config string `json:"config"` // the config bytes, as a string (canonical "K=V\n" lines)
	Engine string `json:"engine"` // "wazero <version>": compiler, and interpreter for determinism
}

// SchemaVersion is the version of the JSON report's layout (Report.Schema). It changes only
// when a field changes meaning or disappears; new fields may appear within a version.
const SchemaVersion = 1

// Report is the outcome of Check.
type Report struct {
	Schema  int        `json:"schema"`
	Module  ModuleInfo `json:"module"`
	Options RunOptions `json:"options"`
	Results []Result   `json:"results"`
	Passed  bool       `json:"passed"` // no result is "fail"
}

// Result returns the result of the named check.
func (r *Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res, true
		}
	}
	return Result{}, false
}

// Failed returns the names of the failed checks, in report order.
func (r *Report) Failed() []string {
	var out []string
	for _, res := range r.Results {
		if res.Status == StatusFail {
			out = append(out, res.Name)
		}
	}
	return out
}

func (r *Report) finish() {
	r.Passed = true
	for _, res := range r.Results {
		if res.Status == StatusFail {
			r.Passed = false
		}
	}
}

// Check runs every check on a module and reports each one. Everything wrong with the module,
// including bytes that are not WebAssembly at all or a config the module rejects, is a failed
// Result; the error is non-nil only when the checker itself cannot run (ctx cancelled, the
// WebAssembly engine cannot start).
//
// A module the runtime refuses to load fails the check that owns the violated rule, with the
// runtime's own message: imports for a forbidden import; limits for a module above 8 MiB, more
// than 512 initial memory pages, or initialisation that exceeds a limit; abi for everything
// else (not WebAssembly, malformed, missing or mistyped export, ABI version, metadata, buffer).
// The checks that need a running module are then "skip" ("module did not load").
//
// Check is deterministic in everything but wall-clock timings (limits): the same bytes, options
// and pctl version give the same statuses and reasons. It is safe for concurrent use; each call
// has its own runtimes.
func Check(ctx context.Context, wasm []byte, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	c := &checker{ctx: ctx, opts: opts, wasm: wasm}
	defer c.close()
	rep := &Report{
		Schema:  SchemaVersion,
		Module:  ModuleInfo{Digest: runtime.Digest(wasm), Size: len(wasm), Imports: []string{}, Exports: []string{}, Properties: []string{}},
		Options: RunOptions{Keys: opts.Keys, Seed: opts.Seed, Config: string(opts.Config), Engine: engineName()},
	}
	rt, err := c.newRuntime(runtime.Config{})
	if err != nil {
		return nil, err
	}
	c.rt = rt
	m, err := rt.Load(ctx, wasm)
	if err != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var le *runtime.LoadError
		if !errors.As(err, &le) {
			return nil, fmt.Errorf("conformance: load: %w", err)
		}
		rep.Results = loadFailure(le)
		rep.finish()
		return rep, nil
	}
	c.m = m
	rep.Module = moduleInfo(m)

	// The lifecycle of spec/abi-v1.md §3 with the caller's config: instantiate, _initialize,
	// version, buffer, configure. A failure here (a rejected config included) is an abi failure.
	c.pool, err = m.NewPool(ctx, opts.Config, runtime.PoolOptions{Size: 1})
	if err != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rep.Results = instanceFailure(m, opts.Config, err)
		rep.finish()
		return rep, nil
	}
	rep.Results = append(rep.Results, abiPass(m, opts.Config), importsPass(m))

	// Making millions of keys takes seconds: an interrupt must not wait for it.
	made := make(chan keySet, 1)
	go func() { made <- makeKeys(opts.Keys, opts.Seed) }()
	select {
	case c.keys = <-made:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	steps := []func() (Result, error){c.checkRange, c.checkDeterminism, c.checkLimits, c.checkAncestry, c.checkCompatibility, c.checkBalance}
	names := []string{CheckRange, CheckDeterminism, CheckLimits, CheckAncestry, CheckCompatibility, CheckBalance}
	for i, step := range steps {
		if opts.Progress != nil {
			opts.Progress(names[i], i, len(steps))
		}
		res, err := step()
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	rep.finish()
	return rep, nil
}

// checker holds what the checks share: the module on the main (compiler) runtime, the keys, and
// the results of range, which later checks reuse instead of calling the module again.
type checker struct {
	ctx  context.Context
	opts Options
	wasm []byte

	rt   *runtime.Runtime // compiler, default limits
	m    *runtime.Module
	pool *runtime.Pool // the first pool, created with the caller's config

	keys keySet

	// Filled by checkRange: results[j][i] is the partition of keys.all[i] among rangeNs[j].
	results   [][]int32
	rangeOK   bool
	rangeFail *callFailure
	reused    *runtime.Instance // the instance range used, kept for determinism's reuse run
	reusedEnd func()

	peakPages uint32
	runtimes  []*runtime.Runtime
	closers   []func()
}

func (c *checker) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	if c.pool != nil {
		c.pool.Close()
	}
	for _, rt := range c.runtimes {
		_ = rt.Close(context.Background())
	}
}

func (c *checker) newRuntime(cfg runtime.Config) (*runtime.Runtime, error) {
	cfg.CacheDir = c.opts.CacheDir
	rt, err := runtime.New(c.ctx, cfg)
	if err != nil && cfg.CacheDir != "" { // an unusable cache directory: compile in memory
		cfg.CacheDir = ""
		rt, err = runtime.New(c.ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("conformance: start a %s runtime: %w", cfg.Engine, err)
	}
	c.runtimes = append(c.runtimes, rt)
	return rt, nil
}

// fresh returns a new instance of m (in a new pool of one, so it has never answered a call)
// and the function that releases it, recording its memory for the limits check.
func (c *checker) fresh(m *runtime.Module) (*runtime.Instance, func(), error) {
	p, err := m.NewPool(c.ctx, c.opts.Config, runtime.PoolOptions{Size: 1})
	if err != nil {
		return nil, nil, err
	}
	in, err := p.Acquire()
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	done := false
	return in, func() {
		if done {
			return
		}
		done = true
		c.notePages(in.MemoryPages())
		in.Release()
		p.Close()
	}, nil
}

func (c *checker) notePages(p uint32) {
	if p > c.peakPages {
		c.peakPages = p
	}
}

// cancelled is polled by long loops.
func (c *checker) cancelled(i int) error {
	if i&1023 == 0 {
		return c.ctx.Err()
	}
	return nil
}

func moduleInfo(m *runtime.Module) ModuleInfo {
	mi := ModuleInfo{
		Digest: m.Digest, Name: m.Metadata.Name, Version: m.Metadata.Version, Description: m.Metadata.Description,
		ABIVersion: m.ABIVersion, Profile: string(m.Profile), Size: m.Size,
		Imports: append([]string{}, m.Imports...), Exports: m.Exports(), Properties: append([]string{}, m.Metadata.Properties...),
	}
	return mi
}

// LoadFailure is the Details of the check that failed because the module did not load or could
// not be instantiated.
type LoadFailure struct {
	Error string `json:"error"` // the runtime's full message
}

// loadFailure reports a module the runtime refused, at the check that owns the broken rule.
func loadFailure(le *runtime.LoadError) []Result {
	owner := CheckABI
	switch {
	case errors.Is(le, runtime.ErrForbiddenImport):
		owner = CheckImports
	case errors.Is(le, runtime.ErrModuleTooLarge), errors.Is(le, runtime.ErrMemoryLimit), errors.Is(le, runtime.ErrTableLimit),
		errors.Is(le, runtime.ErrTimeLimit), errors.Is(le, runtime.ErrCallDepth):
		owner = CheckLimits
	}
	reason := le.Err.Error()
	if le.Detail != "" {
		reason += ": " + le.Detail
	}
	var out []Result
	for _, name := range Checks() {
		if name == owner {
			out = append(out, Result{Name: name, Status: StatusFail, Reason: oneLine(reason), Details: LoadFailure{Error: le.Error()}})
		} else {
			out = append(out, Result{Name: name, Status: StatusSkip, Reason: "module did not load"})
		}
	}
	return out
}

// instanceFailure reports a module that loaded but whose instance could not be prepared with
// the caller's config (spec/abi-v1.md §3): a rejected config, a trap in _initialize...
func instanceFailure(m *runtime.Module, config []byte, err error) []Result {
	reason := callErrText(err)
	switch {
	case errors.Is(err, runtime.ErrConfigRejected):
		reason = fmt.Sprintf("plugin rejected the config %s (PCTL_E_CONFIG); check with a config it accepts (--config K=V)", configDesc(config))
	case errors.Is(err, runtime.ErrConfigUnsupported):
		reason = fmt.Sprintf("plugin takes no configuration (no pctl_configure export), but the config is %s; drop --config", configDesc(config))
	default:
		reason = "could not prepare an instance: " + reason
	}
	out := []Result{
		{Name: CheckABI, Status: StatusFail, Reason: oneLine(reason), Details: LoadFailure{Error: err.Error()}},
		importsPass(m),
	}
	for _, name := range Checks()[2:] {
		out = append(out, Result{Name: name, Status: StatusSkip, Reason: "no instance could be created (see abi)"})
	}
	return out
}

// ABIDetails is the Details of a passed abi check.
type ABIDetails struct {
	ABIVersion   int32    `json:"abi_version"`
	Exports      []string `json:"exports"`
	InitialPages uint32   `json:"initial_memory_pages"`
	Configurable bool     `json:"configurable"`
	ConfigBytes  int      `json:"config_bytes"`
}

func abiPass(m *runtime.Module, config []byte) Result {
	var optional []string
	for _, e := range m.Exports() {
		switch e {
		case "memory", "pctl_abi_version", "pctl_key_buffer", "pctl_partition":
		default:
			optional = append(optional, e)
		}
	}
	reason := fmt.Sprintf("ABI v%d, required exports present", m.ABIVersion)
	if len(optional) > 0 {
		reason += "; optional: " + strings.Join(optional, ", ")
	}
	if len(config) > 0 {
		reason += fmt.Sprintf("; config of %d bytes accepted", len(config))
	}
	return Result{Name: CheckABI, Status: StatusPass, Reason: reason, Details: ABIDetails{
		ABIVersion: m.ABIVersion, Exports: m.Exports(), InitialPages: m.InitialPages, Configurable: m.HasConfigure, ConfigBytes: len(config)}}
}

// ImportsDetails is the Details of the imports check.
type ImportsDetails struct {
	Profile string   `json:"profile"`
	Imports []string `json:"imports"`
}

func importsPass(m *runtime.Module) Result {
	reason := "portable: no imports"
	if m.Profile == runtime.ProfileWASIDeterministic {
		var names []string
		for _, im := range m.Imports {
			names = append(names, strings.TrimPrefix(im, "wasi_snapshot_preview1."))
		}
		plural := "s"
		if len(names) == 1 {
			plural = ""
		}
		reason = fmt.Sprintf("wasi-deterministic: %d WASI import%s (%s)", len(names), plural, strings.Join(names, ", "))
	}
	return Result{Name: CheckImports, Status: StatusPass, Reason: reason,
		Details: ImportsDetails{Profile: string(m.Profile), Imports: append([]string{}, m.Imports...)}}
}

func configDesc(b []byte) string {
	if len(b) == 0 {
		return "(empty)"
	}
	// %q escapes the newlines once ("mode=fast\n"); escaping them before would show "\\n".
	if len(b) > 60 {
		return fmt.Sprintf("%q...", b[:60])
	}
	return fmt.Sprintf("%q", b)
}

// oneLine keeps a reason to one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", "; ").Replace(s)
}

// callErrText is a call error without the "plugin NAME (sha256:...)" prefix, which the report
// states once: "op: what: detail".
func callErrText(err error) string {
	var ce *runtime.CallError
	if errors.As(err, &ce) {
		s := ce.Op + ": " + ce.Err.Error()
		if errors.Is(ce.Err, runtime.ErrPluginCode) {
			s += " " + runtime.CodeName(ce.Code)
		}
		if ce.Detail != "" {
			s += ": " + ce.Detail
		}
		return oneLine(s)
	}
	var le *runtime.LoadError
	if errors.As(err, &le) {
		s := le.Err.Error()
		if le.Detail != "" {
			s += ": " + le.Detail
		}
		return oneLine(s)
	}
	return oneLine(err.Error())
}
