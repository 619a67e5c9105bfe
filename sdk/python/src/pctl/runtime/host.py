"""A host of spec/abi-v1.md on wasmtime: load checks (size, magic, features, import profile,
exports, memory), the limits of §7 through the same rewriting as the Go host (wasmbin.py), the
lifecycle of §3, single and batch partition calls, and errors that name the plugin and the failure
class with the Go runtime's words (runtime/errors.go).

`Plugin` is one prepared instance, used by one caller at a time and not replaced after a failure:
`pctl.Partitioner` (partitioner.py) is the safe wrapper that the SDK and its users call."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import struct
import tempfile
import threading
from pathlib import Path

import wasmtime

from ..errors import BadRequest, PluginFailed
from . import wasmbin
from .wasi import WASI, WASI_FUNCS, WASI_MODULE, FuelExhausted, ProcExit, call_cost

ABI_VERSION = 1
MAX_MODULE_BYTES = 8 << 20
MAX_MEMORY_PAGES = 512
MAX_TABLE_ELEMENTS = 131072  # PCTL_MAX_TABLE_ELEMENTS, all tables together (spec/abi-v1.md §7.3)
MAX_METADATA_DEPTH = 32  # spec/abi-v1.md §2.6, rule 3
MAX_CALL_DEPTH = 1000
FUEL = 1 << 31
INIT_FUEL = 1 << 33
BUFFER_BYTES = 1 << 20
MAX_BATCH_KEYS = 4096
MAX_KEY = 65536
MAX_CONFIG = 65536
MAX_METADATA = 65536
MAX_PARTITIONS = 2147483647
# wasmtime's own stack limit for guest code, far above what 1000 frames of ordinary code need;
# an overflow before the depth counter fires is still reported as "call stack exhausted".
MAX_WASM_STACK = 2 << 20


class CLASS:
    """Failure classes: the phrases of the Go runtime's sentinel errors."""
    NOT_WASM = "not a WebAssembly module"
    TOO_LARGE = "module too large"
    INVALID = "invalid WebAssembly module"
    FEATURE = "unsupported WebAssembly feature"
    MISSING_EXPORT = "missing export"
    BAD_SIGNATURE = "export has the wrong signature"
    FORBIDDEN_IMPORT = "forbidden import"
    ABI = "unsupported ABI version"
    METADATA = "invalid plugin metadata"
    BUFFER = "plugin did not provide a usable key buffer"
    CONFIG_REJECTED = "plugin rejected its configuration"
    CONFIG_UNSUPPORTED = "plugin takes no configuration"
    CONFIG_TOO_LARGE = "configuration too large"
    KEY_TOO_LONG = "key too long"
    BAD_N = "invalid partition count"
    TIME_LIMIT = "time limit exceeded"
    MEMORY_LIMIT = "memory limit exceeded"
    TABLE_LIMIT = "table limit exceeded"
    CALL_DEPTH = "call stack exhausted"
    TRAP = "plugin trapped"
    EXIT = "plugin exited"
    OUT_OF_RANGE = "plugin returned a partition out of range"
    CODE = "plugin returned an error code"


_CODE_NAMES = {-1: "PCTL_E_INVALID", -2: "PCTL_E_CONFIG", -3: "PCTL_E_UNSUPPORTED", -4: "PCTL_E_BUFFER", -5: "PCTL_E_INTERNAL"}


def code_name(c: int) -> str:
    return _CODE_NAMES.get(c, f"unknown error code {c}")


class LoadError(PluginFailed):
    """A module refused at load (the conformance runner's exit status 2). `cls` is the failure
    class (a CLASS phrase)."""

    def __init__(self, source: str, digest: str, cls: str, detail: str):
        who = source or "module"
        if digest:
            who += f" (sha256:{digest[:12]})"
        super().__init__(f"{who}: {cls}: {detail}" if detail else f"{who}: {cls}", plugin=source, digest=digest)
        self.cls = cls


class CallError(PluginFailed):
    """A failed call into a plugin (the conformance runner's exit status 1). `cls` is the
    failure class, `op` the export called."""

    def __init__(self, digest: str, name: str, op: str, cls: str, detail: str = "", code: int = 0):
        s = f"plugin {name} (sha256:{digest[:12]}): {op}: {cls}"
        if cls == CLASS.CODE:
            s += f" {code_name(code)}"
        if cls == CLASS.EXIT:
            s += f" with code {code}"
        if detail:
            s += f": {detail}"
        super().__init__(s, plugin=name, digest=digest)
        self.cls, self.op, self.detail_text, self.result_code = cls, op, detail, code


