package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"pctl.dev/pctl/runtime/internal/wasmbin"
)

// Profile is an import profile of spec/abi-v1.md §6.
type Profile string

// Import profiles.
const (
	ProfilePortable          Profile = "portable"
	ProfileWASIDeterministic Profile = "wasi-deterministic"
)

// Metadata is the document a module returns from pctl_metadata (spec/abi-v1.md §2.6).
type Metadata struct {
	Name        string   `json:"name"`
	Version     string   `json:"version"`
	Description string   `json:"description,omitempty"`
	Properties  []string `json:"properties,omitempty"`
}

// Has reports whether the metadata declares a property.
func (md Metadata) Has(prop string) bool {
	for _, p := range md.Properties {
		if p == prop {
			return true
		}
	}
	return false
}

// CompatibleWith returns the built-in names the module claims compatibility with
// ("compatible:<name>" properties).
func (md Metadata) CompatibleWith() []string {
	var out []string
	for _, p := range md.Properties {
		if len(p) > len("compatible:") && p[:len("compatible:")] == "compatible:" {
			out = append(out, p[len("compatible:"):])
		}
	}
	return out
}

// Module is a loaded, validated and compiled partitioner module. It is safe for concurrent use.
type Module struct {
	rt       *Runtime
	compiled wazero.CompiledModule
	// growsMemory: the code has a memory.grow. Without one (the built-ins) an instance's memory
	// never moves, and its buffer view, once taken, stays valid.
	growsMemory bool

	Digest       string   // hex SHA-256 of the module bytes
	Size         int      // bytes
	Profile      Profile  // import profile
	Imports      []string // "module.name" of each import
	ABIVersion   int32    // from pctl_abi_version
	Metadata     Metadata // from pctl_metadata, or the defaults of §2.6
	InitialPages uint32   // declared initial memory

	HasInitialize, HasConfigure, HasMetadata, HasBatch, HasAncestry bool
}

// Exports lists the ABI exports the module has, required and optional, sorted.
func (m *Module) Exports() []string {
	out := []string{"memory", "pctl_abi_version", "pctl_key_buffer", "pctl_partition"}
	for _, o := range []struct {
		has  bool
		name string
	}{{m.HasInitialize, "_initialize"}, {m.HasConfigure, "pctl_configure"}, {m.HasMetadata, "pctl_metadata"},
		{m.HasBatch, "pctl_partition_batch"}, {m.HasAncestry, "pctl_ancestry"}} {
		if o.has {
			out = append(out, o.name)
		}
	}
	sort.Strings(out)
	return out
}

// Runtime returns the runtime that loaded the module.
func (m *Module) Runtime() *Runtime { return m.rt }

// String names the module for messages: "name (sha256:0123456789ab)".
func (m *Module) String() string {
	return fmt.Sprintf("%s (sha256:%s)", m.Metadata.Name, short(m.Digest))
}

type exportSpec struct {
	name     string
	required bool
	sig      wasmbin.FuncType
}

var (
	tI32 = wasmbin.I32
	tI64 = wasmbin.I64
)

var abiExports = []exportSpec{
	{"pctl_abi_version", true, wasmbin.FuncType{Results: []wasmbin.ValType{tI32}}},
	{"pctl_key_buffer", true, wasmbin.FuncType{Params: []wasmbin.ValType{tI32}, Results: []wasmbin.ValType{tI32}}},
	{"pctl_partition", true, wasmbin.FuncType{Params: []wasmbin.ValType{tI32, tI32}, Results: []wasmbin.ValType{tI32}}},
	{"_initialize", false, wasmbin.FuncType{}},
	{"pctl_configure", false, wasmbin.FuncType{Params: []wasmbin.ValType{tI32}, Results: []wasmbin.ValType{tI32}}},
	{"pctl_metadata", false, wasmbin.FuncType{Results: []wasmbin.ValType{tI64}}},
	{"pctl_partition_batch", false, wasmbin.FuncType{Params: []wasmbin.ValType{tI32, tI32}, Results: []wasmbin.ValType{tI32}}},
	{"pctl_ancestry", false, wasmbin.FuncType{Params: []wasmbin.ValType{tI32, tI32, tI32}, Results: []wasmbin.ValType{tI32}}},
}

