"""Reads what the host must know about a module before compiling it, and rewrites the module so
that the limits of spec/abi-v1.md §7 hold on wasmtime exactly as on the Go host.

A port of the Go host's runtime/internal/wasmbin (Parse, Instrument): the same fuel costs, the
same call-depth counting, the same flag for a refused memory.grow, so a module is stopped at the
same point on every host. Only the WebAssembly 2.0 features that §7.1 allows are understood; any
other opcode is refused. Memories get a maximum of min(declared, limit) pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FUEL_EXPORT = "pctl.fuel"
DEPTH_EXPORT = "pctl.depth"
MEMFAIL_EXPORT = "pctl.memfail"
START_EXPORT = "pctl.start"
# Bulk-instruction charge per table element of spec/abi-v1.md §7.2, rule 3, as a shift: 1 << 7 = 128
# (a byte of memory.fill/copy/init costs 1).
TABLE_ELEMENT_COST_SHIFT = 7

SEC_CUSTOM, SEC_TYPE, SEC_IMPORT, SEC_FUNCTION, SEC_TABLE, SEC_MEMORY, SEC_GLOBAL, SEC_EXPORT = range(8)
SEC_START, SEC_ELEMENT, SEC_CODE, SEC_DATA, SEC_DATACOUNT, SEC_TAG = range(8, 14)
SECTION_NAMES = ["custom section", "type section", "import section", "function section", "table section",
                 "memory section", "global section", "export section", "start section", "element section",
                 "code section", "data section", "data count section", "tag section"]
# Canonical order of non-custom sections; the tag section sits between memory and global.
_ORDER = [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 11, 6]

KIND_FUNC, KIND_TABLE, KIND_MEMORY, KIND_GLOBAL, KIND_TAG = range(5)
KIND_NAMES = ["function", "table", "memory", "global", "tag"]

I32, I64 = 0x7F, 0x7E
_VALTYPE_NAMES = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64", 0x7B: "v128", 0x70: "funcref", 0x6F: "externref"}


def kind_name(k: int) -> str:
    return KIND_NAMES[k] if 0 <= k < len(KIND_NAMES) else f"kind({k})"


@dataclass(frozen=True)
class FuncType:
    params: tuple
    results: tuple

    def __str__(self) -> str:
        n = lambda v: _VALTYPE_NAMES.get(v, f"valtype(0x{v:02x})")  # noqa: E731
        return f"({', '.join(map(n, self.params))}) -> ({', '.join(map(n, self.results))})"


@dataclass
class Limits:
    min: int = 0
    max: int = 0
    has_max: bool = False
    shared: bool = False
    is64: bool = False


@dataclass
class Table:
    ref_type: int
    min: int
    max: int
    has_max: bool


@dataclass
class Segment:
    """An active element or data segment (spec/abi-v1.md §7.3): its table or memory, whether the
    offset is exactly `i32.const c`, c (unsigned), and its elements or bytes."""
    index: int = 0
    offset_ok: bool = False
    offset: int = 0
    count: int = 0


@dataclass
class Import:
    module: str
    name: str
    kind: int
    type: FuncType | None = None


@dataclass
class Export:
    name: str
    kind: int
    index: int


@dataclass
class Module:
    types: list = field(default_factory=list)
    imports: list = field(default_factory=list)
    funcs: list = field(default_factory=list)  # type index of each defined function
    tables: list = field(default_factory=list)  # defined tables (Table)
    memories: list = field(default_factory=list)  # defined memories
    imp_mems: list = field(default_factory=list)
    exports: list = field(default_factory=list)
    elements: list = field(default_factory=list)  # active element segments (Segment)
    data: list = field(default_factory=list)  # active data segments (Segment)
    has_start: bool = False
    start_func: int = 0
    num_global: int = 0
    imp_funcs: int = 0
    imp_glob: int = 0
    sections: list = field(default_factory=list)  # (id, start, end) of each section's content

    def func_type(self, idx: int) -> FuncType | None:
        if idx < self.imp_funcs:
            fs = [im for im in self.imports if im.kind == KIND_FUNC]
            return fs[idx].type
        d = idx - self.imp_funcs
        if d >= len(self.funcs) or self.funcs[d] >= len(self.types):
            return None
        return self.types[self.funcs[d]]

    def memory(self, idx: int) -> Limits | None:
        if idx < len(self.imp_mems):
            return self.imp_mems[idx]
        d = idx - len(self.imp_mems)
        return self.memories[d] if d < len(self.memories) else None

    def export(self, name: str) -> Export | None:
        for e in self.exports:
            if e.name == name:
                return e
        return None


class WasmbinError(Exception):
    """A problem in a module's bytes; kind is "malformed" or "unsupported"."""

    def __init__(self, kind: str, where: str, msg: str, offset: int):
        super().__init__(f"{where}: {msg} at byte {offset}" if where else f"{msg} at byte {offset}")
        self.kind = kind