class UsageError(BadRequest):
    """An error in the caller's input (exit status 2): bad n, key too long."""


_I32, _I64 = wasmbin.I32, wasmbin.I64
_ABI_EXPORTS = [
    ("pctl_abi_version", True, wasmbin.FuncType((), (_I32,))),
    ("pctl_key_buffer", True, wasmbin.FuncType((_I32,), (_I32,))),
    ("pctl_partition", True, wasmbin.FuncType((_I32, _I32), (_I32,))),
    ("_initialize", False, wasmbin.FuncType((), ())),
    ("pctl_configure", False, wasmbin.FuncType((_I32,), (_I32,))),
    ("pctl_metadata", False, wasmbin.FuncType((), (_I64,))),
    ("pctl_partition_batch", False, wasmbin.FuncType((_I32, _I32), (_I32,))),
    ("pctl_ancestry", False, wasmbin.FuncType((_I32, _I32, _I32), (_I32,))),
]
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def _check_exports(m: wasmbin.Module):
    """Returns (None, set of ABI exports present) or (class, detail)."""
    mem = m.export("memory")
    if mem is None:
        return CLASS.MISSING_EXPORT, 'no export "memory": a pctl module exports its linear memory as "memory" (spec/abi-v1.md §2)'
    if mem.kind != wasmbin.KIND_MEMORY:
        return CLASS.BAD_SIGNATURE, f'export "memory" is a {wasmbin.kind_name(mem.kind)}, not a memory'
    has = set()
    for name, required, sig in _ABI_EXPORTS:
        e = m.export(name)
        if e is None:
            if required:
                hint = "; is this a pctl partitioner?" if name == "pctl_abi_version" else ""
                return CLASS.MISSING_EXPORT, f'no export "{name}" {sig} (spec/abi-v1.md §2){hint}'
            continue
        if e.kind != wasmbin.KIND_FUNC:
            return CLASS.BAD_SIGNATURE, f'export "{name}" is a {wasmbin.kind_name(e.kind)}; want a function {sig}'
        t = m.func_type(e.index)
        if t is None:
            return CLASS.INVALID, f'export "{name}" names function {e.index}, which does not exist'
        if t != sig:
            return CLASS.BAD_SIGNATURE, f'export "{name}" has signature {t}; spec/abi-v1.md §2 requires {sig}'
        has.add(name)
    return None, has


def _first_line(err: BaseException) -> str:
    """The cause of an engine error in one line: wasmtime puts a backtrace first and the cause
    after "Caused by:"."""
    s = str(getattr(err, "message", None) or err).strip()
    if "Caused by:" in s:
        s = s.split("Caused by:", 1)[1].strip()
    return s.split("\n", 1)[0].strip()


class _I32Call:
    """A `(i32, i32) -> i32` export called without wasmtime-py's per-call type lookup and value
    conversions (about 30 µs a call on this machine; this takes 3): the signature was checked at
    load, so the conversions check nothing. Traps, errors and exceptions raised by host functions
    surface exactly as from `wasmtime.Func.__call__` (the same `enter_wasm` and error paths).
    Uses wasmtime-py's ctypes bindings, so it is built only when they look as expected (the
    version is pinned); otherwise the plain `Func` is used."""

    __slots__ = ("func", "ref", "params", "results")

    def __init__(self, func: wasmtime.Func):
        from wasmtime import _ffi
        self.func = func  # keeps the referenced struct alive
        self.ref = ctypes.byref(func._func)
        self.params = (_ffi.wasmtime_val_t * 2)()
        self.params[0].kind = self.params[1].kind = _ffi.WASMTIME_I32
        self.results = (_ffi.wasmtime_val_t * 1)()

    def __call__(self, store: wasmtime.Store, a: int, b: int) -> int:
        from wasmtime import _ffi
        from wasmtime._func import enter_wasm
        p = self.params
        p[0].of.i32 = a
        p[1].of.i32 = b
        with enter_wasm(store) as trap:
            err = _ffi.wasmtime_func_call(store._context(), self.ref, p, 2, self.results, 1, trap)
            if err:
                raise wasmtime.WasmtimeError._from_ptr(err)
        return self.results[0].of.i32


