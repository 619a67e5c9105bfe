"""Tests of the rewriting that enforces spec/abi-v1.md §7 on wasmtime (a port of the Go host's
runtime/internal/wasmbin), and of the host's refusals, on small modules assembled here."""

import os

import pytest

from pctl.runtime import wasmbin
from pctl.runtime.host import CLASS, CallError, LoadError, Plugin

I32 = 0x7F


def u32(v):
    out = []
    while True:
        c = v & 0x7F
        v >>= 7
        out.append(c | 0x80 if v else c)
        if not v:
            return out


def s32(v):
    out = []
    while True:
        c = v & 0x7F
        v >>= 7
        if (v == 0 and not c & 0x40) or (v == -1 and c & 0x40):
            return out + [c]
        out.append(c | 0x80)


def vec(items):
    return u32(len(items)) + [x for it in items for x in it]


def string(s):
    return u32(len(s.encode())) + list(s.encode())


def section(sid, body):
    return [sid] + u32(len(body)) + body


def module(types=(), imports=(), funcs=(), memory=None, exports=(), start=None):
    b = [0, 0x61, 0x73, 0x6D, 1, 0, 0, 0]
    b += section(1, vec([[0x60] + vec([[p] for p in ps]) + vec([[r] for r in rs]) for ps, rs in types]))
    if imports:
        b += section(2, vec([string(m) + string(n) + [0] + u32(t) for m, n, t in imports]))
    b += section(3, vec([u32(f[0]) for f in funcs]))
    if memory:
        lim = [1] + u32(memory[0]) + u32(memory[1]) if len(memory) > 1 else [0] + u32(memory[0])
        b += section(5, vec([lim]))
    b += section(7, vec([string(n) + [k] + u32(i) for n, k, i in exports]))
    if start is not None:
        b += section(8, u32(start))
    bodies = []
    for _, locals_, code in funcs:
        body = vec([u32(n) + [t] for n, t in locals_]) + list(code) + [0x0B]
        bodies.append(u32(len(body)) + body)
    b += section(10, vec(bodies))
    return bytes(b)


def partitioner(extra_funcs=(), extra_exports=(), memory=(17,), imports=(), types=(), code=None, start=None):
    """A minimal correct partitioner: buffer at 65536, partition = key_len % n; extra functions
    get indices from 3 + len(imports)."""
    t = [((), (I32,)), ((I32,), (I32,)), ((I32, I32), (I32,))] + list(types)
    ni = len(imports)
    return module(
        types=t, imports=imports, memory=memory, start=start,
        funcs=[(0, [], [0x41, 1]), (1, [], [0x41] + s32(65536)), (2, [], code or [0x20, 0, 0x20, 1, 0x70])] + list(extra_funcs),
        exports=[("memory", 2, 0), ("pctl_abi_version", 0, ni), ("pctl_key_buffer", 0, ni + 1), ("pctl_partition", 0, ni + 2)] + list(extra_exports))


def limits():
    return wasmbin.InstrumentLimits(initial_fuel=1 << 33, max_depth=1000, export_fuel={"pctl_partition": 1 << 31}, max_memory_pages=512, move_start=True)


def test_the_assembler_makes_modules_the_host_runs():
    p = Plugin.open(partitioner())
    assert p.partition_all([b"", bytes(5), bytes(12)], 7) == [0, 5, 5]


@pytest.mark.parametrize("decl,want", [((1,), 512), ((1, 100), 100), ((1, 512), 512), ((1, 1000), 512), ((1, 65536), 512)])
def test_memory_maximum_is_min_of_declared_and_512(decl, want):
    out, _ = wasmbin.instrument(partitioner(memory=decl), limits())
    mem = wasmbin.parse(out).memories[0]
    assert (mem.min, mem.has_max, mem.max) == (decl[0], True, want)