class _Reader:
    __slots__ = ("b", "pos", "end", "where")

    def __init__(self, b: bytes, pos: int, end: int, where: str):
        self.b, self.pos, self.end, self.where = b, pos, end, where

    def fail(self, msg: str) -> WasmbinError:
        return WasmbinError("malformed", self.where, msg, self.pos)

    def byte(self) -> int:
        if self.pos >= self.end:
            raise self.fail("unexpected end of data")
        c = self.b[self.pos]
        self.pos += 1
        return c

    def bytes(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"need {n} bytes, {self.end - self.pos} remain")
        s = self.b[self.pos:self.pos + n]
        self.pos += n
        return s

    def uleb(self, bits: int) -> int:
        v = shift = 0
        max_bytes = (bits + 6) // 7
        for i in range(max_bytes):
            c = self.byte()
            v |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                break
        else:
            raise self.fail("LEB128 integer too long")
        if v >> bits:
            raise self.fail("LEB128 integer out of range")
        return v

    def u32(self) -> int:
        # Fast path: one byte.
        if self.pos < self.end:
            c = self.b[self.pos]
            if c < 0x80:
                self.pos += 1
                return c
        return self.uleb(32)

    def s32(self) -> int:
        """A signed LEB128 of at most 32 bits."""
        v = shift = 0
        for _ in range(5):
            c = self.byte()
            v |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                if c & 0x40:
                    v -= 1 << shift
                return v
        raise self.fail("LEB128 integer too long")

    def sleb(self, bits: int) -> None:
        """Skips a signed LEB128 of at most `bits` bits (the value is never needed)."""
        max_bytes = (bits + 6) // 7
        for _ in range(max_bytes):
            if not self.byte() & 0x80:
                return
        raise self.fail("LEB128 integer too long")

    def name(self) -> str:
        n = self.u32()
        b = self.bytes(n)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("name is not valid UTF-8") from None

    def val_types(self) -> tuple:
        n = self.u32()
        if n > self.end - self.pos:
            raise self.fail("vector longer than the section")
        return tuple(self.bytes(n))

    def limits(self) -> Limits:
        flags = self.byte()
        m = Limits(shared=bool(flags & 0x02), is64=bool(flags & 0x04))
        if flags & ~0x07:
            raise self.fail(f"unknown limits flags 0x{flags:02x}")
        bits = 64 if m.is64 else 32
        m.min = self.uleb(bits)
        if flags & 0x01:
            m.has_max = True
            m.max = self.uleb(bits)
        return m