class _I64Global:
    """Reads and writes a mutable i64 global without wasmtime-py's per-call type lookup and value
    conversion (Global.set_value costs about 15 us on this machine, this well under 1): a WASI
    call charges the fuel global before it runs (spec/abi-v1.md §7.2, rule 4), so a module that
    calls WASI in a loop pays this per call. Built only when the bindings look as expected."""

    __slots__ = ("g", "ref", "val", "get_fn", "set_fn")

    def __init__(self, g: wasmtime.Global):
        from wasmtime import _ffi
        self.g = g  # keeps the referenced struct alive
        self.ref = ctypes.byref(g._global)
        self.val = _ffi.wasmtime_val_t()
        self.val.kind = _ffi.WASMTIME_I64
        self.get_fn, self.set_fn = _ffi.wasmtime_global_get, _ffi.wasmtime_global_set

    def value(self, store: wasmtime.Store) -> int:
        self.get_fn(store._context(), self.ref, ctypes.byref(self.val))
        return self.val.of.i64

    def set_value(self, store: wasmtime.Store, v: int) -> None:
        from wasmtime import _ffi
        self.val.kind = _ffi.WASMTIME_I64
        self.val.of.i64 = v
        err = self.set_fn(store._context(), self.ref, ctypes.byref(self.val))
        if err:
            raise wasmtime.WasmtimeError._from_ptr(err)


def _fast_i64_global(g: wasmtime.Global):
    """`g` as an _I64Global when wasmtime-py's bindings have the parts it uses, else `g`."""
    try:
        from wasmtime import _ffi
        if not (hasattr(_ffi, "wasmtime_global_get") and hasattr(_ffi, "wasmtime_global_set") and hasattr(g, "_global")):
            return g
        return _I64Global(g)
    except (ImportError, AttributeError, TypeError):
        return g


def _fast_i32(store: wasmtime.Store, func: wasmtime.Func):
    """`func` as an _I32Call when wasmtime-py's bindings have the parts it uses, else `func`."""
    try:
        from wasmtime import _ffi
        from wasmtime._func import enter_wasm  # noqa: F401
        if not (hasattr(_ffi, "wasmtime_func_call") and hasattr(_ffi, "wasmtime_val_t") and hasattr(func, "_func")
                and hasattr(store, "_context")):
            return func
        return _I32Call(func)
    except (ImportError, AttributeError, TypeError):
        return func


# --- the engine and its compile cache ------------------------------------------------------------

_engine: wasmtime.Engine | None = None
_engine_lock = threading.Lock()


def engine() -> wasmtime.Engine:
    """One engine per process: WebAssembly 2.0 only (§7.1), a bounded native stack.
    Partitioners load on executor threads: two first loads at once must not make two engines
    (a module compiled by one cannot be instantiated in a store of the other)."""
    global _engine
    if _engine is not None:
        return _engine
    with _engine_lock:
        return _make_engine()


def _make_engine() -> wasmtime.Engine:
    global _engine
    if _engine is None:
        c = wasmtime.Config()
        c.max_wasm_stack = MAX_WASM_STACK
        for feature in ("wasm_threads", "wasm_tail_call", "wasm_relaxed_simd", "wasm_memory64", "wasm_multi_memory",
                        "wasm_exceptions", "wasm_gc", "wasm_function_references", "wasm_component_model"):
            try:
                setattr(c, feature, False)
            except (AttributeError, wasmtime.WasmtimeError):
                pass  # not configurable in this build: the rewriter refuses these anyway
        _engine = wasmtime.Engine(c)
    return _engine


_HOST_CODE = hashlib.sha256(Path(wasmbin.__file__).read_bytes() + Path(__file__).read_bytes()).hexdigest()[:16]


def _cache_dir() -> Path | None:
    """Where compiled code is kept: $PCTL_CACHE_DIR (empty: no cache), else
    $XDG_CACHE_HOME/pctl/wasmtime, else ~/.cache/pctl/wasmtime."""
    d = os.environ.get("PCTL_CACHE_DIR")
    if d == "":
        return None
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pctl" / "wasmtime"


