package dev.pctl.runtime;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The parts of a WebAssembly binary that the host must know before Chicory sees the module
 * (types, imports, exports, memories, the features it declares). The rewriting that enforces the
 * limits of spec/abi-v1.md §7 is {@link Instrumenter}.
 *
 * <p>Only the module's structure is decoded here: function bodies are copied byte for byte
 * (Chicory decodes and validates them; {@link Plugin} scans their opcodes for forbidden features).
 * Errors are {@link WasmFormatException}s that name the section and the byte offset.
 */
final class WasmBinary {
    static final int SEC_CUSTOM = 0;
    static final int SEC_TYPE = 1;
    static final int SEC_IMPORT = 2;
    static final int SEC_FUNCTION = 3;
    static final int SEC_TABLE = 4;
    static final int SEC_MEMORY = 5;
    static final int SEC_GLOBAL = 6;
    static final int SEC_EXPORT = 7;
    static final int SEC_START = 8;
    static final int SEC_ELEMENT = 9;
    static final int SEC_CODE = 10;
    static final int SEC_DATA = 11;
    static final int SEC_DATACOUNT = 12;
    static final int SEC_TAG = 13;

    static final int KIND_FUNC = 0;
    static final int KIND_TABLE = 1;
    static final int KIND_MEMORY = 2;
    static final int KIND_GLOBAL = 3;
    static final int KIND_TAG = 4;

    static final byte I32 = 0x7f;
    static final byte I64 = 0x7e;
    static final byte F32 = 0x7d;
    static final byte F64 = 0x7c;
    static final byte V128 = 0x7b;
    static final byte FUNCREF = 0x70;
    static final byte EXTERNREF = 0x6f;

    /** A function signature; {@link #toString} prints it as the Go host does: "(i32, i32) -> (i32)". */
    record FuncType(byte[] params, byte[] results) {
        static FuncType of(byte[] params, byte[] results) {
            return new FuncType(params, results);
        }

        boolean sameAs(FuncType o) {
            return java.util.Arrays.equals(params, o.params) && java.util.Arrays.equals(results, o.results);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof FuncType && sameAs((FuncType) o);
        }

        @Override
        public int hashCode() {
            return 31 * java.util.Arrays.hashCode(params) + java.util.Arrays.hashCode(results);
        }

        @Override
        public String toString() {
            return "(" + list(params) + ") -> (" + list(results) + ")";
        }