def parse(b: bytes) -> Module:
    """Parses header, types, imports, functions, memories and exports; checks every section's
    structure and leaves full validation to the engine."""
    if len(b) < 8 or b[:4] != b"\0asm":
        raise WasmbinError("malformed", "", "not a WebAssembly binary (it does not start with \\0asm)", 0)
    if b[4:8] != b"\x01\0\0\0":
        raise WasmbinError("unsupported", "", f"unsupported binary version {b[4:8].hex()} (a component or a newer format?); pctl takes core WebAssembly version 1 binaries", 4)
    m = Module()
    r = _Reader(b, 8, len(b), "section header")
    last_id = 0
    while r.pos < len(b):
        id_pos = r.pos
        sid = r.byte()
        size = r.u32()
        start = r.pos
        end = start + size
        if end > len(b):
            raise WasmbinError("malformed", "", f"section {sid} claims {size} bytes but only {len(b) - start} remain", id_pos)
        if sid != SEC_CUSTOM:
            if sid > SEC_TAG:
                raise WasmbinError("malformed", "", f"unknown section id {sid}", id_pos)
            if last_id != 0 and _ORDER[sid] <= _ORDER[last_id]:
                raise WasmbinError("malformed", "", f"section {sid} out of order", id_pos)
            last_id = sid
        m.sections.append((sid, start, end))
        sr = _Reader(b, start, end, SECTION_NAMES[sid])
        if sid == SEC_TYPE:
            for i in range(sr.u32()):
                pos = sr.pos
                form = sr.byte()
                if form != 0x60:
                    raise WasmbinError("unsupported", "type section", f"type {i} has form 0x{form:02x}; only function types (0x60) are allowed (GC types are not)", pos)
                params = sr.val_types()
                m.types.append(FuncType(params, sr.val_types()))
        elif sid == SEC_IMPORT:
            for _ in range(sr.u32()):
                im = Import(sr.name(), sr.name(), 0)
                pos = sr.pos
                im.kind = sr.byte()
                if im.kind == KIND_FUNC:
                    ti = sr.u32()
                    if ti >= len(m.types):
                        raise WasmbinError("malformed", "import section", f"import {im.module}.{im.name} uses type {ti} of {len(m.types)}", pos)
                    im.type = m.types[ti]
                    m.imp_funcs += 1
                elif im.kind == KIND_TABLE:
                    sr.byte()
                    sr.limits()
                elif im.kind == KIND_MEMORY:
                    m.imp_mems.append(sr.limits())
                elif im.kind == KIND_GLOBAL:
                    sr.byte()
                    sr.byte()
                    m.imp_glob += 1
                elif im.kind == KIND_TAG:
                    raise WasmbinError("unsupported", "import section", "tag imports (exception handling) are not allowed", pos)
                else:
                    raise WasmbinError("malformed", "import section", f"unknown import kind 0x{im.kind:02x}", pos)
                m.imports.append(im)
        elif sid == SEC_FUNCTION:
            m.funcs = [sr.u32() for _ in range(sr.u32())]
        elif sid == SEC_TABLE:
            for i in range(sr.u32()):
                rt = sr.byte()
                if rt not in (0x70, 0x6F):
                    raise WasmbinError("unsupported", "table section", f"table {i} has element type 0x{rt:02x}; only funcref and externref are allowed (typed function references are not)", sr.pos - 1)
                lm = sr.limits()
                if lm.shared or lm.is64:
                    raise WasmbinError("unsupported", "table section", f"table {i} has limits flags of a shared or 64-bit table", sr.pos)
                m.tables.append(Table(rt, lm.min, lm.max, lm.has_max))
        elif sid == SEC_MEMORY:
            m.memories = [sr.limits() for _ in range(sr.u32())]
        elif sid == SEC_ELEMENT:
            _parse_elements(m, sr)
        elif sid == SEC_DATA:
            _parse_data(m, sr)
        elif sid == SEC_GLOBAL:
            m.num_global = sr.u32()
            sr.pos = end
        elif sid == SEC_EXPORT:
            for _ in range(sr.u32()):
                m.exports.append(Export(sr.name(), sr.byte(), sr.u32()))
        elif sid == SEC_START:
            m.has_start = True
            m.start_func = sr.u32()
        elif sid == SEC_TAG:
            raise WasmbinError("unsupported", "tag section", "exception handling is not allowed (spec/abi-v1.md §7.1)", id_pos)
        else:
            sr.pos = end
        if sr.pos != end:
            raise WasmbinError("malformed", SECTION_NAMES[sid], f"section has {end - sr.pos} unread bytes", sr.pos)
        r.pos = end
    for i, mem in enumerate(m.imp_mems + m.memories):
        if mem.shared:
            raise WasmbinError("unsupported", "memory section", f"memory {i} is shared: threads are not allowed (spec/abi-v1.md §7.1)", 0)
        if mem.is64:
            raise WasmbinError("unsupported", "memory section", f"memory {i} is a memory64: not allowed (spec/abi-v1.md §7.1)", 0)
    return m


