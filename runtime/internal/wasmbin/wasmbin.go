// Package wasmbin reads the parts of a WebAssembly binary that the pctl host must know before it
// hands the module to wazero (imports, exports, memories, the features it uses), and rewrites
// function bodies to enforce the host's work and call-depth limits without any per-call cost
// outside the guest (see Instrument).
//
// It understands the WebAssembly 2.0 binary format plus the features that spec/abi-v1.md §7.1
// allows. Anything else is reported as an *Error that names the section, the byte offset and
// what was found, so that a module author can act on it.
package wasmbin

import (
	"errors"
	"fmt"
)

// Section ids of the WebAssembly binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// ErrMalformed is wrapped by every error about bytes that are not a well-formed module.
var ErrMalformed = errors.New("malformed WebAssembly module")

// ErrUnsupportedFeature is wrapped by errors about features the ABI does not allow
// (threads, exceptions, tail calls, relaxed SIMD, GC, memory64).
var ErrUnsupportedFeature = errors.New("unsupported WebAssembly feature")

// Error locates a problem in a module's bytes.
type Error struct {
	Offset int    // byte offset in the module
	Where  string // e.g. "code section, function 12"
	Msg    string
	Err    error // ErrMalformed or ErrUnsupportedFeature
}

func (e *Error) Error() string {
	if e.Where == "" {
		return fmt.Sprintf("%s at byte %d", e.Msg, e.Offset)
	}
	return fmt.Sprintf("%s: %s at byte %d", e.Where, e.Msg, e.Offset)
}

func (e *Error) Unwrap() error { return e.Err }

// ValType is a WebAssembly value type byte.
type ValType byte

// Value types.
const (
	I32       ValType = 0x7f
	I64       ValType = 0x7e
	F32       ValType = 0x7d
	F64       ValType = 0x7c
	V128      ValType = 0x7b
	FuncRef   ValType = 0x70
	ExternRef ValType = 0x6f
)

func (v ValType) String() string {
	switch v {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	case V128:
		return "v128"
	case FuncRef:
		return "funcref"
	case ExternRef:
		return "externref"
	}
	return fmt.Sprintf("valtype(0x%02x)", byte(v))
}

// FuncType is a function signature.
type FuncType struct {
	Params, Results []ValType
}

func (t FuncType) String() string {
	s := "("
	for i, p := range t.Params {
		if i > 0 {
			s += ", "
		}
		s += p.String()
	}
	s += ") -> ("
	for i, r := range t.Results {
		if i > 0 {
			s += ", "
		}
		s += r.String()
	}
	return s + ")"
}

// Equal reports whether two signatures are identical.
func (t FuncType) Equal(o FuncType) bool {
	if len(t.Params) != len(o.Params) || len(t.Results) != len(o.Results) {
		return false
	}
	for i := range t.Params {
		if t.Params[i] != o.Params[i] {
			return false
		}
	}
	for i := range t.Results {
		if t.Results[i] != o.Results[i] {
			return false
		}
	}
	return true
}

// ExternKind is the kind of an import or export.
type ExternKind byte

// Extern kinds.
const (
	KindFunc   ExternKind = 0
	KindTable  ExternKind = 1
	KindMemory ExternKind = 2
	KindGlobal ExternKind = 3
	KindTag    ExternKind = 4
)