def _compile(data: bytes, limits: wasmbin.InstrumentLimits) -> wasmtime.Module:
    """Instruments and compiles; compiled code is kept in a private cache directory keyed by the
    module bytes, the limits, this host's code and the wasmtime version (Cranelift takes about a
    second for a 2 MB Go module; loading the cached code takes a millisecond)."""
    d = _cache_dir()
    path = None
    if d is not None:
        key = hashlib.sha256(data + repr(limits).encode() + _HOST_CODE.encode()).hexdigest()
        path = d / f"{key[:32]}-{_wasmtime_version()}.cwasm"
        if path.exists():
            try:
                return wasmtime.Module.deserialize_file(engine(), str(path))
            except wasmtime.WasmtimeError:
                pass  # stale or foreign: compile again
    inst, _ = wasmbin.instrument(data, limits)
    try:
        compiled = wasmtime.Module(engine(), inst)
    except wasmtime.WasmtimeError as e:
        raise _CompileError(_first_line(e)) from None
    if path is not None:
        try:
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=d, delete=False, suffix=".tmp") as f:
                f.write(compiled.serialize())
            os.replace(f.name, path)
        except OSError:
            pass  # a read-only checkout: run without the cache
    return compiled


def _wasmtime_version() -> str:
    """A cheap stamp of the installed wasmtime (importlib.metadata costs 40 ms a process); wasmtime
    itself refuses to load code compiled by another version, and then we compile again."""
    try:
        st = os.stat(wasmtime.__file__)
        return hashlib.sha256(f"{wasmtime.__file__}:{st.st_mtime_ns}:{st.st_size}".encode()).hexdigest()[:12]
    except OSError:
        return "unknown"


class _CompileError(Exception):
    pass


class _InstanceMem:
    """The memory of the plugin's own instance, for its WASI functions: every WASI call comes from
    that instance, after instantiation (the start function is moved to an export), so the memory
    is known and no caller lookup is needed."""
    __slots__ = ("plugin",)

    def __init__(self, plugin: "Plugin"):
        self.plugin = plugin

    def size(self) -> int:
        return self.plugin.memory.data_len(self.plugin.store)

    def read(self, ptr: int, n: int) -> bytes:
        p = self.plugin
        return bytes(p.memory.read(p.store, ptr, ptr + n)) if n else b""

    def write(self, ptr: int, data: bytes) -> None:
        if data:
            p = self.plugin
            p.memory.write(p.store, bytearray(data), ptr)


def _valtype(v: int) -> wasmtime.ValType:
    return wasmtime.ValType.i32() if v == _I32 else wasmtime.ValType.i64()