def _const_expr(r: _Reader) -> tuple[bool, int]:
    """Reads a constant expression through its `end`: whether it is exactly `i32.const c; end`,
    and c as unsigned."""
    first, is_const, c = True, False, 0
    while True:
        op = r.byte()
        if op == 0x0B:
            return is_const, c
        if first and op == 0x41:
            c = r.s32() & 0xFFFFFFFF
            is_const, first = True, False
            continue
        is_const = first = False
        if op in (0x02, 0x03, 0x04):
            r.sleb(33)
            continue
        _skip_immediates(r, op)


def _parse_elements(m: Module, r: _Reader) -> None:
    for i in range(r.u32()):
        pos = r.pos
        flags = r.u32()
        if flags > 7:
            raise WasmbinError("malformed", "element section", f"segment {i} has unknown flags {flags}", pos)
        active = not flags & 1
        seg = Segment()
        if flags & 2 and active:
            seg.index = r.u32()
        if active:
            seg.offset_ok, seg.offset = _const_expr(r)
        if flags & 3:  # elemkind or reftype
            r.byte()
        seg.count = r.u32()
        if not flags & 4:
            for _ in range(seg.count):
                r.u32()
        else:
            for _ in range(seg.count):
                _const_expr(r)
        if active:
            m.elements.append(seg)


def _parse_data(m: Module, r: _Reader) -> None:
    for i in range(r.u32()):
        pos = r.pos
        flags = r.u32()
        if flags > 2:
            raise WasmbinError("malformed", "data section", f"segment {i} has unknown flags {flags}", pos)
        seg = Segment()
        if flags == 2:
            seg.index = r.u32()
        if flags != 1:
            seg.offset_ok, seg.offset = _const_expr(r)
        seg.count = r.u32()
        r.bytes(seg.count)
        if flags != 1:
            m.data.append(seg)


# --- encoding ----------------------------------------------------------------------------------

def _u32(v: int) -> bytes:
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            out.append(c | 0x80)
        else:
            out.append(c)
            return bytes(out)


def _s64(v: int) -> bytes:
    out = bytearray()
    while True:
        c = v & 0x7F
        v >>= 7
        if (v == 0 and not c & 0x40) or (v == -1 and c & 0x40):
            out.append(c)
            return bytes(out)
        out.append(c | 0x80)


def _name(s: str) -> bytes:
    e = s.encode("utf-8")
    return _u32(len(e)) + e


def _section(out: bytearray, sid: int, body: bytes) -> None:
    out.append(sid)
    out += _u32(len(body))
    out += body


# --- instruction decoding ----------------------------------------------------------------------

def _unsupported(r: _Reader, msg: str) -> WasmbinError:
    return WasmbinError("unsupported", r.where, f"{msg} (spec/abi-v1.md §7.1)", r.pos - 1)


def _memarg(r: _Reader) -> None:
    align = r.u32()
    if align & 0x40:
        r.u32()  # memory index (multi-memory)
    r.u32()


# Opcodes by the shape of their immediates.
_NONE = frozenset([0x00, 0x01, 0x05, 0x0F, 0x1A, 0x1B, 0xD1] + list(range(0x45, 0xC5)))
_ONE_U32 = frozenset([0x0C, 0x0D, 0x10, 0x3F, 0x40, 0xD2] + list(range(0x20, 0x27)))
_MEMARG = frozenset(range(0x28, 0x3F))
_EXCEPTIONS = frozenset(list(range(0x06, 0x0B)) + [0x18, 0x19, 0x1F])