type exportError struct {
	err error
	msg string
}

func (e *exportError) Error() string { return e.msg }

func errOf(err error) error {
	if e, ok := err.(*exportError); ok {
		return e.err
	}
	return ErrInvalidModule
}

func (m *Module) checkExports(p *wasmbin.Module) error {
	mem, ok := p.Export("memory")
	if !ok {
		return &exportError{ErrMissingExport, "no export \"memory\": a pctl module exports its linear memory as \"memory\" (spec/abi-v1.md §2)"}
	}
	if mem.Kind != wasmbin.KindMemory {
		return &exportError{ErrBadSignature, fmt.Sprintf("export \"memory\" is a %s, not a memory", mem.Kind)}
	}
	for _, s := range abiExports {
		e, ok := p.Export(s.name)
		if !ok {
			if s.required {
				hint := ""
				if s.name == "pctl_abi_version" {
					hint = "; is this a pctl partitioner?"
				}
				return &exportError{ErrMissingExport, fmt.Sprintf("no export %q %s (spec/abi-v1.md §2)%s", s.name, s.sig, hint)}
			}
			continue
		}
		if e.Kind != wasmbin.KindFunc {
			return &exportError{ErrBadSignature, fmt.Sprintf("export %q is a %s; want a function %s", s.name, e.Kind, s.sig)}
		}
		t, ok := p.FuncType(e.Index)
		if !ok {
			return &exportError{ErrInvalidModule, fmt.Sprintf("export %q names function %d, which does not exist", s.name, e.Index)}
		}
		if !t.Equal(s.sig) {
			return &exportError{ErrBadSignature, fmt.Sprintf("export %q has signature %s; spec/abi-v1.md §2 requires %s", s.name, t, s.sig)}
		}
		switch s.name {
		case "_initialize":
			m.HasInitialize = true
		case "pctl_configure":
			m.HasConfigure = true
		case "pctl_metadata":
			m.HasMetadata = true
		case "pctl_partition_batch":
			m.HasBatch = true
		case "pctl_ancestry":
			m.HasAncestry = true
		}
	}
	return nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// MaxMetadataDepth is how deep arrays and objects may nest in a metadata document
// (spec/abi-v1.md §2.6, rule 3).
const MaxMetadataDepth = 32

// parseMetadata applies the rules of spec/abi-v1.md §2.6, which every host applies alike: strict
// UTF-8 without a byte-order mark, one RFC 8259 JSON object nested at most MaxMetadataDepth deep,
// keys matched exactly (encoding/json's struct decoding would match "Name" too), null as absent,
// and the types of the four known keys.
func parseMetadata(b []byte) (Metadata, error) {
	var md Metadata
	notJSON := func(why string) (Metadata, error) {
		return md, fmt.Errorf("pctl_metadata returned %d bytes that are not a JSON object: %s", len(b), why)
	}
	if !utf8.Valid(b) {
		return notJSON("not valid UTF-8 (spec/abi-v1.md §2.6)")
	}
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		return notJSON("it starts with a byte-order mark (spec/abi-v1.md §2.6)")
	}
	if d := jsonDepth(b); d > MaxMetadataDepth {
		return notJSON(fmt.Sprintf("arrays and objects nest %d deep; at most %d are allowed (spec/abi-v1.md §2.6)", d, MaxMetadataDepth))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return notJSON(err.Error())
	}
	if obj == nil { // the document is null
		return notJSON("it is null")
	}
	str := func(key string) (string, bool, error) {
		raw, ok := obj[key]
		if !ok || string(raw) == "null" {
			return "", false, nil
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", false, fmt.Errorf("metadata %q must be a string (spec/abi-v1.md §2.6)", key)
		}
		return v, true, nil
	}
	var err error
	if md.Name, _, err = str("name"); err != nil {
		return md, err
	}
	if md.Version, _, err = str("version"); err != nil {
		return md, err
	}
	if md.Description, _, err = str("description"); err != nil {
		return md, err
	}
	if raw, ok := obj["properties"]; ok && string(raw) != "null" {
		var props []json.RawMessage
		if err := json.Unmarshal(raw, &props); err != nil {
			return md, fmt.Errorf("metadata \"properties\" must be a list of strings (spec/abi-v1.md §2.6)")
		}
		for _, p := range props {
			var v string
			if string(p) == "null" || json.Unmarshal(p, &v) != nil {
				return md, fmt.Errorf("metadata \"properties\" must be a list of strings (spec/abi-v1.md §2.6)")
			}
			md.Properties = append(md.Properties, v)
		}
	}
	if !nameRE.MatchString(md.Name) {
		return md, fmt.Errorf("metadata name %q must match [a-z0-9][a-z0-9-]{0,62} (spec/abi-v1.md §2.6)", md.Name)
	}
	if md.Version == "" {
		return md, fmt.Errorf("metadata has no \"version\" (spec/abi-v1.md §2.6)")
	}
	return md, nil
}