class Plugin:
    """One prepared instance of a module (spec/abi-v1.md §3): instantiated, initialised, version
    checked, metadata read, buffer obtained, configured. One caller at a time."""

    @classmethod
    def open(cls, data: bytes, source: str = "", config: bytes = b"", wasi_time: int | None = None, wasi_seed: int | None = None) -> "Plugin":
        p = cls()
        p._load(bytes(data), source, bytes(config), wasi_time, wasi_seed)
        return p

    def _load(self, data: bytes, source: str, config: bytes, wasi_time, wasi_seed) -> None:
        self.digest = ""
        self.name = "unnamed"

        def fail(cls_, detail):
            return LoadError(source, self.digest, cls_, detail)

        if len(data) > MAX_MODULE_BYTES:
            raise fail(CLASS.TOO_LARGE, f"{len(data)} bytes, the limit is {MAX_MODULE_BYTES} (spec/abi-v1.md §7); strip debug info (e.g. -ldflags=-s, -C strip=symbols) or shrink the module")
        if data[:4] != b"\0asm":
            raise fail(CLASS.NOT_WASM, f"the file starts with {json.dumps(data[:8].decode('latin-1'))}, not \\0asm; give the compiled .wasm binary (a .wat text file must be assembled first, e.g. wat2wasm)")
        self.digest = hashlib.sha256(data).hexdigest()

        limits = wasmbin.InstrumentLimits(
            initial_fuel=INIT_FUEL, max_depth=MAX_CALL_DEPTH, max_memory_pages=MAX_MEMORY_PAGES, max_table_elements=MAX_TABLE_ELEMENTS,
            export_fuel={name: (INIT_FUEL if name == "_initialize" else FUEL) for name, _, _ in _ABI_EXPORTS},
            move_start=True)
        # Checks that need only the parse come first, as in the Go host: a module with a forbidden
        # import is refused as such even if it would not compile.
        try:
            m = wasmbin.parse(data)
        except wasmbin.WasmbinError as e:
            raise fail(CLASS.FEATURE if e.kind == "unsupported" else CLASS.INVALID, str(e)) from None

        self.profile = "portable"
        for im in m.imports:
            if im.module != WASI_MODULE:
                raise fail(CLASS.FORBIDDEN_IMPORT, f"imports {im.module}.{im.name} (a {wasmbin.kind_name(im.kind)}); portable modules import nothing and wasi-deterministic modules import only listed {WASI_MODULE} functions (spec/abi-v1.md §6)")
            if im.kind != wasmbin.KIND_FUNC or im.name not in WASI_FUNCS:
                raise fail(CLASS.FORBIDDEN_IMPORT, f"imports {im.module}.{im.name}, which the wasi-deterministic profile does not provide (allowed: {', '.join(sorted(WASI_FUNCS))}; spec/abi-v1.md §6.2)")
            want = wasmbin.FuncType(*WASI_FUNCS[im.name])
            if im.type != want:
                raise fail(CLASS.FORBIDDEN_IMPORT, f"imports {im.module}.{im.name} with signature {im.type}; the profile defines {want}")
            self.profile = "wasi-deterministic"

        cls_, has = _check_exports(m)
        if cls_:
            raise fail(cls_, has)
        self.has = has
        mem = m.memory(m.export("memory").index)
        if mem is not None and mem.min > MAX_MEMORY_PAGES:
            raise fail(CLASS.MEMORY_LIMIT, f"declares {mem.min} initial memory pages ({mem.min // 16} MiB); the limit is {MAX_MEMORY_PAGES} pages ({MAX_MEMORY_PAGES // 16} MiB)")
        bad = _check_load(m, MAX_TABLE_ELEMENTS)
        if bad:
            raise fail(*bad)

        try:
            compiled = _compile(data, limits)
        except wasmbin.WasmbinError as e:
            raise fail(CLASS.FEATURE if e.kind == "unsupported" else CLASS.INVALID, str(e)) from None
        except _CompileError as e:
            raise fail(CLASS.INVALID, str(e)) from None

        # Instantiate and prepare (§3). A failure here is a refusal at load.
        self.store = store = wasmtime.Store(engine())
        wasi = WASI(**({"time": wasi_time} if wasi_time is not None else {}), **({"seed": wasi_seed} if wasi_seed is not None else {}))
        self.wasi = wasi
        imports = []
        for im in m.imports:
            params, results = WASI_FUNCS[im.name]
            ft = wasmtime.FuncType([_valtype(v) for v in params], [_valtype(v) for v in results])
            imports.append(wasmtime.Func(store, ft, self._wasi_call(im.name, getattr(wasi, im.name))))
        self.memory = None
        self.fuel = self.depth = self.memfail = None
        try:
            try:
                instance = wasmtime.Instance(store, compiled, imports)
            except (wasmtime.Trap, wasmtime.WasmtimeError) as e:
                raise fail(CLASS.TRAP, f"while loading: instantiate: {_first_line(e)}") from None
            ex = instance.exports(store)
            self.memory = ex["memory"]
            self.fuel = _fast_i64_global(ex[wasmbin.FUEL_EXPORT])
            self.depth = ex[wasmbin.DEPTH_EXPORT]
            self.memfail = ex[wasmbin.MEMFAIL_EXPORT]
            self.fn_partition = _fast_i32(store, ex["pctl_partition"])
            self.fn_batch = _fast_i32(store, ex["pctl_partition_batch"]) if "pctl_partition_batch" in has else None
            if m.has_start:
                self._call("start", ex[wasmbin.START_EXPORT])
            if "_initialize" in has:
                self._call("_initialize", ex["_initialize"])
            ver = self._call("pctl_abi_version", ex["pctl_abi_version"])
            if ver != ABI_VERSION:
                raise fail(CLASS.ABI, f"module declares ABI version {ver}; this host supports {ABI_VERSION}; upgrade pctl or rebuild the module against spec/abi-v1.md")
            self.metadata = {"name": "unnamed", "version": "0.0.0"}
            if "pctl_metadata" in has:
                res = self._call("pctl_metadata", ex["pctl_metadata"]) & 0xFFFFFFFFFFFFFFFF
                ptr, n = res >> 32, res & 0xFFFFFFFF
                if n > MAX_METADATA:
                    raise fail(CLASS.METADATA, f"pctl_metadata returned {n} bytes; the limit is {MAX_METADATA}")
                size = self.memory.data_len(store)
                if ptr + n > size:
                    raise fail(CLASS.METADATA, f"pctl_metadata points at [{ptr}, {ptr + n}), outside memory ({size} bytes)")
                md = _parse_metadata(self._read(ptr, n))
                if isinstance(md, str):
                    raise fail(CLASS.METADATA, md)
                self.metadata = md
                self.name = md["name"]
            if "ancestry" in (self.metadata.get("properties") or []) and "pctl_ancestry" not in has:
                raise fail(CLASS.METADATA, 'metadata declares the "ancestry" property but the module does not export pctl_ancestry')
            buf = self._call("pctl_key_buffer", ex["pctl_key_buffer"], BUFFER_BYTES) & 0xFFFFFFFF
            size = self.memory.data_len(store)
            if buf == 0 or buf + BUFFER_BYTES > size:
                raise fail(CLASS.BUFFER, f"pctl_key_buffer({BUFFER_BYTES}) returned {buf}; memory is {size} bytes; the module must return a non-zero address of a region of that size inside memory (spec/abi-v1.md §2.2)")
            self.buf, self.buf_size = buf, BUFFER_BYTES
            if len(config) > MAX_CONFIG:
                raise fail(CLASS.CONFIG_TOO_LARGE, f"{len(config)} bytes; the limit is {MAX_CONFIG}")
            if "pctl_configure" in has:
                self._write(buf, config)
                code = self._call("pctl_configure", ex["pctl_configure"], len(config))
                if code != 0:
                    shown = json.dumps(config[:80].decode("latin-1"))
                    if code == -2:
                        raise fail(CLASS.CONFIG_REJECTED, f"config of {len(config)} bytes {shown}; check the --config values against the plugin's documentation")
                    raise fail(CLASS.CODE, f"pctl_configure returned {code_name(code)}: config of {len(config)} bytes {shown}")
            elif config:
                raise fail(CLASS.CONFIG_UNSUPPORTED, f"it does not export pctl_configure, so its topic config must be empty (got {len(config)} bytes)")
        except CallError as e:
            prefix = f"with code {e.result_code}: " if e.cls == CLASS.EXIT else f"{code_name(e.result_code)}: " if e.cls == CLASS.CODE else ""
            raise fail(e.cls, f"{prefix}while loading: {e.op}: {e.detail_text}") from None

    def _wasi_call(self, name: str, shim):
        """A WASI shim as a wasmtime host function, charged to the call's budget before it runs
        (spec/abi-v1.md §7.2, rule 4)."""
        mem = _InstanceMem(self)

        def call(*a):
            fuel = self.fuel
            if fuel is not None:
                left = fuel.value(self.store) - call_cost(name, a)
                fuel.set_value(self.store, left)
                if left < 0:
                    raise FuelExhausted()
            return shim(mem, *a)
        return call

    # --- memory and calls ----------------------------------------------------------------------

    def _read(self, ptr: int, n: int) -> bytes:
        return bytes(self.memory.read(self.store, ptr, ptr + n)) if n else b""

    def _write(self, ptr: int, data) -> None:
        """Copies data into memory at ptr (one memmove: Memory.write costs a copy more)."""
        if data:
            n = len(data)
            if ptr < 0 or ptr + n > self.memory.data_len(self.store):
                raise ValueError(f"write of {n} bytes at {ptr} outside memory")
            base = ctypes.addressof(self.memory.data_ptr(self.store).contents)
            ctypes.memmove(base + ptr, data if isinstance(data, bytes) else bytes(data), n)

    def _call(self, op: str, fn, *args):
        try:
            return fn(self.store, *args)
        except (wasmtime.Trap, wasmtime.WasmtimeError, ProcExit, FuelExhausted) as e:
            raise self._fail(op, e) from None

    def _fail(self, op: str, err: BaseException) -> CallError:
        """Classifies a failed call into the guest, in the Go host's order."""
        def mk(cls_, detail, code=0):
            return CallError(self.digest, self.name, op, cls_, detail, code)
        if isinstance(err, ProcExit):
            return mk(CLASS.EXIT, f"proc_exit({err.code}); a partitioner must return, not exit", err.code)
        st = self.store
        if self.fuel is not None and self.fuel.value(st) < 0:
            init = op in ("start", "_initialize")
            return mk(CLASS.TIME_LIMIT, f"used its whole work budget of {INIT_FUEL if init else FUEL} units (spec/abi-v1.md §7.2, about {4 if init else 1}s of work): it loops forever, does unbounded work or is far too slow for a partitioner")
        code = getattr(err, "trap_code", None)
        if (self.depth is not None and (self.depth.value(st) & 0xFFFFFFFF) > MAX_CALL_DEPTH) or code == wasmtime.TrapCode.STACK_OVERFLOW:
            return mk(CLASS.CALL_DEPTH, f"nested more than {MAX_CALL_DEPTH} calls (unbounded recursion?)")
        if self.memory is not None:
            size = self.memory.data_len(st)
            if (self.memfail is not None and self.memfail.value(st) != 0) or size >= MAX_MEMORY_PAGES * 65536:
                return mk(CLASS.MEMORY_LIMIT, f"trapped after memory.grow was refused at {size // 65536} of at most {MAX_MEMORY_PAGES} pages ({MAX_MEMORY_PAGES // 16} MiB): {_first_line(err)}")
        return mk(CLASS.TRAP, _first_line(err))

    def _result_error(self, op: str, r: int, n: int, index: int) -> CallError:
        where = f"key {index} of the batch" if index >= 0 else ""
        if r >= n:
            return CallError(self.digest, self.name, op, CLASS.OUT_OF_RANGE, f"{where + ': ' if where else ''}returned {r} for n={n}; a partition must be in [0, n)")
        return CallError(self.digest, self.name, op, CLASS.CODE, where, r)

    # --- partitions ----------------------------------------------------------------------------

    def partition(self, key: bytes, n: int) -> int:
        """One key, one pctl_partition call."""
        self._write(self.buf, key)
        r = self._call("pctl_partition", self.fn_partition, len(key), n)
        if 0 <= r < n:
            return r
        raise self._result_error("pctl_partition", r, n, -1)

    def partition_all(self, keys: list, n: int) -> list:
        """Partitions of many keys: batch calls when the module exports pctl_partition_batch (at
        most MAX_BATCH_KEYS keys and the buffer's bytes per crossing), single calls otherwise."""
        if not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
            raise UsageError(f"{CLASS.BAD_N}: {n} is outside [1, {MAX_PARTITIONS}]")
        for i, k in enumerate(keys):
            if len(k) > MAX_KEY:
                raise UsageError(f"{CLASS.KEY_TOO_LONG}: key {i} has {len(k)} bytes; the limit is {MAX_KEY} (spec/abi-v1.md §1.1)")
        if self.fn_batch is None:
            return [self.partition(k, n) for k in keys]
        out: list[int] = []
        i = 0
        while i < len(keys):
            j, size = i, 0
            while j < len(keys) and j - i < MAX_BATCH_KEYS and 4 * (j - i + 1) + size + len(keys[j]) <= self.buf_size:
                size += len(keys[j])
                j += 1
            out.extend(self._batch(keys[i:j], n))
            i = j
        return out

    def _batch(self, keys: list, n: int) -> tuple:
        """One pctl_partition_batch crossing (§2.4 layout)."""
        count = len(keys)
        data = bytearray(struct.pack(f"<{count}I", *map(len, keys)))
        data += b"".join(keys)
        self._write(self.buf, data)
        status = self._call("pctl_partition_batch", self.fn_batch, count, n)
        if status != 0:
            raise self._result_error("pctl_partition_batch", status, n, -1)
        res = struct.unpack(f"<{count}i", self._read(self.buf, 4 * count))
        for k, r in enumerate(res):
            if not 0 <= r < n:
                raise self._result_error("pctl_partition_batch", r, n, k)
        return res