func (k ExternKind) String() string {
	switch k {
	case KindFunc:
		return "function"
	case KindTable:
		return "table"
	case KindMemory:
		return "memory"
	case KindGlobal:
		return "global"
	case KindTag:
		return "tag"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Import is one entry of the import section.
type Import struct {
	Module, Name string
	Kind         ExternKind
	Type         FuncType // for KindFunc
	TypeIdx      uint32   // for KindFunc
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  ExternKind
	Index uint32
}

// Memory describes a memory's limits, in 64 KiB pages.
type Memory struct {
	Min, Max uint64
	HasMax   bool
	Shared   bool
	Is64     bool
}

// Table describes a table's element type and limits, in elements.
type Table struct {
	RefType  ValType
	Min, Max uint64
	HasMax   bool
}

// Segment is an active element or data segment: what spec/abi-v1.md §7.3 checks before the
// engine sees the module. Passive and declarative segments are not listed.
type Segment struct {
	Index    uint32 // table (element segment) or memory (data segment)
	OffsetOK bool   // the offset expression is exactly `i32.const c`
	Offset   uint32 // c, as unsigned
	Count    uint64 // elements (element segment) or bytes (data segment)
}

// Module is what the host needs to know about a module before compiling it.
type Module struct {
	Types     []FuncType
	Imports   []Import
	Funcs     []uint32 // type index of each defined function
	Tables    []Table  // defined tables
	Memories  []Memory // defined memories
	Exports   []Export
	Elements  []Segment // active element segments, in order
	Data      []Segment // active data segments, in order
	HasStart  bool
	StartFunc uint32
	// GrowsMemory: some function has a memory.grow instruction (set by Instrument). Without
	// one, the module's memory keeps its initial size for the instance's life.
	GrowsMemory bool
	numGlobal   int // defined globals
	impFuncs    int
	impGlob     int
	impMems     []Memory

	sections []section // raw sections, in order
}

type section struct {
	id         byte
	start, end int // content bounds in the original bytes
}

// FuncType returns the signature of function index idx (imports first, then defined functions).
func (m *Module) FuncType(idx uint32) (FuncType, bool) {
	if int(idx) < m.impFuncs {
		n := 0
		for _, im := range m.Imports {
			if im.Kind == KindFunc {
				if n == int(idx) {
					return im.Type, true
				}
				n++
			}
		}
		return FuncType{}, false
	}
	d := int(idx) - m.impFuncs
	if d >= len(m.Funcs) || int(m.Funcs[d]) >= len(m.Types) {
		return FuncType{}, false
	}
	return m.Types[m.Funcs[d]], true
}

// Memory returns the limits of memory index idx (imports first).
func (m *Module) Memory(idx uint32) (Memory, bool) {
	if int(idx) < len(m.impMems) {
		return m.impMems[idx], true
	}
	d := int(idx) - len(m.impMems)
	if d >= len(m.Memories) {
		return Memory{}, false
	}
	return m.Memories[d], true
}

// Export returns the export with the given name.
func (m *Module) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

// Parse reads the module's header, types, imports, functions, memories and exports. It checks the
// structure of every section but leaves full validation to the engine.
func Parse(b []byte) (*Module, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, &Error{Offset: 0, Msg: "not a WebAssembly binary (it does not start with \\0asm)", Err: ErrMalformed}
	}
	if b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return nil, &Error{Offset: 4, Msg: fmt.Sprintf("unsupported binary version %x (a component or a newer format?); pctl takes core WebAssembly version 1 binaries", b[4:8]), Err: ErrUnsupportedFeature}
	}
	m := &Module{}
	r := &reader{b: b, pos: 8}
	var lastID byte
	for r.pos < len(b) {
		idPos := r.pos
		id := r.byte()
		size := r.u32()
		if r.err != nil {
			return nil, r.fail("section header")
		}
		start := r.pos
		end := start + int(size)
		if end > len(b) || end < start {
			return nil, &Error{Offset: idPos, Msg: fmt.Sprintf("section %d claims %d bytes but only %d remain", id, size, len(b)-start), Err: ErrMalformed}
		}
		if id != secCustom {
			if id > secTag {
				return nil, &Error{Offset: idPos, Msg: fmt.Sprintf("unknown section id %d", id), Err: ErrMalformed}
			}
			if order(id) <= order(lastID) && lastID != 0 {
				return nil, &Error{Offset: idPos, Msg: fmt.Sprintf("section %d out of order", id), Err: ErrMalformed}
			}
			lastID = id
		}
		m.sections = append(m.sections, section{id: id, start: start, end: end})
		sr := &reader{b: b[:end], pos: start, where: sectionName(id)}
		var err error
		switch id {
		case secType:
			err = m.parseTypes(sr)
		case secImport:
			err = m.parseImports(sr)
		case secFunction:
			n := sr.u32()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.Funcs = append(m.Funcs, sr.u32())
			}
		case secTable:
			n := sr.u32()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				rt := ValType(sr.byte())
				if sr.err == nil && rt != FuncRef && rt != ExternRef {
					return nil, &Error{Offset: sr.pos - 1, Where: "table section", Msg: fmt.Sprintf("table %d has element type 0x%02x; only funcref and externref are allowed (typed function references are not)", i, byte(rt)), Err: ErrUnsupportedFeature}
				}
				lim := sr.limits()
				if lim.Shared || lim.Is64 {
					return nil, &Error{Offset: sr.pos, Where: "table section", Msg: fmt.Sprintf("table %d has limits flags of a shared or 64-bit table", i), Err: ErrUnsupportedFeature}
				}
				m.Tables = append(m.Tables, Table{RefType: rt, Min: lim.Min, Max: lim.Max, HasMax: lim.HasMax})
			}
		case secMemory:
			n := sr.u32()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.Memories = append(m.Memories, sr.limits())
			}
		case secElement:
			err = m.parseElements(sr)
		case secData:
			err = m.parseData(sr)
		case secGlobal:
			m.numGlobal = int(sr.u32())
			sr.pos = end
		case secExport:
			err = m.parseExports(sr)
		case secStart:
			m.HasStart = true
			m.StartFunc = sr.u32()
		case secTag:
			return nil, &Error{Offset: idPos, Where: "tag section", Msg: "exception handling is not allowed (spec/abi-v1.md §7.1)", Err: ErrUnsupportedFeature}
		default:
			sr.pos = end
		}
		if err != nil {
			return nil, err
		}
		if sr.err != nil {
			return nil, sr.fail("")
		}
		if sr.pos != end {
			return nil, &Error{Offset: sr.pos, Where: sectionName(id), Msg: fmt.Sprintf("section has %d unread bytes", end-sr.pos), Err: ErrMalformed}
		}
		r.pos = end
	}
	for i, mem := range append(append([]Memory(nil), m.impMems...), m.Memories...) {
		if mem.Shared {
			return nil, &Error{Where: "memory section", Msg: fmt.Sprintf("memory %d is shared: threads are not allowed (spec/abi-v1.md §7.1)", i), Err: ErrUnsupportedFeature}
		}
		if mem.Is64 {
			return nil, &Error{Where: "memory section", Msg: fmt.Sprintf("memory %d is a memory64: not allowed (spec/abi-v1.md §7.1)", i), Err: ErrUnsupportedFeature}
		}
	}
	return m, nil
}

