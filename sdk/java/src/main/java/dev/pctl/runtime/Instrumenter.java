package dev.pctl.runtime;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The rewriting that enforces the work budget, the call-depth limit and the memory and table
 * limits of spec/abi-v1.md §7 inside the module: a port, instruction for instruction, of the Go
 * host's {@code runtime/internal/wasmbin} ({@code Parse} and {@code Instrument}), which the Node
 * and Python hosts port too. All four produce the very same bytes (the test
 * {@code InstrumenterTest} compares them with {@code runtime/internal/wasmbin/testdata/instrumented.txt}),
 * so Chicory charges the same fuel at the same points as wazero, V8 and wasmtime (§7.2): a call
 * that one host stops, every host stops.
 *
 * <p>What the rewritten module does (see the Go source for the reasons): every function entry
 * and every loop head subtract the instruction count of the straight part that follows from a
 * mutable i64 global exported as {@link #FUEL_EXPORT} and execute {@code unreachable} once it is
 * negative; bulk instructions subtract their length (128 per table element) before they run; a
 * depth counter ({@link #DEPTH_EXPORT}) traps past the limit; {@code memory.grow} failures set
 * {@link #MEMFAIL_EXPORT}; every ABI export becomes a wrapper that sets the crossing's budget; the
 * start function becomes the export {@link #START_EXPORT}; memory and table maxima are lowered to
 * the limits.
 */
final class Instrumenter {
    static final String FUEL_EXPORT = "pctl.fuel";
    static final String DEPTH_EXPORT = "pctl.depth";
    static final String MEMFAIL_EXPORT = "pctl.memfail";
    static final String START_EXPORT = "pctl.start";
    /** Fuel per table element of table.fill/copy/init, as a shift: 1 << 7 = 128 (§7.2, rule 3). */
    static final int TABLE_ELEMENT_COST_SHIFT = 7;

    private static final int SEC_CUSTOM = 0;
    private static final int SEC_TYPE = 1;
    private static final int SEC_IMPORT = 2;
    private static final int SEC_FUNCTION = 3;
    private static final int SEC_TABLE = 4;
    private static final int SEC_MEMORY = 5;
    private static final int SEC_GLOBAL = 6;
    private static final int SEC_EXPORT = 7;
    private static final int SEC_START = 8;
    private static final int SEC_ELEMENT = 9;
    private static final int SEC_CODE = 10;
    private static final int SEC_DATA = 11;
    private static final int SEC_TAG = 13;

    private Instrumenter() {}

    /** The limits to instrument with; the defaults are the hosts' (spec/abi-v1.md §7). */
    static final class Limits {
        long initialFuel = 1L << 33;
        long maxDepth = 1000;
        Map<String, Long> exportFuel = new HashMap<>();
        long maxMemoryPages = 512;
        long maxTableElements = 131072;
        boolean moveStart = true;

        /** The limits of every pctl host: 2^31 per ABI export, 2^33 for _initialize and the start function. */
        static Limits hostDefaults() {
            Limits l = new Limits();
            for (String n : List.of("pctl_abi_version", "pctl_key_buffer", "pctl_partition", "pctl_configure", "pctl_metadata",
                    "pctl_partition_batch", "pctl_ancestry")) {
                l.exportFuel.put(n, 1L << 31);
            }
            l.exportFuel.put("_initialize", 1L << 33);
            return l;
        }
    }

    record FuncType(byte[] params, byte[] results) {
        boolean same(FuncType o) {
            return java.util.Arrays.equals(params, o.params) && java.util.Arrays.equals(results, o.results);
        }
    }

    record Table(int refType, long min, long max, boolean hasMax) {}

    /** An active element or data segment (§7.3): table or memory, offset (if i32.const), length. */
    record Segment(long index, boolean offsetOK, long offset, long count) {}

    record Export(String name, int kind, long index) {}

    private record Section(int id, int start, int end) {}

    /** What the rewriting needs to know about a module, and what §7.3 checks. */
    static final class Parsed {
        final List<FuncType> types = new ArrayList<>();
        final List<FuncType> importTypes = new ArrayList<>(); // of imported functions, in order
        final List<Integer> funcs = new ArrayList<>(); // type index of each defined function
        final List<Table> tables = new ArrayList<>();
        final List<long[]> memories = new ArrayList<>(); // {min, max, hasMax}
        final List<Export> exports = new ArrayList<>();
        final List<Segment> elements = new ArrayList<>();
        final List<Segment> data = new ArrayList<>();
        boolean hasStart;
        long startFunc;
        int numGlobal;
        int impFuncs;
        int impGlob;
        int impMems;
        private final List<Section> sections = new ArrayList<>();

        Export export(String name) {
            for (Export e : exports) {
                if (e.name().equals(name)) {
                    return e;
                }
            }
            return null;
        }

        FuncType funcType(long idx) {
            if (idx < impFuncs) {
                return importTypes.get((int) idx);
            }
            long d = idx - impFuncs;
            if (d >= funcs.size() || funcs.get((int) d) >= types.size()) {
                return null;
            }
            return types.get(funcs.get((int) d));
        }

        boolean hasSection(int id) {
            for (Section s : sections) {
                if (s.id() == id) {
                    return true;
                }
            }
            return false;
        }
    }

    /** The rewritten module and what was parsed. */
    record Result(byte[] bytes, Parsed module, int fuelGlobal, int depthGlobal, int memFailGlobal) {}

    // ---- parsing (Go: wasmbin.Parse) --------------------------------------------------------

    static Parsed parse(byte[] b) throws WasmFormatException {
        if (b.length < 8 || b[0] != 0 || b[1] != 'a' || b[2] != 's' || b[3] != 'm') {
            throw malformed("", 0, "not a WebAssembly binary (it does not start with \\0asm)");
        }
        if (b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0) {
            throw new WasmFormatException(true, "", 4, "unsupported binary version; pctl takes core WebAssembly version 1 binaries");
        }
        Parsed m = new Parsed();
        R r = new R(b, 8, b.length, "");
        int lastID = 0;
        List<long[]> allMems = new ArrayList<>();
        while (r.pos < b.length) {
            int idPos = r.pos;
            int id = r.u8();
            long size = r.u32();
            int start = r.pos;
            if (size > b.length - start) {
                throw malformed("", idPos, String.format("section %d claims %d bytes but only %d remain", id, size, b.length - start));
            }
            int end = start + (int) size;
            if (id != SEC_CUSTOM) {
                if (id > SEC_TAG) {
                    throw malformed("", idPos, "unknown section id " + id);
                }
                if (lastID != 0 && order(id) <= order(lastID)) {
                    throw malformed("", idPos, "section " + id + " out of order");
                }
                lastID = id;
            }
            m.sections.add(new Section(id, start, end));
            R s = new R(b, start, end, sectionName(id));
            switch (id) {
                case SEC_TYPE: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        int pos = s.pos;
                        int form = s.u8();
                        if (form != 0x60) {
                            throw new WasmFormatException(true, "type section", pos, String.format("type %d has form 0x%02x; only function types (0x60) are allowed (GC types are not)", i, form));
                        }
                        byte[] params = s.valTypes();
                        m.types.add(new FuncType(params, s.valTypes()));
                    }
                    break;
                }
                case SEC_IMPORT: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        String mod = s.name();
                        String name = s.name();
                        int pos = s.pos;
                        int kind = s.u8();
                        switch (kind) {
                            case 0: {
                                long ti = s.u32();
                                if (ti >= m.types.size()) {
                                    throw malformed("import section", pos, String.format("import %s.%s uses type %d of %d", mod, name, ti, m.types.size()));
                                }
                                m.importTypes.add(m.types.get((int) ti));
                                m.impFuncs++;
                                break;
                            }
                            case 1:
                                s.u8();
                                s.limits();
                                break;
                            case 2:
                                allMems.add(s.limits());
                                m.impMems++;
                                break;
                            case 3:
                                s.u8();
                                s.u8();
                                m.impGlob++;
                                break;
                            case 4:
                                throw new WasmFormatException(true, "import section", pos, "tag imports (exception handling) are not allowed");
                            default:
                                throw malformed("import section", pos, String.format("unknown import kind 0x%02x", kind));
                        }
                    }
                    break;
                }
                case SEC_FUNCTION: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        m.funcs.add((int) s.u32());
                    }
                    break;
                }
                case SEC_TABLE: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        int rt = s.u8();
                        if (rt != 0x70 && rt != 0x6f) {
                            throw new WasmFormatException(true, "table section", s.pos - 1, String.format("table %d has element type 0x%02x; only funcref and externref are allowed (typed function references are not)", i, rt));
                        }
                        long[] lim = s.limits();
                        if (lim[3] != 0 || lim[4] != 0) {
                            throw new WasmFormatException(true, "table section", s.pos, "table " + i + " has limits flags of a shared or 64-bit table");
                        }
                        m.tables.add(new Table(rt, lim[0], lim[1], lim[2] != 0));
                    }
                    break;
                }
                case SEC_MEMORY: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        long[] lim = s.limits();
                        m.memories.add(lim);
                        allMems.add(lim);
                    }
                    break;
                }
                case SEC_GLOBAL:
                    m.numGlobal = (int) s.u32();
                    s.pos = end;
                    break;
                case SEC_EXPORT: {
                    long n = s.u32();
                    for (long i = 0; i < n; i++) {
                        String name = s.name();
                        int kind = s.u8();
                        m.exports.add(new Export(name, kind, s.u32()));
                    }
                    break;
                }
                case SEC_START:
                    m.hasStart = true;
                    m.startFunc = s.u32();
                    break;
                case SEC_ELEMENT:
                    parseElements(m, s);
                    break;
                case SEC_DATA:
                    parseData(m, s);
                    break;
                case SEC_TAG:
                    throw new WasmFormatException(true, "tag section", idPos, "exception handling is not allowed (spec/abi-v1.md §7.1)");
                default:
                    s.pos = end;
            }
            if (s.pos != end) {
                throw malformed(sectionName(id), s.pos, "section has " + (end - s.pos) + " unread bytes");
            }
            r.pos = end;
        }
        for (int i = 0; i < allMems.size(); i++) {
            if (allMems.get(i)[3] != 0) {
                throw new WasmFormatException(true, "memory section", 0, "memory " + i + " is shared: threads are not allowed (spec/abi-v1.md §7.1)");
            }
            if (allMems.get(i)[4] != 0) {
                throw new WasmFormatException(true, "memory section", 0, "memory " + i + " is a memory64: not allowed (spec/abi-v1.md §7.1)");
            }
        }
        return m;
    }

    /** Reads a constant expression through its end: {isConst (0/1), c as unsigned}. */
    private static long[] constExpr(R r) throws WasmFormatException {
        boolean first = true;
        boolean isConst = false;
        long c = 0;
        while (true) {
            int op = r.u8();
            if (op == 0x0b) {
                return new long[] {isConst ? 1 : 0, c};
            }
            if (first && op == 0x41) {
                c = r.s32() & 0xffffffffL;
                isConst = true;
                first = false;
                continue;
            }
            isConst = false;
            first = false;
            if (op == 0x02 || op == 0x03 || op == 0x04) {
                r.sleb(33);
                continue;
            }
            skipImmediates(r, op);
        }
    }

    private static void parseElements(Parsed m, R r) throws WasmFormatException {
        long n = r.u32();
        for (long i = 0; i < n; i++) {
            int pos = r.pos;
            long flags = r.u32();
            if (flags > 7) {
                throw malformed("element section", pos, "segment " + i + " has unknown flags " + flags);
            }
            boolean active = (flags & 1) == 0;
            long index = 0;
            long[] off = {0, 0};
            if ((flags & 2) != 0 && active) {
                index = r.u32();
            }
            if (active) {
                off = constExpr(r);
            }
            if ((flags & 3) != 0) {
                r.u8();
            }
            long count = r.u32();
            if ((flags & 4) == 0) {
                for (long j = 0; j < count; j++) {
                    r.u32();
                }
            } else {
                for (long j = 0; j < count; j++) {
                    constExpr(r);
                }
            }
            if (active) {
                m.elements.add(new Segment(index, off[0] != 0, off[1], count));
            }
        }
    }

    private static void parseData(Parsed m, R r) throws WasmFormatException {
        long n = r.u32();
        for (long i = 0; i < n; i++) {
            int pos = r.pos;
            long flags = r.u32();
            if (flags > 2) {
                throw malformed("data section", pos, "segment " + i + " has unknown flags " + flags);
            }
            long index = 0;
            long[] off = {0, 0};
            if (flags == 2) {
                index = r.u32();
            }
            if (flags != 1) {
                off = constExpr(r);
            }
            long size = r.u32();
            r.bytes(size);
            if (flags != 1) {
                m.data.add(new Segment(index, off[0] != 0, off[1], size));
            }
        }
    }

    private static int order(int id) {
        switch (id) {
            case SEC_TYPE:
                return 1;
            case SEC_IMPORT:
                return 2;
            case SEC_FUNCTION:
                return 3;
            case SEC_TABLE:
                return 4;
            case SEC_MEMORY:
                return 5;
            case SEC_TAG:
                return 6;
            case SEC_GLOBAL:
                return 7;
            case SEC_EXPORT:
                return 8;
            case SEC_START:
                return 9;
            case SEC_ELEMENT:
                return 10;
            case 12:
                return 11;
            case SEC_CODE:
                return 12;
            case SEC_DATA:
                return 13;
            default:
                return 0;
        }
    }

    private static String sectionName(int id) {
        String[] names = {"custom section", "type section", "import section", "function section", "table section",
            "memory section", "global section", "export section", "start section", "element section", "code section",
            "data section", "data count section", "tag section"};
        return id < names.length ? names[id] : "section " + id;
    }

    // ---- the rewriting (Go: wasmbin.Instrument) ---------------------------------------------

    private record Wrapper(int export, long target, int typ, long fuel) {}

    static Result instrument(byte[] b, Limits lim) throws WasmFormatException {
        Parsed m = parse(b);
        List<String> reserved = new ArrayList<>(List.of(FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT));
        if (lim.moveStart) {
            reserved.add(START_EXPORT);
        }
        for (String name : reserved) {
            if (m.export(name) != null) {
                throw malformed("export section", 0, "export name \"" + name + "\" is reserved by the pctl host");
            }
        }
        int fuelIdx = m.impGlob + m.numGlobal;
        int depthIdx = fuelIdx + 1;
        int memFailIdx = fuelIdx + 2;

        List<FuncType> newTypes = new ArrayList<>();
        Map<Integer, Integer> wrapType = new HashMap<>();
        for (int ti : m.funcs) {
            if (ti >= m.types.size()) {
                throw malformed("function section", 0, "function uses type " + ti + " of " + m.types.size());
            }
            FuncType t = m.types.get(ti);
            if (t.results().length <= 1 || wrapType.containsKey(ti)) {
                continue;
            }
            FuncType want = new FuncType(new byte[0], t.results());
            int found = indexOf(m.types, want);
            if (found < 0) {
                int j = indexOf(newTypes, want);
                if (j >= 0) {
                    found = m.types.size() + j;
                }
            }
            if (found < 0) {
                found = m.types.size() + newTypes.size();
                newTypes.add(want);
            }
            wrapType.put(ti, found);
        }

        List<Wrapper> wrappers = new ArrayList<>();
        for (int i = 0; i < m.exports.size(); i++) {
            Export e = m.exports.get(i);
            Long f = lim.exportFuel.get(e.name());
            if (f == null || e.kind() != 0 || e.index() < m.impFuncs || e.index() - m.impFuncs >= m.funcs.size()) {
                continue;
            }
            wrappers.add(new Wrapper(i, e.index(), m.funcs.get((int) (e.index() - m.impFuncs)), f));
        }
        boolean moveStart = lim.moveStart && m.hasStart;
        if (moveStart) {
            FuncType ft = m.startFunc < (long) m.impFuncs + m.funcs.size() ? m.funcType(m.startFunc) : null;
            if (ft == null || ft.params().length != 0 || ft.results().length != 0) {
                throw malformed("start section", 0, "start function " + m.startFunc + " must exist and have type () -> ()");
            }
            FuncType unit = new FuncType(new byte[0], new byte[0]);
            int typ = indexOf(m.types, unit);
            if (typ < 0) {
                int j = indexOf(newTypes, unit);
                typ = j >= 0 ? m.types.size() + j : m.types.size() + newTypes.size();
                if (j < 0) {
                    newTypes.add(unit);
                }
            }
            wrappers.add(new Wrapper(-1, m.startFunc, typ, lim.initialFuel));
        }
        List<Export> exports = new ArrayList<>(m.exports);
        for (int j = 0; j < wrappers.size(); j++) {
            Wrapper w = wrappers.get(j);
            long idx = (long) m.impFuncs + m.funcs.size() + j;
            if (w.export() >= 0) {
                Export e = exports.get(w.export());
                exports.set(w.export(), new Export(e.name(), e.kind(), idx));
            } else {
                exports.add(new Export(START_EXPORT, 0, idx));
            }
        }
        if (!wrappers.isEmpty() && !m.hasSection(SEC_CODE)) {
            throw malformed("code section", 0, "module exports functions but has no code section");
        }
        List<FuncType> allTypes = new ArrayList<>(m.types);
        allTypes.addAll(newTypes);

        Body body = new Body(m, fuelIdx, depthIdx, memFailIdx, lim.maxDepth, wrapType);
        Out out = new Out(b.length + b.length / 4 + 64);
        out.write(b, 0, 8);
        boolean wroteTypes = false;
        boolean wroteGlobals = false;
        boolean wroteExports = false;
        for (Section s : m.sections) {
            if (s.id() != SEC_CUSTOM) {
                if (!wroteTypes && !newTypes.isEmpty() && order(s.id()) > order(SEC_TYPE)) {
                    emitTypes(out, b, null, newTypes);
                    wroteTypes = true;
                }
                if (!wroteGlobals && order(s.id()) > order(SEC_GLOBAL)) {
                    emitGlobals(out, b, null, lim.initialFuel);
                    wroteGlobals = true;
                }
                if (!wroteExports && order(s.id()) > order(SEC_EXPORT)) {
                    emitExports(out, exports, fuelIdx, depthIdx, memFailIdx);
                    wroteExports = true;
                }
            }
            switch (s.id()) {
                case SEC_TYPE:
                    if (!newTypes.isEmpty()) {
                        emitTypes(out, b, s, newTypes);
                    } else {
                        out.section(s.id(), b, s.start(), s.end());
                    }
                    wroteTypes = true;
                    break;
                case SEC_GLOBAL:
                    emitGlobals(out, b, s, lim.initialFuel);
                    wroteGlobals = true;
                    break;
                case SEC_EXPORT:
                    emitExports(out, exports, fuelIdx, depthIdx, memFailIdx);
                    wroteExports = true;
                    break;
                case SEC_MEMORY:
                    if (lim.maxMemoryPages == 0) {
                        out.section(s.id(), b, s.start(), s.end());
                    } else {
                        Out mb = new Out(16);
                        mb.u64(m.memories.size());
                        for (long[] l : m.memories) {
                            long max = l[2] != 0 && l[1] < lim.maxMemoryPages ? l[1] : lim.maxMemoryPages;
                            mb.write(0x01);
                            mb.u64(l[0]);
                            mb.u64(max);
                        }
                        out.section(SEC_MEMORY, mb);
                    }
                    break;
                case SEC_TABLE:
                    if (lim.maxTableElements == 0) {
                        out.section(s.id(), b, s.start(), s.end());
                    } else {
                        Out tb = new Out(16);
                        tb.u64(m.tables.size());
                        for (Table t : m.tables) {
                            long max = t.hasMax() && t.max() < lim.maxTableElements ? t.max() : lim.maxTableElements;
                            tb.write(t.refType());
                            tb.write(0x01);
                            tb.u64(t.min());
                            tb.u64(max);
                        }
                        out.section(SEC_TABLE, tb);
                    }
                    break;
                case SEC_START:
                    if (!moveStart) {
                        out.section(s.id(), b, s.start(), s.end());
                    }
                    break;
                case SEC_FUNCTION: {
                    Out fb = new Out(m.funcs.size() * 2 + 8);
                    fb.u64(m.funcs.size() + wrappers.size());
                    for (int t : m.funcs) {
                        fb.u64(t);
                    }
                    for (Wrapper w : wrappers) {
                        fb.u64(w.typ());
                    }
                    out.section(SEC_FUNCTION, fb);
                    break;
                }
                case SEC_CODE: {
                    Out cb = body.code(b, s.start(), s.end(), wrappers.size());
                    for (Wrapper w : wrappers) {
                        Out wb = new Out(32);
                        wb.write(0); // no locals
                        wb.write(0x42);
                        wb.s64(w.fuel());
                        wb.write(0x24);
                        wb.u64(fuelIdx);
                        int np = allTypes.get(w.typ()).params().length;
                        for (int p = 0; p < np; p++) {
                            wb.write(0x20);
                            wb.u64(p);
                        }
                        wb.write(0x10);
                        wb.u64(w.target());
                        wb.write(0x0b);
                        cb.u64(wb.size());
                        cb.write(wb);
                    }
                    out.section(SEC_CODE, cb);
                    break;
                }
                case SEC_CUSTOM: {
                    R r = new R(b, s.start(), s.end(), "custom section");
                    String name = null;
                    try {
                        name = r.name();
                    } catch (WasmFormatException e) {
                        // keep it
                    }
                    if (name != null && name.startsWith(".debug")) {
                        break;
                    }
                    out.section(s.id(), b, s.start(), s.end());
                    break;
                }
                default:
                    out.section(s.id(), b, s.start(), s.end());
            }
        }
        if (!wroteTypes && !newTypes.isEmpty()) {
            emitTypes(out, b, null, newTypes);
        }
        if (!wroteGlobals) {
            emitGlobals(out, b, null, lim.initialFuel);
        }
        if (!wroteExports) {
            emitExports(out, exports, fuelIdx, depthIdx, memFailIdx);
        }
        return new Result(out.toByteArray(), m, fuelIdx, depthIdx, memFailIdx);
    }

    private static int indexOf(List<FuncType> l, FuncType t) {
        for (int i = 0; i < l.size(); i++) {
            if (l.get(i).same(t)) {
                return i;
            }
        }
        return -1;
    }

    private static void emitTypes(Out out, byte[] b, Section existing, List<FuncType> newTypes) throws WasmFormatException {
        Out body = new Out(64);
        long n = 0;
        int restStart = 0;
        int restEnd = 0;
        if (existing != null) {
            R r = new R(b, existing.start(), existing.end(), "type section");
            n = r.u32();
            restStart = r.pos;
            restEnd = existing.end();
        }
        body.u64(n + newTypes.size());
        body.write(b, restStart, restEnd - restStart);
        for (FuncType t : newTypes) {
            body.write(0x60);
            body.u64(t.params().length);
            body.write(t.params(), 0, t.params().length);
            body.u64(t.results().length);
            body.write(t.results(), 0, t.results().length);
        }
        out.section(SEC_TYPE, body);
    }

    private static void emitGlobals(Out out, byte[] b, Section existing, long initialFuel) throws WasmFormatException {
        Out body = new Out(64);
        long n = 0;
        int restStart = 0;
        int restEnd = 0;
        if (existing != null) {
            R r = new R(b, existing.start(), existing.end(), "global section");
            n = r.u32();
            restStart = r.pos;
            restEnd = existing.end();
        }
        body.u64(n + 3);
        body.write(b, restStart, restEnd - restStart);
        body.write(0x7e); // i64, mutable, i64.const initialFuel
        body.write(1);
        body.write(0x42);
        body.s64(initialFuel);
        body.write(0x0b);
        for (int i = 0; i < 2; i++) { // i32, mutable, i32.const 0
            body.write(0x7f);
            body.write(1);
            body.write(0x41);
            body.write(0);
            body.write(0x0b);
        }
        out.section(SEC_GLOBAL, body);
    }

    private static void emitExports(Out out, List<Export> exports, int fuelIdx, int depthIdx, int memFailIdx) {
        Out body = new Out(256);
        body.u64(exports.size() + 3);
        for (Export e : exports) {
            body.name(e.name());
            body.write(e.kind());
            body.u64(e.index());
        }
        String[] names = {FUEL_EXPORT, DEPTH_EXPORT, MEMFAIL_EXPORT};
        int[] idx = {fuelIdx, depthIdx, memFailIdx};
        for (int i = 0; i < 3; i++) {
            body.name(names[i]);
            body.write(3);
            body.u64(idx[i]);
        }
        out.section(SEC_EXPORT, body);
    }

    /** The rewriting of function bodies (Go: the instrumenter type). */
    private static final class Body {
        private final Parsed m;
        private final int fuel;
        private final int depth;
        private final int memFail;
        private final long maxDepth;
        private final Map<Integer, Integer> wrapType;

        Body(Parsed m, int fuel, int depth, int memFail, long maxDepth, Map<Integer, Integer> wrapType) {
            this.m = m;
            this.fuel = fuel;
            this.depth = depth;
            this.memFail = memFail;
            this.maxDepth = maxDepth;
            this.wrapType = wrapType;
        }

        Out code(byte[] b, int start, int end, int extra) throws WasmFormatException {
            R r = new R(b, start, end, "code section");
            long n = r.u32();
            if (n != m.funcs.size()) {
                throw malformed("code section", start, n + " bodies for " + m.funcs.size() + " functions");
            }
            Out out = new Out((end - start) + (end - start) / 4 + 64);
            out.u64(n + extra);
            Out fb = new Out(1024);
            for (int i = 0; i < n; i++) {
                long size = r.u32();
                int bodyStart = r.pos;
                r.bytes(size);
                fb.reset();
                function(fb, b, bodyStart, bodyStart + (int) size, i);
                out.u64(fb.size());
                out.write(fb);
            }
            return out;
        }

        private static final int RETURN = 1;
        private static final int LOOP = 2;
        private static final int GROW = 3;
        private static final int BULK_MEMORY = 4;
        private static final int BULK_TABLE = 5;

        private void function(Out out, byte[] b, int start, int end, int fn) throws WasmFormatException {
            String where = "code section, function " + (m.impFuncs + fn);
            R r = new R(b, start, end, where);
            long groups = r.u32();
            long numLocals = 0;
            for (long g = 0; g < groups; g++) {
                numLocals += r.u32();
                r.u8();
            }
            int localsEnd = r.pos;
            FuncType t = m.types.get(m.funcs.get(fn));
            long scratch = t.params().length + numLocals;
            boolean needScratch = false;

            // Pass 1: the cost of each straight part (counter 0: the top level; one per loop), and
            // the instructions that get extra code: {kind, start, end, counter}.
            List<Long> costs = new ArrayList<>();
            costs.add(0L);
            List<Integer> stack = new ArrayList<>();
            stack.add(0);
            List<int[]> specials = new ArrayList<>();
            int bodyEnd = -1;
            while (r.pos < end) {
                int at = r.pos;
                int op = r.u8();
                int cur = stack.get(stack.size() - 1);
                costs.set(cur, costs.get(cur) + 1);
                if (op == 0x02 || op == 0x04) {
                    r.sleb(33);
                    stack.add(cur);
                } else if (op == 0x03) {
                    r.sleb(33);
                    costs.add(0L);
                    stack.add(costs.size() - 1);
                    specials.add(new int[] {LOOP, at, r.pos, costs.size() - 1});
                } else if (op == 0x0b) {
                    stack.remove(stack.size() - 1);
                    if (stack.isEmpty()) {
                        bodyEnd = at;
                        break;
                    }
                } else {
                    int bulk = 0;
                    if (op == 0xfc) {
                        long sub = new R(b, r.pos, end, where).u32();
                        if (sub == 8 || sub == 10 || sub == 11) {
                            bulk = BULK_MEMORY;
                        } else if (sub == 12 || sub == 14 || sub == 17) {
                            bulk = BULK_TABLE;
                        }
                    }
                    skipImmediates(r, op);
                    if (op == 0x0f) {
                        specials.add(new int[] {RETURN, at, r.pos, 0});
                    } else if (op == 0x40) {
                        needScratch = true;
                        specials.add(new int[] {GROW, at, r.pos, 0});
                    } else if (bulk != 0) {
                        needScratch = true;
                        specials.add(new int[] {bulk, at, r.pos, 0});
                    }
                }
            }
            if (bodyEnd < 0 || r.pos != end) {
                throw malformed(where, r.pos, "function body does not end with its final `end`");
            }

            // Pass 2: emit.
            if (needScratch) {
                if (numLocals + t.params().length >= 50000) {
                    throw malformed(where, start, "too many locals");
                }
                out.u64(groups + 1);
                R rr = new R(b, start, end, where);
                rr.u32();
                out.write(b, rr.pos, localsEnd - rr.pos);
                out.write(1);
                out.write(0x7f);
            } else {
                out.write(b, start, localsEnd - start);
            }
            depthEnter(out);
            charge(out, costs.get(0));
            out.write(0x02); // block with the function's results
            if (t.results().length == 0) {
                out.write(0x40);
            } else if (t.results().length == 1) {
                out.write(t.results()[0]);
            } else {
                out.s64(wrapType.get(m.funcs.get(fn)));
            }
            int pos = localsEnd;
            for (int[] sp : specials) {
                out.write(b, pos, sp[1] - pos);
                switch (sp[0]) {
                    case RETURN:
                        depthLeave(out);
                        out.write(b, sp[1], sp[2] - sp[1]);
                        break;
                    case LOOP:
                        out.write(b, sp[1], sp[2] - sp[1]);
                        charge(out, costs.get(sp[3]));
                        break;
                    case BULK_MEMORY:
                    case BULK_TABLE:
                        chargeBulk(out, scratch, sp[0] == BULK_TABLE);
                        out.write(b, sp[1], sp[2] - sp[1]);
                        break;
                    default: // memory.grow: remember a refusal
                        out.write(b, sp[1], sp[2] - sp[1]);
                        out.write(0x22); // local.tee scratch
                        out.u64(scratch);
                        out.write(new byte[] {0x41, 0x7f, 0x46, 0x04, 0x40, 0x41, 0x01, 0x24}); // i32.const -1, i32.eq, if, i32.const 1, global.set
                        out.u64(memFail);
                        out.write(0x0b); // end
                        out.write(0x20); // local.get scratch
                        out.u64(scratch);
                }
                pos = sp[2];
            }
            out.write(b, pos, bodyEnd - pos); // all but the final end
            out.write(0x0b); // end of the wrapper block
            depthLeave(out);
            out.write(0x0b); // end of the function
        }

        private void charge(Out out, long cost) {
            if (cost < 1) {
                cost = 1;
            }
            out.write(0x23);
            out.u64(fuel);
            out.write(0x42);
            out.s64(cost);
            out.write(0x7d); // i64.sub
            out.write(0x24);
            out.u64(fuel);
            out.write(0x23);
            out.u64(fuel);
            out.write(new byte[] {0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b}); // i64.const 0, i64.lt_s, if, unreachable, end
        }

        private void chargeBulk(Out out, long scratch, boolean table) {
            out.write(0x22); // local.tee scratch
            out.u64(scratch);
            out.write(0x23); // global.get fuel
            out.u64(fuel);
            out.write(0x20); // local.get scratch
            out.u64(scratch);
            out.write(0xad); // i64.extend_i32_u
            if (table) {
                out.write(new byte[] {0x42, TABLE_ELEMENT_COST_SHIFT, (byte) 0x86}); // i64.const 7, i64.shl
            }
            out.write(0x7d); // i64.sub
            out.write(0x24);
            out.u64(fuel);
            out.write(0x23);
            out.u64(fuel);
            out.write(new byte[] {0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b});
        }

        private void depthEnter(Out out) {
            out.write(0x23);
            out.u64(depth);
            out.write(new byte[] {0x41, 0x01, 0x6a, 0x24}); // i32.const 1, i32.add, global.set
            out.u64(depth);
            out.write(0x23);
            out.u64(depth);
            out.write(0x41);
            out.s64(maxDepth);
            out.write(new byte[] {0x4b, 0x04, 0x40, 0x00, 0x0b}); // i32.gt_u, if, unreachable, end
        }

        private void depthLeave(Out out) {
            out.write(0x23);
            out.u64(depth);
            out.write(new byte[] {0x41, 0x01, 0x6b, 0x24}); // i32.const 1, i32.sub, global.set
            out.u64(depth);
        }
    }

    // ---- instruction immediates (Go: skipImmediates) -----------------------------------------

    private static WasmFormatException unsupported(R r, String msg) {
        return new WasmFormatException(true, r.where, r.pos - 1, msg + " (spec/abi-v1.md §7.1)");
    }

    static void skipImmediates(R r, int op) throws WasmFormatException {
        if (op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b) {
            return;
        }
        if ((op >= 0x06 && op <= 0x0a) || op == 0x18 || op == 0x19 || op == 0x1f) {
            throw unsupported(r, String.format("exception handling instruction 0x%02x is not allowed", op));
        }
        if (op == 0x0c || op == 0x0d || op == 0x10) {
            r.u32();
            return;
        }
        if (op == 0x0e) {
            long n = r.u32();
            for (long i = 0; i <= n; i++) {
                r.u32();
            }
            return;
        }
        if (op == 0x11) {
            r.u32();
            r.u32();
            return;
        }
        if (op == 0x12 || op == 0x13 || op == 0x15) {
            throw unsupported(r, "tail calls are not allowed");
        }
        if (op == 0x14) {
            throw unsupported(r, "typed function references (call_ref) are not allowed");
        }
        if (op == 0x1c) {
            r.bytes(r.u32());
            return;
        }
        if (op >= 0x20 && op <= 0x26) {
            r.u32();
            return;
        }
        if (op >= 0x28 && op <= 0x3e) {
            memarg(r);
            return;
        }
        if (op == 0x3f || op == 0x40) {
            r.u32();
            return;
        }
        if (op == 0x41) {
            r.sleb(32);
            return;
        }
        if (op == 0x42) {
            r.sleb(64);
            return;
        }
        if (op == 0x43) {
            r.bytes(4);
            return;
        }
        if (op == 0x44) {
            r.bytes(8);
            return;
        }
        if (op >= 0x45 && op <= 0xc4) {
            return;
        }
        if (op == 0xd0) {
            r.sleb(33);
            return;
        }
        if (op == 0xd1) {
            return;
        }
        if (op == 0xd2) {
            r.u32();
            return;
        }
        if ((op >= 0xd3 && op <= 0xd6) || op == 0xfb) {
            throw unsupported(r, String.format("GC / typed reference instruction 0x%02x is not allowed", op));
        }
        if (op == 0xfc) {
            long sub = r.u32();
            if (sub <= 7) {
                return;
            }
            if (sub == 8) {
                r.u32();
                r.u32();
                return;
            }
            if (sub == 9 || sub == 13 || sub == 11 || sub == 15 || sub == 16 || sub == 17) {
                r.u32();
                return;
            }
            if (sub == 10 || sub == 12 || sub == 14) {
                r.u32();
                r.u32();
                return;
            }
            throw unsupported(r, "instruction 0xfc " + sub + " is not allowed");
        }
        if (op == 0xfd) {
            long sub = r.u32();
            if (sub <= 11 || sub == 92 || sub == 93) {
                memarg(r);
                return;
            }
            if (sub == 12 || sub == 13) {
                r.bytes(16);
                return;
            }
            if (sub >= 21 && sub <= 34) {
                r.u8();
                return;
            }
            if (sub >= 84 && sub <= 91) {
                memarg(r);
                r.u8();
                return;
            }
            if (sub <= 255) {
                return;
            }
            throw unsupported(r, "relaxed SIMD instruction 0xfd " + sub + " is not allowed (its results differ between engines)");
        }
        if (op == 0xfe) {
            throw unsupported(r, "atomic (threads) instructions are not allowed");
        }
        throw malformed(r.where, r.pos - 1, String.format("unknown opcode 0x%02x", op));
    }

    private static void memarg(R r) throws WasmFormatException {
        long align = r.u32();
        if ((align & 0x40) != 0) {
            r.u32(); // memory index (multi-memory)
        }
        r.u32();
    }

    static WasmFormatException malformed(String where, int offset, String msg) {
        return new WasmFormatException(false, where, offset, msg);
    }

    // ---- reading and writing ----------------------------------------------------------------

    /** A cursor over {@code b[pos, end)} with the Go reader's LEB128 rules. */
    static final class R {
        final byte[] b;
        int pos;
        final int end;
        final String where;

        R(byte[] b, int pos, int end, String where) {
            this.b = b;
            this.pos = pos;
            this.end = end;
            this.where = where;
        }

        int u8() throws WasmFormatException {
            if (pos >= end) {
                throw malformed(where, pos, "unexpected end of data");
            }
            return b[pos++] & 0xff;
        }

        void bytes(long n) throws WasmFormatException {
            if (n < 0 || n > end - pos) {
                throw malformed(where, pos, "need " + n + " bytes, " + (end - pos) + " remain");
            }
            pos += (int) n;
        }

        /** Unsigned LEB128 of at most {@code bits} bits (32 or 64, the latter as a signed long). */
        long uleb(int bits) throws WasmFormatException {
            long v = 0;
            int shift = 0;
            while (true) {
                int c = u8();
                if (shift < 64) {
                    v |= (long) (c & 0x7f) << shift;
                }
                shift += 7;
                if ((c & 0x80) == 0) {
                    break;
                }
                if (shift >= bits + 7) {
                    throw malformed(where, pos, "LEB128 integer too long");
                }
            }
            if (bits < 64 && (v >>> bits) != 0) {
                throw malformed(where, pos, "LEB128 integer out of range");
            }
            return v;
        }

        long u32() throws WasmFormatException {
            return uleb(32);
        }

        /** A signed LEB128 of at most 32 bits. */
        long s32() throws WasmFormatException {
            long v = 0;
            int shift = 0;
            int c;
            while (true) {
                c = u8();
                v |= (long) (c & 0x7f) << shift;
                shift += 7;
                if ((c & 0x80) == 0) {
                    break;
                }
                if (shift >= 32 + 7) {
                    throw malformed(where, pos, "LEB128 integer too long");
                }
            }
            if (shift < 64 && (c & 0x40) != 0) {
                v |= -1L << shift;
            }
            return (int) v;
        }

        /** Skips a signed LEB128 of at most {@code bits} bits. */
        void sleb(int bits) throws WasmFormatException {
            int shift = 0;
            while (true) {
                int c = u8();
                shift += 7;
                if ((c & 0x80) == 0) {
                    return;
                }
                if (shift >= bits + 7) {
                    throw malformed(where, pos, "LEB128 integer too long");
                }
            }
        }

        String name() throws WasmFormatException {
            long n = u32();
            int at = pos;
            bytes(n);
            try {
                return StandardCharsets.UTF_8.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(b, at, (int) n))
                        .toString();
            } catch (CharacterCodingException e) {
                throw malformed(where, at, "name is not valid UTF-8");
            }
        }

        byte[] valTypes() throws WasmFormatException {
            long n = u32();
            if (n > end - pos) {
                throw malformed(where, pos, "vector longer than the section");
            }
            byte[] out = new byte[(int) n];
            for (int i = 0; i < n; i++) {
                out[i] = (byte) u8();
            }
            return out;
        }

        /** Limits: {min, max, hasMax, shared, is64}. */
        long[] limits() throws WasmFormatException {
            int flags = u8();
            if ((flags & ~0x07) != 0) {
                throw malformed(where, pos, String.format("unknown limits flags 0x%02x", flags));
            }
            boolean is64 = (flags & 0x04) != 0;
            int bits = is64 ? 64 : 32;
            long min = uleb(bits);
            long max = 0;
            boolean hasMax = (flags & 0x01) != 0;
            if (hasMax) {
                max = uleb(bits);
            }
            return new long[] {min, max, hasMax ? 1 : 0, (flags & 0x02) != 0 ? 1 : 0, is64 ? 1 : 0};
        }
    }

    /** A growable byte buffer with the Go encoder's LEB128 rules. */
    static final class Out extends ByteArrayOutputStream {
        Out(int cap) {
            super(Math.max(cap, 64));
        }

        void u64(long v) { // unsigned LEB128 (Go: appendU32 / appendU64)
            do {
                int c = (int) (v & 0x7f);
                v >>>= 7;
                write(v != 0 ? c | 0x80 : c);
            } while (v != 0);
        }

        void s64(long v) { // signed LEB128 (Go: appendS64)
            while (true) {
                int c = (int) (v & 0x7f);
                v >>= 7;
                if ((v == 0 && (c & 0x40) == 0) || (v == -1 && (c & 0x40) != 0)) {
                    write(c);
                    return;
                }
                write(c | 0x80);
            }
        }

        void name(String s) {
            byte[] e = s.getBytes(StandardCharsets.UTF_8);
            u64(e.length);
            write(e, 0, e.length);
        }

        void write(Out o) {
            write(o.buf, 0, o.count);
        }

        void section(int id, Out body) {
            write(id);
            u64(body.size());
            write(body);
        }

        void section(int id, byte[] b, int start, int end) {
            write(id);
            u64(end - start);
            write(b, start, end - start);
        }

        @Override
        public void write(byte[] b) {
            write(b, 0, b.length);
        }
    }
}