def _check_load(m: wasmbin.Module, max_table: int):
    """The structural checks of spec/abi-v1.md §7.3, in their order, with the Go host's words: the
    table limit, then the bounds of active element and data segments. Returns (class, detail) or
    None."""
    total = 0
    for i, t in enumerate(m.tables):
        if t.min > max_table:
            return CLASS.TABLE_LIMIT, f"table {i} declares {t.min} initial elements; the limit is {max_table} (spec/abi-v1.md §7.3)"
        total += min(t.max, max_table) if t.has_max else max_table
    if total > max_table:
        return CLASS.TABLE_LIMIT, f"{len(m.tables)} tables could grow to {total} elements together; the limit is {max_table}: declare maxima that sum to at most the limit (spec/abi-v1.md §7.3)"
    for i, seg in enumerate(m.elements):
        if seg.index >= len(m.tables):
            return CLASS.INVALID, f"element segment {i} initialises table {seg.index}, which the module does not define"
        if not seg.offset_ok:
            return CLASS.INVALID, f"element segment {i}: the offset must be a constant i32.const (spec/abi-v1.md §7.3)"
        size = m.tables[seg.index].min
        if seg.offset + seg.count > size:
            return CLASS.INVALID, f"element segment {i} writes elements [{seg.offset}, {seg.offset + seg.count}) of table {seg.index}, which has {size}: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)"
    for i, seg in enumerate(m.data):
        mem = m.memory(seg.index)
        if mem is None:
            return CLASS.INVALID, f"data segment {i} initialises memory {seg.index}, which the module does not define"
        if not seg.offset_ok:
            return CLASS.INVALID, f"data segment {i}: the offset must be a constant i32.const (spec/abi-v1.md §7.3)"
        if seg.offset + seg.count > mem.min * 65536:
            return CLASS.INVALID, f"data segment {i} writes bytes [{seg.offset}, {seg.offset + seg.count}) of memory {seg.index}, which has {mem.min * 65536}: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)"
    return None