func order(id byte) int {
	// Canonical order of non-custom sections; the tag section sits between memory and global.
	switch id {
	case secType:
		return 1
	case secImport:
		return 2
	case secFunction:
		return 3
	case secTable:
		return 4
	case secMemory:
		return 5
	case secTag:
		return 6
	case secGlobal:
		return 7
	case secExport:
		return 8
	case secStart:
		return 9
	case secElement:
		return 10
	case secDataCount:
		return 11
	case secCode:
		return 12
	case secData:
		return 13
	}
	return 0
}

func sectionName(id byte) string {
	names := [...]string{"custom section", "type section", "import section", "function section", "table section",
		"memory section", "global section", "export section", "start section", "element section", "code section",
		"data section", "data count section", "tag section"}
	if int(id) < len(names) {
		return names[id]
	}
	return fmt.Sprintf("section %d", id)
}

func (m *Module) parseTypes(r *reader) error {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		pos := r.pos
		form := r.byte()
		if form != 0x60 {
			return &Error{Offset: pos, Where: "type section", Msg: fmt.Sprintf("type %d has form 0x%02x; only function types (0x60) are allowed (GC types are not)", i, form), Err: ErrUnsupportedFeature}
		}
		var t FuncType
		t.Params = r.valTypes()
		t.Results = r.valTypes()
		m.Types = append(m.Types, t)
	}
	return nil
}