def _skip_immediates(r: _Reader, op: int) -> None:
    """Advances r past the immediates of the instruction whose opcode was just read."""
    if op in _NONE:
        return
    if op in _ONE_U32:
        r.u32()
        return
    if op in _MEMARG:
        _memarg(r)
        return
    if op == 0x41:
        r.sleb(32)
    elif op == 0x42:
        r.sleb(64)
    elif op in _EXCEPTIONS:
        raise _unsupported(r, f"exception handling instruction 0x{op:02x} is not allowed")
    elif op == 0x0E:
        for _ in range(r.u32() + 1):
            r.u32()
    elif op == 0x11:
        r.u32()
        r.u32()
    elif op in (0x12, 0x13, 0x15):
        raise _unsupported(r, "tail calls are not allowed")
    elif op == 0x14:
        raise _unsupported(r, "typed function references (call_ref) are not allowed")
    elif op == 0x1C:
        r.bytes(r.u32())
    elif op == 0x43:
        r.bytes(4)
    elif op == 0x44:
        r.bytes(8)
    elif op == 0xD0:
        r.sleb(33)
    elif 0xD3 <= op <= 0xD6 or op == 0xFB:
        raise _unsupported(r, f"GC / typed reference instruction 0x{op:02x} is not allowed")
    elif op == 0xFC:
        sub = r.u32()
        if sub <= 7:
            pass
        elif sub == 8:
            r.u32()
            r.u32()
        elif sub in (9, 11, 13, 15, 16, 17):
            r.u32()
        elif sub in (10, 12, 14):
            r.u32()
            r.u32()
        else:
            raise _unsupported(r, f"instruction 0xfc {sub} is not allowed")
    elif op == 0xFD:
        sub = r.u32()
        if sub <= 11 or sub in (92, 93):
            _memarg(r)
        elif sub in (12, 13):
            r.bytes(16)
        elif 21 <= sub <= 34:
            r.byte()
        elif 84 <= sub <= 91:
            _memarg(r)
            r.byte()
        elif sub <= 255:
            pass
        else:
            raise _unsupported(r, f"relaxed SIMD instruction 0xfd {sub} is not allowed (its results differ between engines)")
    elif op == 0xFE:
        raise _unsupported(r, "atomic (threads) instructions are not allowed")
    else:
        raise WasmbinError("malformed", r.where, f"unknown opcode 0x{op:02x}", r.pos - 1)


# --- instrumentation ---------------------------------------------------------------------------

@dataclass
class InstrumentLimits:
    initial_fuel: int  # fuel of the start function (the global's initial value)
    max_depth: int  # deepest nesting of calls; entering one deeper traps
    export_fuel: dict  # export name -> fuel of each crossing that starts there
    max_memory_pages: int  # every memory's maximum becomes min(declared, this)
    max_table_elements: int = 0  # every table's maximum becomes min(declared, this); 0: unchanged
    # The start section is dropped and the start function exported (through a wrapper with
    # initial_fuel) as START_EXPORT, for the host to call right after instantiation: then its
    # budget, depth and memory flags are read like those of any call, and WASI functions it calls
    # see the instance's exports.
    move_start: bool = False