def _json_depth(b: bytes) -> int:
    """How deep arrays and objects nest in b, read as JSON (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in b:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x7B, 0x5B):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x7D, 0x5D):
            depth -= 1
    return deepest


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def _parse_metadata(b: bytes):
    """The rules of spec/abi-v1.md §2.6, which every host applies alike. Returns the document, or
    the reason it is invalid (a str)."""
    def not_json(why):
        return f"pctl_metadata returned {len(b)} bytes that are not a JSON object: {why}"
    try:
        text = b.decode("utf-8")  # strict: no overlong forms, no surrogates
    except UnicodeDecodeError:
        return not_json("not valid UTF-8 (spec/abi-v1.md §2.6)")
    if b.startswith(b"\xef\xbb\xbf"):
        return not_json("it starts with a byte-order mark (spec/abi-v1.md §2.6)")
    depth = _json_depth(b)
    if depth > MAX_METADATA_DEPTH:
        return not_json(f"arrays and objects nest {depth} deep; at most {MAX_METADATA_DEPTH} are allowed (spec/abi-v1.md §2.6)")
    try:
        # Numbers are checked for syntax only (json refuses integers of more than 4300 digits);
        # NaN and Infinity are not JSON.
        md = json.loads(text, parse_int=float, parse_constant=_no_constant)
    except ValueError as e:
        return not_json(str(e))
    if not isinstance(md, dict):
        return not_json("not an object")

    def present(k):
        return md.get(k) is not None
    for k in ("name", "version", "description"):
        if present(k) and not isinstance(md[k], str):
            return f'metadata "{k}" must be a string (spec/abi-v1.md §2.6)'
    props = md.get("properties")
    if props is not None and (not isinstance(props, list) or not all(isinstance(p, str) for p in props)):
        return 'metadata "properties" must be a list of strings (spec/abi-v1.md §2.6)'
    name = md["name"] if present("name") else ""
    if not _NAME_RE.fullmatch(name):
        return f"metadata name {json.dumps(name)} must match [a-z0-9][a-z0-9-]{{0,62}} (spec/abi-v1.md §2.6)"
    if not present("version") or md["version"] == "":
        return 'metadata has no "version" (spec/abi-v1.md §2.6)'
    out = {"name": name, "version": md["version"], "properties": props or []}
    if present("description"):
        out["description"] = md["description"]
    return out