func (m *Module) parseImports(r *reader) error {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		var im Import
		im.Module = r.name()
		im.Name = r.name()
		pos := r.pos
		im.Kind = ExternKind(r.byte())
		switch im.Kind {
		case KindFunc:
			ti := r.u32()
			if int(ti) >= len(m.Types) {
				return &Error{Offset: pos, Where: "import section", Msg: fmt.Sprintf("import %s.%s uses type %d of %d", im.Module, im.Name, ti, len(m.Types)), Err: ErrMalformed}
			}
			im.Type = m.Types[ti]
			im.TypeIdx = ti
			m.impFuncs++
		case KindTable:
			r.byte() // reftype
			r.limits()
		case KindMemory:
			m.impMems = append(m.impMems, r.limits())
		case KindGlobal:
			r.byte()
			r.byte()
			m.impGlob++
		case KindTag:
			return &Error{Offset: pos, Where: "import section", Msg: "tag imports (exception handling) are not allowed", Err: ErrUnsupportedFeature}
		default:
			return &Error{Offset: pos, Where: "import section", Msg: fmt.Sprintf("unknown import kind 0x%02x", byte(im.Kind)), Err: ErrMalformed}
		}
		m.Imports = append(m.Imports, im)
	}
	return nil
}

func (m *Module) parseExports(r *reader) error {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		var e Export
		e.Name = r.name()
		e.Kind = ExternKind(r.byte())
		e.Index = r.u32()
		m.Exports = append(m.Exports, e)
	}
	return nil
}

// constExpr reads a constant expression up to and including its `end`. It reports whether the
// expression is exactly `i32.const c; end`, and c.
func constExpr(r *reader) (isConst bool, c uint32, err error) {
	first := true
	for r.err == nil {
		op := r.byte()
		if r.err != nil {
			break
		}
		if op == 0x0b {
			return isConst, c, nil
		}
		if first && op == 0x41 {
			v := r.sleb(32)
			isConst, c = true, uint32(int32(v))
			first = false
			continue
		}
		isConst, first = false, false
		if op == 0x02 || op == 0x03 || op == 0x04 {
			r.sleb(33)
			continue
		}
		if err := skipImmediates(r, op); err != nil {
			return false, 0, err
		}
	}
	return false, 0, r.fail("constant expression")
}

// parseElements reads the element section and keeps its active segments (spec/abi-v1.md §7.3).
func (m *Module) parseElements(r *reader) error {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		pos := r.pos
		flags := r.u32()
		if r.err != nil {
			break
		}
		if flags > 7 {
			return &Error{Offset: pos, Where: "element section", Msg: fmt.Sprintf("segment %d has unknown flags %d", i, flags), Err: ErrMalformed}
		}
		active := flags&1 == 0
		var seg Segment
		if flags&2 != 0 && active {
			seg.Index = r.u32()
		}
		if active {
			ok, c, err := constExpr(r)
			if err != nil {
				return err
			}
			seg.OffsetOK, seg.Offset = ok, c
		}
		if flags&3 != 0 { // elemkind (flags 1-3) or reftype (flags 5-7)
			r.byte()
		}
		count := r.u32()
		if r.err != nil {
			break
		}
		seg.Count = uint64(count)
		if flags&4 == 0 { // function indices
			for j := uint32(0); j < count && r.err == nil; j++ {
				r.u32()
			}
		} else { // expressions
			for j := uint32(0); j < count && r.err == nil; j++ {
				if _, _, err := constExpr(r); err != nil {
					return err
				}
			}
		}
		if active {
			m.Elements = append(m.Elements, seg)
		}
	}
	return nil
}

// parseData reads the data section and keeps its active segments (spec/abi-v1.md §7.3).
func (m *Module) parseData(r *reader) error {
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		pos := r.pos
		flags := r.u32()
		if r.err != nil {
			break
		}
		if flags > 2 {
			return &Error{Offset: pos, Where: "data section", Msg: fmt.Sprintf("segment %d has unknown flags %d", i, flags), Err: ErrMalformed}
		}
		var seg Segment
		if flags == 2 {
			seg.Index = r.u32()
		}
		if flags != 1 {
			ok, c, err := constExpr(r)
			if err != nil {
				return err
			}
			seg.OffsetOK, seg.Offset = ok, c
		}
		size := r.u32()
		r.bytes(int(size))
		if r.err != nil {
			break
		}
		seg.Count = uint64(size)
		if flags != 1 {
			m.Data = append(m.Data, seg)
		}
	}
	return nil
}

func (m *Module) hasSection(id byte) bool {
	for _, s := range m.sections {
		if s.id == id {
			return true
		}
	}
	return false
}