// jsonDepth returns how deep arrays and objects nest in b, read as JSON (brackets inside strings
// do not count). It does not validate anything else.
func jsonDepth(b []byte) int {
	depth, max := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max
}

// newInstance instantiates and prepares one instance: _initialize, version check, buffer,
// configure. With probe set it also reads the metadata into m (only Load does that).
func (m *Module) newInstance(ctx context.Context, config []byte, probe bool) (*instance, error) {
	cfg := &m.rt.cfg
	ws := newWASIState(cfg)
	in := &instance{m: m, ws: ws, ctx: context.Background()}
	mod, err := m.rt.rt.InstantiateModule(context.WithValue(ctx, wasiKey{}, ws), m.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, &CallError{Digest: m.Digest, Name: m.displayName(), Op: "instantiate", Err: ErrTrap, Detail: err.Error()}
	}
	in.mod = mod
	if m.Profile == ProfileWASIDeterministic {
		wasiStates.Store(mod, ws)
		in.wasiRegistered = true
	}
	in.mem = mod.ExportedMemory("memory")
	if !m.rt.unguarded {
		in.fuel = mod.ExportedGlobal(wasmbin.FuelExport).(api.MutableGlobal)
		in.depth = mod.ExportedGlobal(wasmbin.DepthExport)
		in.memFail = mod.ExportedGlobal(wasmbin.MemFailExport)
		ws.fuel = in.fuel
	}
	in.fnPartition = mod.ExportedFunction("pctl_partition")
	in.fnBatch = mod.ExportedFunction("pctl_partition_batch")
	in.fnAncestry = mod.ExportedFunction("pctl_ancestry")
	ok := false
	defer func() {
		if !ok {
			in.close(ctx)
		}
	}()
	// The start function, moved to an export by the instrumentation: it runs here, under its own
	// budget, so that a limit it hits is reported as that limit (spec/abi-v1.md §7).
	if start := mod.ExportedFunction(wasmbin.StartExport); start != nil && !m.rt.unguarded {
		in.stack[0] = 0
		if err := start.CallWithStack(in.ctx, in.stack[:1]); err != nil {
			return nil, in.fail("start", err)
		}
	}
	if m.HasInitialize {
		if _, err := in.call("_initialize", mod.ExportedFunction("_initialize")); err != nil {
			return nil, err
		}
	}
	res, err := in.call("pctl_abi_version", mod.ExportedFunction("pctl_abi_version"))
	if err != nil {
		return nil, err
	}
	ver := int32(uint32(res[0]))
	if probe {
		m.ABIVersion = ver
	}
	if ver != ABIVersion {
		return nil, &LoadError{Digest: m.Digest, Err: ErrUnsupportedABI, Detail: fmt.Sprintf("module declares ABI version %d; this host supports %d; upgrade pctl or rebuild the module against spec/abi-v1.md", ver, ABIVersion)}
	}
	if probe {
		m.Metadata = Metadata{Name: "unnamed", Version: "0.0.0"}
		if m.HasMetadata {
			res, err := in.call("pctl_metadata", mod.ExportedFunction("pctl_metadata"))
			if err != nil {
				return nil, err
			}
			ptr, n := uint32(res[0]>>32), uint32(res[0])
			if n > MaxMetadataBytes {
				return nil, &LoadError{Digest: m.Digest, Err: ErrBadMetadata, Detail: fmt.Sprintf("pctl_metadata returned %d bytes; the limit is %d", n, MaxMetadataBytes)}
			}
			b, okr := in.mem.Read(ptr, n)
			if !okr {
				return nil, &LoadError{Digest: m.Digest, Err: ErrBadMetadata, Detail: fmt.Sprintf("pctl_metadata points at [%d, %d), outside memory (%d bytes)", ptr, uint64(ptr)+uint64(n), in.mem.Size())}
			}
			md, err := parseMetadata(b)
			if err != nil {
				return nil, &LoadError{Digest: m.Digest, Err: ErrBadMetadata, Detail: err.Error()}
			}
			m.Metadata = md
		}
		if m.Metadata.Has("ancestry") && !m.HasAncestry {
			return nil, &LoadError{Digest: m.Digest, Err: ErrBadMetadata, Detail: "metadata declares the \"ancestry\" property but the module does not export pctl_ancestry"}
		}
	}
	res, err = in.call1("pctl_key_buffer", mod.ExportedFunction("pctl_key_buffer"), uint64(cfg.BufferBytes))
	if err != nil {
		return nil, err
	}
	in.buf = uint32(res[0])
	in.bufSize = uint32(cfg.BufferBytes)
	if in.buf == 0 || uint64(in.buf)+uint64(in.bufSize) > uint64(in.mem.Size()) {
		return nil, &LoadError{Digest: m.Digest, Err: ErrBadBuffer, Detail: fmt.Sprintf("pctl_key_buffer(%d) returned %d; memory is %d bytes; the module must return a non-zero address of a region of that size inside memory (spec/abi-v1.md §2.2)", in.bufSize, in.buf, in.mem.Size())}
	}
	if len(config) > MaxConfigBytes {
		return nil, &LoadError{Digest: m.Digest, Err: ErrConfigTooLarge, Detail: fmt.Sprintf("%d bytes; the limit is %d", len(config), MaxConfigBytes)}
	}
	if probe {
		// The probe checks the module, not a topic's config: a module may require config.
	} else if m.HasConfigure {
		in.refreshView()
		copy(in.view, config)
		res, err := in.call1("pctl_configure", mod.ExportedFunction("pctl_configure"), uint64(len(config)))
		if err != nil {
			return nil, err
		}
		if code := int32(uint32(res[0])); code != 0 {
			detail := fmt.Sprintf("config of %d bytes %q", len(config), truncate(config, 80))
			if code == CodeConfig {
				return nil, &CallError{Digest: m.Digest, Name: m.displayName(), Op: "pctl_configure", Err: ErrConfigRejected, Code: code, Detail: detail + "; check the --config values against the plugin's documentation"}
			}
			return nil, &CallError{Digest: m.Digest, Name: m.displayName(), Op: "pctl_configure", Err: ErrPluginCode, Code: code, Detail: detail}
		}
	} else if len(config) > 0 {
		return nil, &CallError{Digest: m.Digest, Name: m.displayName(), Op: "pctl_configure", Err: ErrConfigUnsupported, Detail: fmt.Sprintf("it does not export pctl_configure, so its topic config must be empty (got %d bytes)", len(config))}
	}
	in.refreshView()
	ok = true
	return in, nil
}

func (m *Module) displayName() string {
	if m.Metadata.Name == "" {
		return "unnamed"
	}
	return m.Metadata.Name
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