def test_memory_grow_past_the_limit_fails_and_a_trap_after_it_is_a_memory_limit():
    # pctl_partition: grow by n; unreachable if that failed, else 0.
    code = [0x20, 1, 0x40, 0, 0x41, 0x7F, 0x46, 0x04, 0x40, 0x00, 0x0B, 0x41, 0]
    p = Plugin.open(partitioner(code=code))
    assert p.partition_all([b""], 495) == [0]  # 17 + 495 = 512 pages: allowed
    with pytest.raises(CallError) as e:
        p.partition_all([b""], 1)
    assert e.value.cls == CLASS.MEMORY_LIMIT
    q = Plugin.open(partitioner(code=code, memory=(17, 20)))
    with pytest.raises(CallError) as e:
        q.partition_all([b""], 4)
    assert e.value.cls == CLASS.MEMORY_LIMIT, "the declared maximum is a limit too"


def test_reserved_export_names_are_refused():
    out, _ = wasmbin.instrument(partitioner(), limits())
    names = [e.name for e in wasmbin.parse(out).exports]
    assert {wasmbin.FUEL_EXPORT, wasmbin.DEPTH_EXPORT, wasmbin.MEMFAIL_EXPORT} <= set(names)
    for reserved in (wasmbin.FUEL_EXPORT, wasmbin.START_EXPORT):
        with pytest.raises(wasmbin.WasmbinError, match=reserved.replace(".", r"\.")) as e:
            wasmbin.instrument(partitioner(extra_exports=[(reserved, 0, 0)]), limits())
        assert e.value.kind == "malformed"


@pytest.mark.parametrize("name,code", [
    ("tail call", [0x12, 0]),
    ("atomics", [0xFE, 0x00, 0x02, 0x00]),
    ("exceptions", [0x06, 0x40, 0x0B]),
    ("relaxed SIMD", [0xFD] + u32(0x100)),
    ("GC", [0xFB, 0x00]),
])
def test_instructions_outside_wasm_2_are_unsupported_features(name, code):
    b = partitioner(code=code + [0x41, 0])
    with pytest.raises(wasmbin.WasmbinError) as e:
        wasmbin.instrument(b, limits())
    assert e.value.kind == "unsupported", name
    with pytest.raises(LoadError) as e:
        Plugin.open(b)
    assert e.value.cls == CLASS.FEATURE


def test_unknown_opcode_is_malformed():
    with pytest.raises(wasmbin.WasmbinError, match="unknown opcode 0xc5") as e:
        wasmbin.instrument(partitioner(code=[0xC5]), limits())
    assert e.value.kind == "malformed"


def test_call_depth_1000_frames_run_1001_trap():
    # f(d) = d == 0 ? 0 : f(d - 1); pctl_partition calls f(n - 1): 1 + n frames.
    f = (1, [], [0x20, 0, 0x45, 0x04, I32, 0x41, 0, 0x05, 0x20, 0, 0x41, 1, 0x6B, 0x10, 3, 0x0B])
    call = [0x20, 1, 0x41, 1, 0x6B, 0x10, 3, 0x1A, 0x41, 0]
    p = Plugin.open(partitioner(extra_funcs=[f], code=call))
    assert p.partition_all([b""], 999) == [0]
    with pytest.raises(CallError) as e:
        p.partition_all([b""], 1000)
    assert e.value.cls == CLASS.CALL_DEPTH


def test_returns_and_branches_to_the_function_label_unwind_the_depth():
    g = (1, [], [0x20, 0, 0x45, 0x04, 0x40, 0x41, 0, 0x0F, 0x0B, 0x20, 0, 0x41, 1, 0x6B, 0x10, 3, 0x0C, 0])
    loop = [0x03, 0x40, 0x41, 5, 0x10, 3, 0x1A, 0x20, 1, 0x41, 1, 0x6B, 0x22, 1, 0x0D, 0, 0x0B, 0x41, 0]
    p = Plugin.open(partitioner(extra_funcs=[g], code=loop))
    assert p.partition_all([b""], 5000) == [0]