class _Instrumenter:
    def __init__(self, m: Module, lim: InstrumentLimits, fuel: int, depth: int, memfail: int, wrap_type: dict):
        self.m, self.lim = m, lim
        self.wrap_type = wrap_type
        self.memfail = memfail
        f, d = _u32(fuel), _u32(depth)
        # i32.const 1, i32.sub, global.set (the depth decrement of every exit)
        self.leave = b"\x23" + d + b"\x41\x01\x6b\x24" + d
        self.enter = b"\x23" + d + b"\x41\x01\x6a\x24" + d + b"\x23" + d + b"\x41" + _s64(lim.max_depth) + b"\x4b\x04\x40\x00\x0b"
        self._charge_pre = b"\x23" + f + b"\x42"
        self._charge_post = b"\x7d\x24" + f + b"\x23" + f + b"\x42\x00\x53\x04\x40\x00\x0b"
        self._fuel = f

    def charge(self, cost: int) -> bytes:
        return self._charge_pre + _s64(max(cost, 1)) + self._charge_post

    def charge_bulk(self, scratch: bytes, table: bool) -> bytes:
        """Charges the length operand on top of the stack, left there for the bulk instruction:
        local.tee scratch; fuel -= extend_u(scratch) (tables: << 7); trap if fuel < 0."""
        f = self._fuel
        shift = bytes([0x42, TABLE_ELEMENT_COST_SHIFT, 0x86]) if table else b""
        return b"\x22" + scratch + b"\x23" + f + b"\x20" + scratch + b"\xad" + shift + self._charge_post

    def code(self, b: bytes, start: int, end: int, extra: int) -> bytearray:
        r = _Reader(b, start, end, "code section")
        n = r.u32()
        if n != len(self.m.funcs):
            raise WasmbinError("malformed", "code section", f"{n} bodies for {len(self.m.funcs)} functions", start)
        out = bytearray(_u32(n + extra))
        for i in range(n):
            size = r.u32()
            body_start = r.pos
            r.bytes(size)
            fb = self.function(b, body_start, body_start + size, i)
            out += _u32(len(fb))
            out += fb
        return out

    def function(self, b: bytes, start: int, end: int, index: int) -> bytearray:
        m = self.m
        where = f"code section, function {m.imp_funcs + index}"
        r = _Reader(b, start, end, where)
        groups = r.u32()
        num_locals = 0
        for _ in range(groups):
            num_locals += r.u32()
            r.byte()
        locals_end = r.pos
        t = m.types[m.funcs[index]]
        scratch = len(t.params) + num_locals  # the i32 local added for memory.grow and bulk charges
        has_grow = False

        # Pass 1: instruction boundaries of the instructions that get extra code, and the cost of
        # each straight part (top level: counter 0; each loop body: its own counter).
        costs = [0]
        stack = [0]
        specials = []  # (kind, start, end, counter): kind 1 return, 2 loop, 3 memory.grow, 4/5 bulk memory/table
        body_end = -1
        none, one_u32, memargs = _NONE, _ONE_U32, _MEMARG
        while r.pos < end:
            at = r.pos
            op = b[at]
            r.pos = at + 1
            costs[stack[-1]] += 1
            if op in none:
                if op == 0x0F:
                    specials.append((1, at, r.pos, 0))
            elif op in one_u32:
                c = b[r.pos] if r.pos < end else 0x80
                if c < 0x80:
                    r.pos += 1
                else:
                    r.u32()
                if op == 0x40:
                    has_grow = True
                    specials.append((3, at, r.pos, 0))
            elif op == 0x0B:
                stack.pop()
                if not stack:
                    body_end = at
                    break
            elif op == 0x02 or op == 0x04:
                r.sleb(33)
                stack.append(stack[-1])
            elif op == 0x03:
                r.sleb(33)
                costs.append(0)
                stack.append(len(costs) - 1)
                specials.append((2, at, r.pos, len(costs) - 1))
            elif op in memargs:
                _memarg(r)
            elif op == 0xFC:
                pr = _Reader(b, r.pos, end, where)
                sub = pr.u32()
                _skip_immediates(r, op)
                if sub in (8, 10, 11) or sub in (12, 14, 17):
                    has_grow = True  # the charge needs the scratch local too
                    specials.append((4 if sub in (8, 10, 11) else 5, at, r.pos, 0))
            else:
                _skip_immediates(r, op)
        if body_end < 0 or r.pos != end:
            raise WasmbinError("malformed", where, "function body does not end with its final `end`", r.pos)

        # Pass 2: emit.
        out = bytearray()
        if has_grow:
            if num_locals + len(t.params) >= 50000:
                raise WasmbinError("malformed", where, "too many locals", start)
            out += _u32(groups + 1)
            rr = _Reader(b, start, end, where)
            rr.u32()
            out += b[rr.pos:locals_end]
            out += bytes([1, I32])
        else:
            out += b[start:locals_end]
        out += self.enter
        out += self.charge(costs[0])
        out.append(0x02)  # block with the function's results
        if not t.results:
            out.append(0x40)
        elif len(t.results) == 1:
            out.append(t.results[0])
        else:
            out += _s64(self.wrap_type[m.funcs[index]])
        pos = locals_end
        grow_tail = None
        for kind, s, e, counter in specials:
            out += b[pos:s]
            if kind == 1:
                out += self.leave
                out += b[s:e]
            elif kind == 2:
                out += b[s:e]
                out += self.charge(costs[counter])
            elif kind >= 4:
                out += self.charge_bulk(_u32(scratch), kind == 5)
                out += b[s:e]
            else:
                if grow_tail is None:
                    sc = _u32(scratch)
                    # local.tee scratch; i32.const -1; i32.eq; if; i32.const 1; global.set memfail; end; local.get scratch
                    grow_tail = b"\x22" + sc + b"\x41\x7f\x46\x04\x40\x41\x01\x24" + _u32(self.memfail) + b"\x0b\x20" + sc
                out += b[s:e]
                out += grow_tail
            pos = e
        out += b[pos:body_end]  # all but the final end
        out.append(0x0B)  # end of the wrapper block
        out += self.leave
        out.append(0x0B)  # end of the function
        return out