        private static String list(byte[] ts) {
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < ts.length; i++) {
                if (i > 0) {
                    sb.append(", ");
                }
                sb.append(valTypeName(ts[i]));
            }
            return sb.toString();
        }
    }

    record Import(String module, String name, int kind, int typeIndex) {}

    record Export(String name, int kind, int index) {}

    /** Memory or table limits; {@code max} is -1 when absent. */
    record Limits(long min, long max) {}

    record Section(int id, int headerStart, int start, int end) {}

    final byte[] bytes;
    final List<Section> sections = new ArrayList<>();
    final List<FuncType> types = new ArrayList<>();
    final List<Import> imports = new ArrayList<>();
    final List<Export> exports = new ArrayList<>();
    final List<Limits> memories = new ArrayList<>(); // defined memories
    int importedFuncs;
    int importedGlobals;
    int importedMemories;
    int[] funcTypes = new int[0]; // type index of each defined function
    int definedGlobals;
    /** [start, end) of each code-section entry, its size prefix included. */
    int[] bodyStart = new int[0];
    int[] bodyEnd = new int[0];

    private WasmBinary(byte[] bytes) {
        this.bytes = bytes;
    }

    static String valTypeName(byte t) {
        switch (t) {
            case I32:
                return "i32";
            case I64:
                return "i64";
            case F32:
                return "f32";
            case F64:
                return "f64";
            case V128:
                return "v128";
            case FUNCREF:
                return "funcref";
            case EXTERNREF:
                return "externref";
            default:
                return String.format("type(0x%02x)", t & 0xff);
        }
    }

    static String kindName(int kind) {
        switch (kind) {
            case KIND_FUNC:
                return "function";
            case KIND_TABLE:
                return "table";
            case KIND_MEMORY:
                return "memory";
            case KIND_GLOBAL:
                return "global";
            case KIND_TAG:
                return "tag";
            default:
                return "kind(" + kind + ")";
        }
    }

    /** The signature of function {@code index} of the module's function index space, or null. */
    FuncType funcType(long index) {
        int ti;
        if (index < 0) {
            return null;
        }
        if (index < importedFuncs) {
            int seen = 0;
            ti = -1;
            for (Import im : imports) {
                if (im.kind() == KIND_FUNC && seen++ == index) {
                    ti = im.typeIndex();
                    break;
                }
            }
        } else if (index - importedFuncs < funcTypes.length) {
            ti = funcTypes[(int) (index - importedFuncs)];
        } else {
            return null;
        }
        return ti >= 0 && ti < types.size() ? types.get(ti) : null;
    }

    Export export(String name) {
        for (Export e : exports) {
            if (e.name().equals(name)) {
                return e;
            }
        }
        return null;
    }

    // ---- parsing -------------------------------------------------------------------------

    /** Order of the non-custom sections in a module (the tag section sits between memory and global). */
    private static int rank(int id) {
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
            case SEC_DATACOUNT:
                return 11;
            case SEC_CODE:
                return 12;
            case SEC_DATA:
                return 13;
            default:
                return -1;
        }
    }

    static WasmBinary parse(byte[] b) throws WasmFormatException {
        WasmBinary m = new WasmBinary(b);
        m.parseAll();
        return m;
    }

    private void parseAll() throws WasmFormatException {
        byte[] b = bytes;
        if (b.length < 8) {
            throw malformed("header", 0, "the module has " + b.length + " bytes; a module starts with 8 bytes of magic and version");
        }
        if (b[4] != 1 || b[5] != 0 || b[6] != 0 || b[7] != 0) {
            throw malformed("header", 4, String.format("binary format version %02x %02x %02x %02x; only version 1 (a core module) is supported", b[4], b[5], b[6], b[7]));
        }
        Reader r = new Reader(b, 8, b.length, "module");
        int lastRank = 0;
        while (r.pos < r.end) {
            int headerStart = r.pos;
            int id = r.u8();
            long size = r.u32();
            int start = r.pos;
            if (size > r.end - start) {
                throw malformed("section " + id, headerStart, "declares " + size + " bytes but only " + (r.end - start) + " remain (truncated module?)");
            }
            int end = start + (int) size;
            if (id != SEC_CUSTOM) {
                int rk = rank(id);
                if (rk < 0) {
                    throw malformed("section " + id, headerStart, "unknown section id " + id);
                }
                if (rk <= lastRank) {
                    throw malformed("section " + id, headerStart, "section out of order or repeated");
                }
                lastRank = rk;
            }
            sections.add(new Section(id, headerStart, start, end));
            Reader s = new Reader(b, start, end, sectionName(id));
            switch (id) {
                case SEC_CUSTOM:
                    s.name(); // a custom section starts with a valid name
                    s.pos = end;
                    break;
                case SEC_TYPE:
                    parseTypes(s);
                    break;
                case SEC_IMPORT:
                    parseImports(s);
                    break;
                case SEC_FUNCTION:
                    parseFunctions(s);
                    break;
                case SEC_TABLE:
                    parseTables(s);
                    break;
                case SEC_MEMORY:
                    parseMemories(s);
                    break;
                case SEC_TAG:
                    throw unsupported(s, start, "exception handling (a tag section)");
                case SEC_GLOBAL:
                    definedGlobals = s.count("globals");
                    s.pos = end;
                    break;
                case SEC_EXPORT:
                    parseExports(s);
                    break;
                case SEC_CODE:
                    parseCode(s);
                    break;
                default:
                    s.pos = end; // start, element, data count, data: Chicory decodes them
            }
            if (s.pos != end) {
                throw malformed(sectionName(id), s.pos, "section size mismatch: " + (end - s.pos) + " bytes left over");
            }
            r.pos = end;
        }
        if (funcTypes.length != bodyStart.length) {
            throw malformed("code section", b.length, "the function section declares " + funcTypes.length + " functions but the code section has " + bodyStart.length + " bodies");
        }
    }

    private static String sectionName(int id) {
        switch (id) {
            case SEC_CUSTOM:
                return "custom section";
            case SEC_TYPE:
                return "type section";
            case SEC_IMPORT:
                return "import section";
            case SEC_FUNCTION:
                return "function section";
            case SEC_TABLE:
                return "table section";
            case SEC_MEMORY:
                return "memory section";
            case SEC_GLOBAL:
                return "global section";
            case SEC_EXPORT:
                return "export section";
            case SEC_START:
                return "start section";
            case SEC_ELEMENT:
                return "element section";
            case SEC_CODE:
                return "code section";
            case SEC_DATA:
                return "data section";
            case SEC_DATACOUNT:
                return "data count section";
            case SEC_TAG:
                return "tag section";
            default:
                return "section " + id;
        }
    }

    private void parseTypes(Reader s) throws WasmFormatException {
        int n = s.count("types");
        for (int i = 0; i < n; i++) {
            int at = s.pos;
            int form = s.u8();
            switch (form) {
                case 0x60:
                    break;
                case 0x4e:
                case 0x50:
                case 0x4f:
                case 0x5e:
                case 0x5f:
                    throw unsupported(s, at, String.format("garbage collection (type form 0x%02x in type %d)", form, i));
                default:
                    throw malformed(s.where, at, String.format("type %d has form 0x%02x; a function type starts with 0x60", i, form));
            }
            byte[] params = valTypes(s, "type " + i);
            byte[] results = valTypes(s, "type " + i);
            types.add(FuncType.of(params, results));
        }
    }

    private byte[] valTypes(Reader s, String what) throws WasmFormatException {
        int n = s.count("value types");
        byte[] out = new byte[n];
        for (int i = 0; i < n; i++) {
            out[i] = valType(s, what);
        }
        return out;
    }

    private static byte valType(Reader s, String what) throws WasmFormatException {
        int at = s.pos;
        int t = s.u8();
        switch (t) {
            case 0x7f:
            case 0x7e:
            case 0x7d:
            case 0x7c:
            case 0x7b:
            case 0x70:
            case 0x6f:
                return (byte) t;
            case 0x69:
                throw unsupported(s, at, "exception handling (exnref in " + what + ")");
            case 0x63:
            case 0x64:
            case 0x6e:
            case 0x6d:
            case 0x6c:
            case 0x6b:
            case 0x6a:
            case 0x71:
            case 0x72:
            case 0x73:
            case 0x74:
                throw unsupported(s, at, String.format("garbage collection or typed references (value type 0x%02x in %s)", t, what));
            default:
                throw malformed(s.where, at, String.format("unknown value type 0x%02x in %s", t, what));
        }
    }

    private void parseImports(Reader s) throws WasmFormatException {
        int n = s.count("imports");
        for (int i = 0; i < n; i++) {
            String module = s.name();
            String name = s.name();
            int at = s.pos;
            int kind = s.u8();
            int typeIndex = -1;
            switch (kind) {
                case KIND_FUNC:
                    typeIndex = (int) s.u32();
                    if (typeIndex >= types.size()) {
                        throw malformed(s.where, at, "import " + module + "." + name + " uses type " + typeIndex + " of " + types.size());
                    }
                    importedFuncs++;
                    break;
                case KIND_TABLE:
                    s.u8();
                    limits(s, false);
                    break;
                case KIND_MEMORY:
                    limits(s, true);
                    importedMemories++;
                    break;
                case KIND_GLOBAL:
                    valType(s, "import " + module + "." + name);
                    s.u8();
                    importedGlobals++;
                    break;
                case KIND_TAG:
                    s.u8();
                    s.u32();
                    break;
                default:
                    throw malformed(s.where, at, "import " + module + "." + name + " has unknown kind " + kind);
            }
            imports.add(new Import(module, name, kind, typeIndex));
        }
    }

    private void parseFunctions(Reader s) throws WasmFormatException {
        int n = s.count("functions");
        funcTypes = new int[n];
        for (int i = 0; i < n; i++) {
            int at = s.pos;
            long t = s.u32();
            if (t >= types.size()) {
                throw malformed(s.where, at, "function " + (importedFuncs + i) + " uses type " + t + " of " + types.size());
            }
            funcTypes[i] = (int) t;
        }
    }

    private void parseTables(Reader s) throws WasmFormatException {
        int n = s.count("tables");
        for (int i = 0; i < n; i++) {
            int at = s.pos;
            int t = s.u8();
            if (t == 0x40) {
                throw unsupported(s, at, "typed function references (a table with an initialiser)");
            }
            s.pos = at;
            byte rt = valType(s, "table " + i);
            if (rt != FUNCREF && rt != EXTERNREF) {
                throw malformed(s.where, at, "table " + i + " has element type " + valTypeName(rt) + "; want funcref or externref");
            }
            limits(s, false);
        }
    }

    private void parseMemories(Reader s) throws WasmFormatException {
        int n = s.count("memories");
        if (n + importedMemories > 1) {
            throw unsupported(s, s.pos, "multiple memories (" + (n + importedMemories) + ")");
        }
        for (int i = 0; i < n; i++) {
            memories.add(limits(s, true));
        }
    }

    private static Limits limits(Reader s, boolean memory) throws WasmFormatException {
        int at = s.pos;
        int flags = s.u8();
        if (memory && (flags == 2 || flags == 3)) {
            throw unsupported(s, at, "threads (a shared memory)");
        }
        if (memory && flags >= 4 && flags <= 7) {
            throw unsupported(s, at, "memory64");
        }
        if (flags > 1) {
            throw malformed(s.where, at, String.format("limits flags 0x%02x", flags));
        }
        long min = s.u32();
        long max = flags == 1 ? s.u32() : -1;
        return new Limits(min, max);
    }

    private void parseExports(Reader s) throws WasmFormatException {
        int n = s.count("exports");
        for (int i = 0; i < n; i++) {
            String name = s.name();
            int at = s.pos;
            int kind = s.u8();
            if (kind > KIND_TAG) {
                throw malformed(s.where, at, "export \"" + name + "\" has unknown kind " + kind);
            }
            long index = s.u32();
            exports.add(new Export(name, kind, (int) index));
        }
    }

    private void parseCode(Reader s) throws WasmFormatException {
        int n = s.count("function bodies");
        bodyStart = new int[n];
        bodyEnd = new int[n];
        for (int i = 0; i < n; i++) {
            int entry = s.pos;
            long size = s.u32();
            if (size > s.end - s.pos) {
                throw malformed(s.where, entry, "body of function " + (importedFuncs + i) + " declares " + size + " bytes; " + (s.end - s.pos) + " remain");
            }
            int end = s.pos + (int) size;
            Reader body = new Reader(s.b, s.pos, end, "code section, function " + (importedFuncs + i));
            int groups = body.count("local groups");
            for (int g = 0; g < groups; g++) {
                body.u32();
                valType(body, "the locals of function " + (importedFuncs + i));
            }
            bodyStart[i] = entry;
            bodyEnd[i] = end;
            s.pos = end;
        }
    }

    static void uleb(ByteArrayOutputStream o, long v) {
        do {
            int b = (int) (v & 0x7f);
            v >>>= 7;
            o.write(v != 0 ? b | 0x80 : b);
        } while (v != 0);
    }

    static void sleb(ByteArrayOutputStream o, long v) {
        while (true) {
            int b = (int) (v & 0x7f);
            v >>= 7;
            boolean done = (v == 0 && (b & 0x40) == 0) || (v == -1 && (b & 0x40) != 0);
            o.write(done ? b : b | 0x80);
            if (done) {
                return;
            }
        }
    }

    // ---- errors and reading ------------------------------------------------------------------

    static WasmFormatException malformed(String where, int offset, String msg) {
        return new WasmFormatException(false, where, offset, msg);
    }

    private static WasmFormatException unsupported(Reader s, int offset, String feature) {
        return new WasmFormatException(true, s.where, offset, feature + " is not allowed by spec/abi-v1.md §7.1");
    }

    /** A cursor over {@code b[pos, end)}. */
    static final class Reader {
        final byte[] b;
        int pos;
        final int end;
        final String where;

        Reader(byte[] b, int pos, int end, String where) {
            this.b = b;
            this.pos = pos;
            this.end = end;
            this.where = where;
        }

        int u8() throws WasmFormatException {
            if (pos >= end) {
                throw malformed(where, pos, "unexpected end");
            }
            return b[pos++] & 0xff;
        }

        long u32() throws WasmFormatException {
            long v = 0;
            int at = pos;
            for (int shift = 0; ; shift += 7) {
                int x = u8();
                if (shift == 28 && (x & 0x70) != 0) {
                    throw malformed(where, at, "integer too large for u32");
                }
                v |= (long) (x & 0x7f) << shift;
                if ((x & 0x80) == 0) {
                    return v;
                }
                if (shift == 28) {
                    throw malformed(where, at, "integer representation too long");
                }
            }
        }

        /** A vector length, bounded by the bytes left (every element takes at least one byte). */
        int count(String what) throws WasmFormatException {
            int at = pos;
            long n = u32();
            if (n > end - pos) {
                throw malformed(where, at, n + " " + what + " declared but only " + (end - pos) + " bytes remain");
            }
            return (int) n;
        }

        String name() throws WasmFormatException {
            int at = pos;
            long n = u32();
            if (n > end - pos) {
                throw malformed(where, at, "name of " + n + " bytes runs past the end");
            }
            ByteBuffer bb = ByteBuffer.wrap(b, pos, (int) n);
            pos += (int) n;
            try {
                return StandardCharsets.UTF_8.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(bb)
                        .toString();
            } catch (CharacterCodingException e) {
                throw malformed(where, at, "name is not valid UTF-8");
            }
        }
    }

    /** The sections as parsed, for tests. */
    List<Section> sections() {
        return Collections.unmodifiableList(sections);
    }
}