def test_a_start_function_runs_before_anything_else_and_can_use_wasi():
    types = [((I32, I32), (I32,)), ((), ())]  # 3 = random_get's type, 4 = () -> ()
    imports = [("wasi_snapshot_preview1", "random_get", 3)]
    start_fn = (4, [], [0x41] + s32(65636) + [0x41, 8, 0x10, 0, 0x1A])
    part = [0x41] + s32(65636) + [0x2D, 0, 0, 0x20, 1, 0x70]  # i32.load8_u; rem_u
    p = Plugin.open(partitioner(types=types, imports=imports, extra_funcs=[start_fn], code=part, start=4))
    assert p.profile == "wasi-deterministic"
    assert p.partition_all([b""], 256) == [0xAF], "the first byte of the stream"


def test_a_loop_without_end_is_stopped_by_the_work_budget():
    p = Plugin.open(partitioner(code=[0x03, 0x40, 0x0C, 0, 0x0B, 0x41, 0]))
    with pytest.raises(CallError) as e:
        p.partition_all([b""], 3)
    assert e.value.cls == CLASS.TIME_LIMIT


def test_instrumented_bytes_equal_the_node_port(tmp_path):
    """Both ports must rewrite a module to the very same bytes as each other (and so stop it at
    the same point); checked on the Go toolchain's module, the largest one, when node is here."""
    import shutil
    import subprocess
    from pathlib import Path
    node = shutil.which("node")
    if node is None:
        msg = "node is not installed: the two ports' rewrites cannot be compared"
        if os.environ.get("PCTL_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail(msg + " (PCTL_REQUIRE_TOOLCHAINS=1)")
        pytest.skip(msg)
    root = Path(__file__).resolve().parents[3]
    wasm = root / "plugins" / "murmur2" / "kafka-murmur2-go.wasm"
    js = root / "conformance" / "hosts" / "node" / "src" / "wasmbin.js"
    out = tmp_path / "node.wasm"
    script = (f"import {{ instrument }} from {str(js)!r}; import {{ readFileSync, writeFileSync }} from 'node:fs';"
              f"const b = readFileSync({str(wasm)!r});"
              "const ef = new Map([['pctl_partition', 1n << 31n], ['_initialize', 1n << 33n]]);"
              "const r = instrument(new Uint8Array(b), { initialFuel: 1n << 33n, maxDepth: 1000, exportFuel: ef, maxMemoryPages: 512, moveStart: true });"
              f"writeFileSync({str(out)!r}, r.bytes);")
    subprocess.run([node, "--input-type=module", "-e", script], check=True)
    lim = wasmbin.InstrumentLimits(initial_fuel=1 << 33, max_depth=1000, export_fuel={"pctl_partition": 1 << 31, "_initialize": 1 << 33}, max_memory_pages=512, move_start=True)
    py, _ = wasmbin.instrument(wasm.read_bytes(), lim)
    assert py == out.read_bytes()


def test_instrumented_bytes_equal_the_go_host_on_the_corpus():
    """The rewriting must produce exactly the Go host's bytes (runtime/internal/wasmbin), so that
    wasmtime charges the same fuel at the same points as wazero (spec/abi-v1.md §7.2): every module
    of the corpus, rewritten with the hosts' default limits, hashes to what
    runtime/internal/wasmbin/testdata/instrumented.txt records from Go (or is refused with the same
    class)."""
    import hashlib
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    abi = ["pctl_abi_version", "pctl_key_buffer", "pctl_partition", "pctl_configure", "pctl_metadata", "pctl_partition_batch", "pctl_ancestry"]
    lim = wasmbin.InstrumentLimits(initial_fuel=1 << 33, max_depth=1000, export_fuel={"_initialize": 1 << 33, **{n: 1 << 31 for n in abi}},
                                   max_memory_pages=512, max_table_elements=131072, move_start=True)
    lines = [l for l in (root / "runtime/internal/wasmbin/testdata/instrumented.txt").read_text().splitlines() if l and not l.startswith("#")]
    assert len(lines) > 40
    wrong = []
    for line in lines:
        want, name = line.split(" ", 1)
        try:
            out, _ = wasmbin.instrument((root / name).read_bytes(), lim)
            got = hashlib.sha256(out).hexdigest()
        except wasmbin.WasmbinError as e:
            got = "unsupported" if e.kind == "unsupported" else "malformed"
        if got != want:
            wrong.append(f"{name}: {got}, Go: {want}")
    assert wrong == []