def instrument(b: bytes, lim: InstrumentLimits) -> tuple[bytes, Module]:
    """Returns the instrumented copy of b and the parsed module (see the module docstring and
    runtime/internal/wasmbin/instrument.go for what the code does)."""
    m = parse(b)
    for reserved in (FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT) + ((START_EXPORT,) if lim.move_start else ()):
        if m.export(reserved):
            raise WasmbinError("malformed", "export section", f'export name "{reserved}" is reserved by the pctl host', 0)
    fuel_idx = m.imp_glob + m.num_global
    depth_idx, memfail_idx = fuel_idx + 1, fuel_idx + 2

    new_types: list[FuncType] = []
    wrap_type: dict[int, int] = {}
    for ti in m.funcs:
        if ti >= len(m.types):
            raise WasmbinError("malformed", "function section", f"function uses type {ti} of {len(m.types)}", 0)
        t = m.types[ti]
        if len(t.results) <= 1 or ti in wrap_type:
            continue
        want = FuncType((), t.results)
        if want in m.types:
            found = m.types.index(want)
        elif want in new_types:
            found = len(m.types) + new_types.index(want)
        else:
            found = len(m.types) + len(new_types)
            new_types.append(want)
        wrap_type[ti] = found

    wrappers = []  # (export index, target, type index, fuel)
    for i, e in enumerate(m.exports):
        if e.name not in lim.export_fuel or e.kind != KIND_FUNC or e.index < m.imp_funcs or e.index - m.imp_funcs >= len(m.funcs):
            continue
        wrappers.append((i, e.index, m.funcs[e.index - m.imp_funcs], lim.export_fuel[e.name]))
    if lim.move_start and m.has_start:
        ft = m.func_type(m.start_func) if m.start_func < m.imp_funcs + len(m.funcs) else None
        if ft is None or ft.params or ft.results:
            raise WasmbinError("malformed", "start section", f"start function {m.start_func} must exist and have type () -> ()", 0)
        unit = FuncType((), ())
        if unit in m.types:
            typ = m.types.index(unit)
        elif unit in new_types:
            typ = len(m.types) + new_types.index(unit)
        else:
            typ = len(m.types) + len(new_types)
            new_types.append(unit)
        wrappers.append((-1, m.start_func, typ, lim.initial_fuel))
    exports = [Export(e.name, e.kind, e.index) for e in m.exports]
    for j, (ei, _, _, _) in enumerate(wrappers):
        if ei >= 0:
            exports[ei].index = m.imp_funcs + len(m.funcs) + j
        else:
            exports.append(Export(START_EXPORT, KIND_FUNC, m.imp_funcs + len(m.funcs) + j))
    all_types = m.types + new_types

    ins = _Instrumenter(m, lim, fuel_idx, depth_idx, memfail_idx, wrap_type)
    out = bytearray(b[:8])
    wrote = {"types": False, "globals": False, "exports": False}

    def emit_types(existing):
        body = bytearray()
        n, rest = 0, b""
        if existing:
            r = _Reader(b, existing[1], existing[2], "type section")
            n = r.u32()
            rest = b[r.pos:existing[2]]
        body += _u32(n + len(new_types))
        body += rest
        for t in new_types:
            body += b"\x60" + _u32(len(t.params)) + bytes(t.params) + _u32(len(t.results)) + bytes(t.results)
        _section(out, SEC_TYPE, bytes(body))
        wrote["types"] = True

    def emit_globals(existing):
        n, rest = 0, b""
        if existing:
            r = _Reader(b, existing[1], existing[2], "global section")
            n = r.u32()
            rest = b[r.pos:existing[2]]
        body = _u32(n + 3) + rest + bytes([I64, 1, 0x42]) + _s64(lim.initial_fuel) + b"\x0b" + bytes([I32, 1, 0x41, 0, 0x0B]) * 2
        _section(out, SEC_GLOBAL, body)
        wrote["globals"] = True

    def emit_exports():
        body = bytearray(_u32(len(exports) + 3))
        for e in exports:
            body += _name(e.name) + bytes([e.kind]) + _u32(e.index)
        for name, idx in ((FUEL_EXPORT, fuel_idx), (DEPTH_EXPORT, depth_idx), (MEMFAIL_EXPORT, memfail_idx)):
            body += _name(name) + bytes([KIND_GLOBAL]) + _u32(idx)
        _section(out, SEC_EXPORT, bytes(body))
        wrote["exports"] = True

    def emit_tables():
        body = bytearray(_u32(len(m.tables)))
        for t in m.tables:
            mx = min(t.max, lim.max_table_elements) if t.has_max else lim.max_table_elements
            body += bytes([t.ref_type, 0x01]) + _u32(t.min) + _u32(mx)
        _section(out, SEC_TABLE, bytes(body))

    def emit_memories(s):
        r = _Reader(b, s[1], s[2], "memory section")
        n = r.u32()
        body = bytearray(_u32(n))
        for _ in range(n):
            lm = r.limits()
            mx = min(lm.max, lim.max_memory_pages) if lm.has_max else lim.max_memory_pages
            body += b"\x01" + _u32(lm.min) + _u32(mx)
        _section(out, SEC_MEMORY, bytes(body))

    for s in m.sections:
        sid, start, end = s
        if sid != SEC_CUSTOM:
            if not wrote["types"] and new_types and _ORDER[sid] > _ORDER[SEC_TYPE]:
                emit_types(None)
            if not wrote["globals"] and _ORDER[sid] > _ORDER[SEC_GLOBAL]:
                emit_globals(None)
            if not wrote["exports"] and _ORDER[sid] > _ORDER[SEC_EXPORT]:
                emit_exports()
        if sid == SEC_TYPE:
            if new_types:
                emit_types(s)
            else:
                _section(out, sid, b[start:end])
                wrote["types"] = True
        elif sid == SEC_GLOBAL:
            emit_globals(s)
        elif sid == SEC_EXPORT:
            emit_exports()
        elif sid == SEC_MEMORY:
            emit_memories(s)
        elif sid == SEC_TABLE and lim.max_table_elements:
            emit_tables()
        elif sid == SEC_START:
            if not (lim.move_start and m.has_start):
                _section(out, sid, b[start:end])
        elif sid == SEC_FUNCTION:
            body = bytearray(_u32(len(m.funcs) + len(wrappers)))
            for t in m.funcs:
                body += _u32(t)
            for w in wrappers:
                body += _u32(w[2])
            _section(out, SEC_FUNCTION, bytes(body))
        elif sid == SEC_CODE:
            body = ins.code(b, start, end, len(wrappers))
            for _, target, typ, fuel in wrappers:
                fb = bytearray(b"\x00\x42") + _s64(fuel) + b"\x24" + _u32(fuel_idx)
                for p in range(len(all_types[typ].params)):
                    fb += b"\x20" + _u32(p)
                fb += b"\x10" + _u32(target) + b"\x0b"
                body += _u32(len(fb)) + fb
            _section(out, SEC_CODE, bytes(body))
        elif sid == SEC_CUSTOM:
            r = _Reader(b, start, end, "custom section")
            try:
                name = r.name()
            except WasmbinError:
                name = ""
            if not name.startswith(".debug"):
                _section(out, sid, b[start:end])
        else:
            _section(out, sid, b[start:end])
    if not wrote["types"] and new_types:
        emit_types(None)
    if not wrote["globals"]:
        emit_globals(None)
    if not wrote["exports"]:
        emit_exports()
    if wrappers and not any(s[0] == SEC_CODE for s in m.sections):
        raise WasmbinError("malformed", "code section", "module exports functions but has no code section", 0)
    return bytes(out), m
