package dev.pctl.runtime;

import com.dylibso.chicory.compiler.InterpreterFallback;
import com.dylibso.chicory.compiler.MachineFactoryCompiler;
import com.dylibso.chicory.runtime.ChicoryInterruptedException;
import com.dylibso.chicory.runtime.ExportFunction;
import com.dylibso.chicory.runtime.HostFunction;
import com.dylibso.chicory.runtime.ImportValues;
import com.dylibso.chicory.runtime.Instance;
import com.dylibso.chicory.runtime.InterpreterMachine;
import com.dylibso.chicory.runtime.Machine;
import com.dylibso.chicory.wasm.ChicoryException;
import com.dylibso.chicory.wasm.Parser;
import com.dylibso.chicory.wasm.WasmModule;
import com.dylibso.chicory.wasm.types.FunctionBody;
import com.dylibso.chicory.wasm.types.Instruction;
import com.dylibso.chicory.wasm.types.OpCode;
import dev.pctl.internal.Json;
import dev.pctl.runtime.PluginException.Kind;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.function.Function;
import java.util.regex.Pattern;

/**
 * A loaded pctl partitioner module (spec/abi-v1.md): checked, instrumented, compiled by Chicory
 * and probed once, ready to create instances.
 *
 * <p>Loading does what the Go host's {@code runtime.Load} does, in the same order: size, magic,
 * structure and features, imports (the import profile, §6), exports (§2), initial memory (§7),
 * compilation, then a probe instance that runs the lifecycle of §3 up to the buffer (start
 * function, {@code _initialize}, {@code pctl_abi_version}, {@code pctl_metadata},
 * {@code pctl_key_buffer}). Any failure is a {@link PluginException} with {@code atLoad} set.
 * The probe instance becomes the first instance that {@link #open} hands out, so a module's
 * {@code _initialize} runs once for the common case of a run without failures.
 *
 * <p>Thread-safe: {@link #open} may be called from any thread, and each {@link PluginInstance}
 * it returns is then used by one thread at a time (any thread; the {@link Watchdog} times the
 * thread that makes the call). Calls nest WebAssembly frames as JVM frames: a thread with a
 * small stack may run out of it before the ABI's 1000 frames ({@link
 * PluginException#engineStackOverflow()}); the conformance host's worker thread has 1 GiB.
 */
public final class Plugin {
    /** {@code PCTL_ABI_VERSION}: the one ABI version this host supports. */
    public static final int ABI_VERSION = 1;
    /** Largest module, in bytes (spec/abi-v1.md §7). */
    public static final int MAX_MODULE_BYTES = 8 << 20;
    /** Largest linear memory, in 64 KiB pages (§7). */
    public static final int MAX_MEMORY_PAGES = 512;
    /** Most nested WebAssembly frames (§7). */
    public static final int MAX_CALL_DEPTH = 1000;
    /** {@code PCTL_MAX_TABLE_ELEMENTS}: most elements of all tables together (§7.3). */
    public static final long MAX_TABLE_ELEMENTS = 131072;
    /** {@code PCTL_FUEL}: the work budget of one crossing, in the units of §7.2. */
    public static final long FUEL = 1L << 31;
    /** How deep arrays and objects may nest in a metadata document (§2.6, rule 3). */
    static final int MAX_METADATA_DEPTH = 32;
    /** {@code PCTL_MAX_KEY}: longest key, in bytes (§1.3). */
    public static final int MAX_KEY = 65536;
    /** {@code PCTL_MAX_CONFIG}: longest config, in bytes (§1.3). */
    public static final int MAX_CONFIG = 65536;
    static final int MAX_METADATA = 65536;
    /** The buffer size asked of {@code pctl_key_buffer}: {@code PCTL_MAX_BUFFER}. */
    public static final int BUFFER_BYTES = 1 << 20;
    /** Most keys per {@code pctl_partition_batch} crossing (the Go runtime's figure). */
    public static final int MAX_BATCH_KEYS = 4096;

    static final int CODE_INVALID = -1;
    static final int CODE_CONFIG = -2;
    static final int CODE_UNSUPPORTED = -3;
    static final int CODE_BUFFER = -4;
    static final int CODE_INTERNAL = -5;

    /**
     * Knobs with the spec's defaults; tests lower the time limits. A plain settings object:
     * every field documents its default. A {@link Plugin} copies it when it loads.
     */
    public static final class Options {
        /**
         * The last-resort wall-clock limit of one crossing (a single or a batch call). Default
         * 30 s. The time limit of spec/abi-v1.md §7 is the work budget, counted in the module as
         * on every host (§7.2), which stops every call that loops or does unbounded work (in about
         * 6 s of Chicory's compiled code at worst); §7 lets a host add a wall-clock safety net only
         * far beyond what the budget allows, at least 30 s, so that a call the other hosts complete
         * is never stopped here. A call stopped by it is a time limit too.
         */
        public long callLimitNanos = 30_000_000_000L;
        /**
         * The same for instantiation, the start function and {@code _initialize}, each: default
         * 30 s too. Their budget is 4 times a call's (2^33 units): a start function that loops
         * spends it in about 30 to 60 s of Chicory's compiled code, so this net usually stops it
         * first, with the same error.
         */
        public long initLimitNanos = 30_000_000_000L;
        /** Compile to JVM bytecode (default true) or interpret. */
        public boolean compile = true;
        /** Use pctl_partition_batch when the module has it (default true); false: single calls only. */
        public boolean useBatch = true;
        /** Where compiled modules are kept across processes; default null: compile in every process. */
        public java.nio.file.Path cacheDir;
        /** The deterministic WASI clock (§6.2); conformance changes it to check determinism. */
        public long wasiTime = Wasi.TIME;
        /** The initial state of the deterministic WASI random stream (§6.2; default 0). */
        public long wasiSeed = 0;

        /** A copy of these settings. */
        public Options copy() {
            Options o = new Options();
            o.callLimitNanos = callLimitNanos;
            o.initLimitNanos = initLimitNanos;
            o.compile = compile;
            o.useBatch = useBatch;
            o.cacheDir = cacheDir;
            o.wasiTime = wasiTime;
            o.wasiSeed = wasiSeed;
            return o;
        }
    }

    private static final Pattern NAME = Pattern.compile("[a-z0-9][a-z0-9-]{0,62}");

    private static final byte I32 = WasmBinary.I32;
    private static final byte I64 = WasmBinary.I64;

    /** An ABI export: its name, whether it is required and its exact signature (§2). */
    private record ExportSpec(String name, boolean required, WasmBinary.FuncType sig) {}

    private static final List<ExportSpec> ABI_EXPORTS = List.of(
            new ExportSpec("pctl_abi_version", true, sig(new byte[] {}, new byte[] {I32})),
            new ExportSpec("pctl_key_buffer", true, sig(new byte[] {I32}, new byte[] {I32})),
            new ExportSpec("pctl_partition", true, sig(new byte[] {I32, I32}, new byte[] {I32})),
            new ExportSpec("_initialize", false, sig(new byte[] {}, new byte[] {})),
            new ExportSpec("pctl_configure", false, sig(new byte[] {I32}, new byte[] {I32})),
            new ExportSpec("pctl_metadata", false, sig(new byte[] {}, new byte[] {I64})),
            new ExportSpec("pctl_partition_batch", false, sig(new byte[] {I32, I32}, new byte[] {I32})),
            new ExportSpec("pctl_ancestry", false, sig(new byte[] {I32, I32, I32}, new byte[] {I32})));

    private static WasmBinary.FuncType sig(byte[] p, byte[] r) {
        return WasmBinary.FuncType.of(p, r);
    }

    /** Opcodes of the proposals that §7.1 forbids (Chicory implements them, so the host refuses them). */
    private static final Set<OpCode> FORBIDDEN_OPCODES = EnumSet.noneOf(OpCode.class);

    static {
        for (OpCode op : OpCode.values()) {
            int code = op.opcode();
            if ((code & 0xff00) == 0xfb00 || (code & 0xff00) == 0xfe00) {
                FORBIDDEN_OPCODES.add(op); // GC, threads
            }
        }
        FORBIDDEN_OPCODES.addAll(List.of(
                OpCode.THROW, OpCode.THROW_REF, OpCode.TRY_TABLE, // exception handling
                OpCode.RETURN_CALL, OpCode.RETURN_CALL_INDIRECT, OpCode.RETURN_CALL_REF, // tail calls
                OpCode.CALL_REF, OpCode.REF_AS_NON_NULL, OpCode.BR_ON_NULL, OpCode.BR_ON_NON_NULL, // typed references
                OpCode.REF_EQ)); // GC
    }

    final String source;
    final String digest;
    final Options options;
    final boolean wasiProfile;
    final List<String> imports = new ArrayList<>();
    private final WasmModule module;
    private final Function<Instance, Machine> machineFactory;
    private final int depthGlobal;
    private final int fuelGlobal;
    private final int memFailGlobal;
    private final boolean startMoved; // the module has a start function, now the export pctl.start
    private final List<String> wasiImports = new ArrayList<>();

    boolean hasInitialize;
    boolean hasConfigure;
    boolean hasMetadata;
    boolean hasBatch;
    boolean hasAncestry;
    int abiVersion;
    volatile String name = "unnamed";
    String version = "0.0.0";
    List<String> properties = List.of();

    private PluginInstance spare; // the probe instance, not yet handed out; guarded by this

    private static final boolean TIMING = System.getenv("PCTL_JAVA_TIMING") != null;
    private static long lastMark = System.nanoTime();

    /** With PCTL_JAVA_TIMING set, prints how long each phase of loading took. */
    static void mark(String phase) {
        if (TIMING) {
            long now = System.nanoTime();
            System.err.printf("pctl-java: %s %d ms%n", phase, (now - lastMark) / 1_000_000);
            lastMark = now;
        }
    }

    /** The first 12 hex digits of a digest, as messages show it. */
    public static String shortDigest(String d) {
        return d.length() > 12 ? d.substring(0, 12) : d;
    }

    /** The hex SHA-256 of b: a module's digest (spec/abi-v1.md §1). */
    public static String sha256(byte[] b) {
        try {
            byte[] h = MessageDigest.getInstance("SHA-256").digest(b);
            StringBuilder sb = new StringBuilder(64);
            for (byte x : h) {
                sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Loads a module: checks, compiles and probes it. {@code source} names it in errors (a file
     * name, or "plugin NAME" for a module fetched from a broker). Loading a 2 MB Go-built module
     * takes a few seconds (Chicory decodes and compiles it to JVM bytecode); built-ins and other
     * small modules take a fraction of a second.
     */
    public static Plugin load(byte[] wasm, String source, Options options) throws PluginException {
        if (wasm.length > MAX_MODULE_BYTES) {
            throw PluginException.load(Kind.TOO_LARGE, source, null, String.format(
                    "%d bytes, the limit is %d (spec/abi-v1.md §7); strip debug info (e.g. -ldflags=-s, -C strip=symbols) or shrink the module",
                    wasm.length, MAX_MODULE_BYTES));
        }
        if (wasm.length < 4 || wasm[0] != 0 || wasm[1] != 'a' || wasm[2] != 's' || wasm[3] != 'm') {
            throw PluginException.load(Kind.NOT_WASM, source, null, "the file starts with " + quoteHead(wasm)
                    + ", not \\0asm; give the compiled .wasm binary (a .wat text file must be assembled first, e.g. wat2wasm)");
        }
        String digest = sha256(wasm);
        WasmBinary bin;
        try {
            mark("read");
            bin = WasmBinary.parse(wasm);
        } catch (WasmFormatException e) {
            throw PluginException.load(e.unsupportedFeature ? Kind.UNSUPPORTED_FEATURE : Kind.INVALID_MODULE, source, digest, e.getMessage());
        }
        return new Plugin(wasm, bin, source, digest, options.copy());
    }

    private static String quoteHead(byte[] b) {
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < Math.min(8, b.length); i++) {
            int c = b[i] & 0xff;
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                sb.append((char) c);
            } else {
                sb.append(String.format("\\x%02x", c));
            }
        }
        return sb.append('"').toString();
    }

    private Plugin(byte[] wasm, WasmBinary bin, String source, String digest, Options options) throws PluginException {
        this.source = source;
        this.digest = digest;
        this.options = options;

        // The rewriting of every pctl host (spec/abi-v1.md §7.2), first, as the Go host does: it
        // decodes every instruction, refuses the features §7.1 forbids and the export names it
        // reserves (pctl.fuel, pctl.depth, pctl.memfail, pctl.start).
        Instrumenter.Result inst;
        try {
            inst = Instrumenter.instrument(wasm, Instrumenter.Limits.hostDefaults());
        } catch (WasmFormatException e) {
            throw loadError(e.unsupportedFeature ? Kind.UNSUPPORTED_FEATURE : Kind.INVALID_MODULE, e.getMessage());
        }

        // Imports decide the profile (§6).
        boolean wasi = false;
        for (WasmBinary.Import im : bin.imports) {
            imports.add(im.module() + "." + im.name());
            if (!im.module().equals(Wasi.MODULE)) {
                throw loadError(Kind.FORBIDDEN_IMPORT, String.format(
                        "imports %s.%s (a %s); portable modules import nothing and wasi-deterministic modules import only listed %s functions (spec/abi-v1.md §6)",
                        im.module(), im.name(), WasmBinary.kindName(im.kind()), Wasi.MODULE));
            }
            WasmBinary.FuncType want = Wasi.SIGNATURES.get(im.name());
            if (im.kind() != WasmBinary.KIND_FUNC || want == null) {
                throw loadError(Kind.FORBIDDEN_IMPORT, String.format(
                        "imports %s.%s, which the wasi-deterministic profile does not provide (allowed: %s; spec/abi-v1.md §6.2)",
                        im.module(), im.name(), String.join(", ", Wasi.SIGNATURES.keySet())));
            }
            WasmBinary.FuncType got = bin.types.get(im.typeIndex());
            if (!got.sameAs(want)) {
                throw loadError(Kind.FORBIDDEN_IMPORT, String.format(
                        "imports %s.%s with signature %s; the profile defines %s", im.module(), im.name(), got, want));
            }
            wasiImports.add(im.name());
            wasi = true;
        }
        this.wasiProfile = wasi;

        // Exports (§2).
        checkExports(bin);
        WasmBinary.Export mem = bin.export("memory");
        int memIndex = mem.index() - bin.importedMemories;
        if (mem.index() < bin.importedMemories || memIndex >= bin.memories.size()) {
            throw loadError(Kind.INVALID_MODULE, "export \"memory\" names memory " + mem.index() + ", which the module does not define");
        }
        long initial = bin.memories.get(memIndex).min();
        if (initial > MAX_MEMORY_PAGES) {
            throw loadError(Kind.MEMORY_LIMIT, String.format("declares %d initial memory pages (%d MiB); the limit is %d pages (%d MiB)",
                    initial, initial / 16, MAX_MEMORY_PAGES, MAX_MEMORY_PAGES / 16));
        }

        checkLoad(inst.module());

        // Chicory: decode, validate, scan, compile the rewritten module.
        mark("checks");
        this.depthGlobal = inst.depthGlobal();
        this.fuelGlobal = inst.fuelGlobal();
        this.memFailGlobal = inst.memFailGlobal();
        this.startMoved = inst.module().hasStart;
        WasmModule m;
        try {
            m = Parser.parse(inst.bytes());
        } catch (ChicoryException | IllegalArgumentException | IndexOutOfBoundsException e) {
            // Say what is wrong with the module as given, not with the rewritten copy.
            String detail = firstLine(e);
            try {
                Parser.parse(wasm);
            } catch (RuntimeException orig) {
                detail = firstLine(orig);
            }
            throw loadError(Kind.INVALID_MODULE, detail);
        }
        this.module = m;
        mark("chicory parse");
        scanOpcodes(bin);

        Function<Instance, Machine> factory = InterpreterMachine::new;
        if (options.compile) {
            factory = compile(m, options.cacheDir);
            if (factory == null && options.cacheDir != null) {
                factory = compile(m, null); // an unusable cache entry: compile afresh
            }
            if (factory == null) {
                // The compiler has limits of its own (JVM class and method sizes beyond what it
                // can split); the interpreter runs every valid module.
                factory = InterpreterMachine::new;
            }
        }
        this.machineFactory = factory;
        mark("compile");

        // The probe: lifecycle steps 1-4 and the metadata; it becomes the first open() instance.
        try {
            spare = newInstance(true);
        } catch (PluginException e) {
            throw e.atLoad ? e : e.asLoad(source, digest);
        }
    }

    /** Chicory's compiler (functions too large for a JVM method are interpreted), or null if it fails. */
    private static Function<Instance, Machine> compile(WasmModule m, java.nio.file.Path cacheDir) {
        try {
            MachineFactoryCompiler.Builder cb = MachineFactoryCompiler.builder(m).withInterpreterFallback(InterpreterFallback.SILENT);
            if (cacheDir != null) {
                cb.withCache(new FileCache(cacheDir));
            }
            return cb.compile();
        } catch (RuntimeException | LinkageError e) {
            return null;
        }
    }

    /**
     * The structural checks of spec/abi-v1.md §7.3, in their order, with the Go host's words: the
     * table limit, then the bounds of active element and data segments (which Chicory checks too,
     * but only when it instantiates, as a trap).
     */
    private void checkLoad(Instrumenter.Parsed p) throws PluginException {
        long sum = 0;
        for (int i = 0; i < p.tables.size(); i++) {
            Instrumenter.Table t = p.tables.get(i);
            if (t.min() > MAX_TABLE_ELEMENTS) {
                throw loadError(Kind.TABLE_LIMIT, String.format("table %d declares %d initial elements; the limit is %d (spec/abi-v1.md §7.3)", i, t.min(), MAX_TABLE_ELEMENTS));
            }
            sum += t.hasMax() && t.max() < MAX_TABLE_ELEMENTS ? t.max() : MAX_TABLE_ELEMENTS;
        }
        if (sum > MAX_TABLE_ELEMENTS) {
            throw loadError(Kind.TABLE_LIMIT, String.format("%d tables could grow to %d elements together; the limit is %d: declare maxima that sum to at most the limit (spec/abi-v1.md §7.3)",
                    p.tables.size(), sum, MAX_TABLE_ELEMENTS));
        }
        for (int i = 0; i < p.elements.size(); i++) {
            Instrumenter.Segment sg = p.elements.get(i);
            if (sg.index() >= p.tables.size()) {
                throw loadError(Kind.INVALID_MODULE, String.format("element segment %d initialises table %d, which the module does not define", i, sg.index()));
            }
            if (!sg.offsetOK()) {
                throw loadError(Kind.INVALID_MODULE, String.format("element segment %d: the offset must be a constant i32.const (spec/abi-v1.md §7.3)", i));
            }
            long size = p.tables.get((int) sg.index()).min();
            if (sg.offset() + sg.count() > size) {
                throw loadError(Kind.INVALID_MODULE, String.format("element segment %d writes elements [%d, %d) of table %d, which has %d: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)",
                        i, sg.offset(), sg.offset() + sg.count(), sg.index(), size));
            }
        }
        for (int i = 0; i < p.data.size(); i++) {
            Instrumenter.Segment sg = p.data.get(i);
            long memIdx = sg.index() - p.impMems;
            if (sg.index() < p.impMems || memIdx >= p.memories.size()) {
                throw loadError(Kind.INVALID_MODULE, String.format("data segment %d initialises memory %d, which the module does not define", i, sg.index()));
            }
            if (!sg.offsetOK()) {
                throw loadError(Kind.INVALID_MODULE, String.format("data segment %d: the offset must be a constant i32.const (spec/abi-v1.md §7.3)", i));
            }
            long size = p.memories.get((int) memIdx)[0] * 65536;
            if (sg.offset() + sg.count() > size) {
                throw loadError(Kind.INVALID_MODULE, String.format("data segment %d writes bytes [%d, %d) of memory %d, which has %d: out of bounds, so instantiation must fail (spec/abi-v1.md §7.3)",
                        i, sg.offset(), sg.offset() + sg.count(), sg.index(), size));
            }
        }
    }

    private PluginException loadError(Kind kind, String detail) {
        return PluginException.load(kind, source, digest, detail);
    }

    private void checkExports(WasmBinary bin) throws PluginException {
        WasmBinary.Export mem = bin.export("memory");
        if (mem == null) {
            throw loadError(Kind.MISSING_EXPORT, "no export \"memory\": a pctl module exports its linear memory as \"memory\" (spec/abi-v1.md §2)");
        }
        if (mem.kind() != WasmBinary.KIND_MEMORY) {
            throw loadError(Kind.BAD_SIGNATURE, "export \"memory\" is a " + WasmBinary.kindName(mem.kind()) + ", not a memory");
        }
        for (ExportSpec s : ABI_EXPORTS) {
            WasmBinary.Export e = bin.export(s.name());
            if (e == null) {
                if (s.required()) {
                    String hint = s.name().equals("pctl_abi_version") ? "; is this a pctl partitioner?" : "";
                    throw loadError(Kind.MISSING_EXPORT, String.format("no export \"%s\"; expected a function %s (spec/abi-v1.md §2)%s", s.name(), s.sig(), hint));
                }
                continue;
            }
            if (e.kind() != WasmBinary.KIND_FUNC) {
                throw loadError(Kind.BAD_SIGNATURE, String.format("export \"%s\" is a %s; want a function %s", s.name(), WasmBinary.kindName(e.kind()), s.sig()));
            }
            WasmBinary.FuncType t = bin.funcType(e.index());
            if (t == null) {
                throw loadError(Kind.INVALID_MODULE, String.format("export \"%s\" names function %d, which does not exist", s.name(), e.index()));
            }
            if (!t.sameAs(s.sig())) {
                throw loadError(Kind.BAD_SIGNATURE, String.format("export \"%s\" has signature %s; spec/abi-v1.md §2 requires %s", s.name(), t, s.sig()));
            }
            switch (s.name()) {
                case "_initialize":
                    hasInitialize = true;
                    break;
                case "pctl_configure":
                    hasConfigure = true;
                    break;
                case "pctl_metadata":
                    hasMetadata = true;
                    break;
                case "pctl_partition_batch":
                    hasBatch = true;
                    break;
                case "pctl_ancestry":
                    hasAncestry = true;
                    break;
                default:
            }
        }
    }

    private void scanOpcodes(WasmBinary bin) throws PluginException {
        FunctionBody[] bodies = module.codeSection().functionBodies();
        int n = bin.funcTypes.length;
        for (int i = 0; i < bodies.length; i++) {
            for (Instruction ins : bodies[i].instructions()) {
                if ((ins.opcode().opcode() & 0xff00) == 0xfd00) {
                    int fn = bin.importedFuncs + i;
                    throw loadError(Kind.UNSUPPORTED_FEATURE, String.format(
                            "function %d uses %s: this host does not implement fixed-width SIMD, which spec/abi-v1.md §7.1 allows "
                                    + "(Chicory %s executes no SIMD instruction without its simd module, which is not published); run the module on the Go host",
                            fn, ins.opcode().name().toLowerCase(java.util.Locale.ROOT), FileCache.chicoryVersion()));
                }
                if (FORBIDDEN_OPCODES.contains(ins.opcode())) {
                    // Bodies 0..n-1 are the original functions, the rest the rewriting's wrappers.
                    int fn = bin.importedFuncs + i;
                    throw loadError(Kind.UNSUPPORTED_FEATURE, String.format(
                            "function %d uses %s, which spec/abi-v1.md §7.1 does not allow (no threads, exceptions, tail calls, typed references or GC)",
                            fn, ins.opcode().name().toLowerCase(java.util.Locale.ROOT)));
                }
            }
        }
    }

    /**
     * Returns an instance prepared for the given config (lifecycle step 5 of §3 done): the probe
     * instance the first time, a fresh one afterwards. Config errors ({@link Kind#CONFIG_REJECTED},
     * {@link Kind#CONFIG_UNSUPPORTED}, {@link Kind#CONFIG_TOO_LARGE}) are refusals, atLoad set.
     */
    public PluginInstance open(byte[] config) throws PluginException {
        PluginInstance in;
        synchronized (this) {
            in = spare;
            spare = null;
        }
        if (in == null) {
            in = newInstance(false);
        }
        try {
            in.configure(config);
        } catch (PluginException e) {
            in.close();
            throw e;
        }
        return in;
    }

    // ---- what the module is ------------------------------------------------------------------

    /** The metadata name (§2.6), "unnamed" without {@code pctl_metadata}. */
    public String name() {
        return name;
    }

    /** The metadata version, "0.0.0" without {@code pctl_metadata}. */
    public String version() {
        return version;
    }

    /** The metadata properties (§2.6), possibly empty. */
    public List<String> properties() {
        return properties;
    }

    /** The hex SHA-256 of the module's bytes: its identity. */
    public String digest() {
        return digest;
    }

    /** What the module was loaded from (for messages). */
    public String source() {
        return source;
    }

    /** The ABI version the module declares (always {@link #ABI_VERSION} for a loaded module). */
    public int abiVersion() {
        return abiVersion;
    }

    /** True for the {@code wasi-deterministic} profile (§6.2), false for {@code portable}. */
    public boolean isWasiProfile() {
        return wasiProfile;
    }

    /** Whether the module exports {@code pctl_partition_batch}. */
    public boolean hasBatch() {
        return hasBatch;
    }

    /** Whether the module exports {@code pctl_configure}. */
    public boolean hasConfigure() {
        return hasConfigure;
    }

    /** Whether the module exports {@code pctl_ancestry}. */
    public boolean hasAncestry() {
        return hasAncestry;
    }

    /** The settings the module was loaded with (a copy). */
    public Options options() {
        return options.copy();
    }

    /** "plugin NAME (sha256:0123456789ab)": how messages name the module. */
    public String describe() {
        return "plugin " + name + " (sha256:" + shortDigest(digest) + ")";
    }

    /**
     * Called before every instruction that Chicory interprets (never for compiled code). Its
     * interpreter checks the interrupt flag at calls and {@code br} but not at {@code br_if} or
     * {@code br_table}, so without this a loop closed by either could not be stopped.
     */
    private static void checkInterrupt(Instruction ins, com.dylibso.chicory.runtime.MStack stack) {
        OpCode op = ins.opcode();
        if ((op == OpCode.BR_IF || op == OpCode.BR_TABLE) && Thread.currentThread().isInterrupted()) {
            throw new ChicoryInterruptedException("Thread interrupted");
        }
    }

    /** Lifecycle steps 1-4 (§3); with probe set, also reads and checks the metadata. */
    private PluginInstance newInstance(boolean probe) throws PluginException {
        PluginInstance in = new PluginInstance(this, new CappedMemory[1], probe ? source + " (sha256:" + shortDigest(digest) + ")" : describe());
        try {
            return prepare(in, probe);
        } catch (PluginException | RuntimeException | Error e) {
            in.close();
            throw e;
        }
    }

    private PluginInstance prepare(PluginInstance in, boolean probe) throws PluginException {
        Wasi wasi = new Wasi(options.wasiTime, options.wasiSeed);
        CappedMemory[] memory = in.memoryHolder();
        Instance.Builder b = Instance.builder(module)
                .withMachineFactory(machineFactory)
                .withUnsafeExecutionListener(Plugin::checkInterrupt)
                .withInitialize(false)
                .withStart(false) // no WASI "_start"; the start function is the export pctl.start
                .withMemoryFactory(lim -> {
                    memory[0] = new CappedMemory(lim, MAX_MEMORY_PAGES);
                    return memory[0];
                });
        if (wasiProfile) {
            List<HostFunction> fns = new ArrayList<>();
            for (HostFunction f : wasi.hostFunctions()) {
                if (wasiImports.contains(f.name())) {
                    fns.add(f);
                }
            }
            b.withImportValues(ImportValues.builder().withFunctions(new ArrayList<>(fns)).build());
        }
        Instance instance = guarded(in, "instantiate", options.initLimitNanos, b::build);
        in.attach(instance);
        mark("build");
        guarded(in, "instantiate", options.initLimitNanos, () -> instance.initialize(false));
        wasi.meter(instance.global(fuelGlobal)); // globals exist once the instance is initialised
        mark("instantiate");
        // The start function, moved to an export by the rewriting: it runs here, under its own
        // budget (2^33), so that a limit it hits is reported as that limit (spec/abi-v1.md §7).
        if (startMoved) {
            ExportFunction start = instance.export(Instrumenter.START_EXPORT);
            guarded(in, "start", options.initLimitNanos, () -> start.apply());
            mark("start");
        }
        if (hasInitialize) {
            ExportFunction init = instance.export("_initialize");
            guarded(in, "_initialize", options.initLimitNanos, () -> init.apply());
            mark("_initialize");
        }
        ExportFunction ver = instance.export("pctl_abi_version");
        int v = (int) guarded(in, "pctl_abi_version", options.callLimitNanos, () -> ver.apply())[0];
        if (probe) {
            abiVersion = v;
        }
        if (v != ABI_VERSION) {
            throw loadError(Kind.UNSUPPORTED_ABI, String.format(
                    "module declares ABI version %d; this host supports %d; upgrade pctl or rebuild the module against spec/abi-v1.md", v, ABI_VERSION));
        }
        if (probe) {
            readMetadata(in, instance);
        }
        ExportFunction kb = instance.export("pctl_key_buffer");
        long ptr = guarded(in, "pctl_key_buffer", options.callLimitNanos, () -> kb.apply(BUFFER_BYTES))[0] & 0xffffffffL;
        long memBytes = (long) in.memory().pages() * 65536;
        if (ptr == 0 || ptr + BUFFER_BYTES > memBytes) {
            throw loadError(Kind.BAD_BUFFER, String.format(
                    "pctl_key_buffer(%d) returned %d; memory is %d bytes; the module must return a non-zero address of a region of that size inside memory (spec/abi-v1.md §2.2)",
                    BUFFER_BYTES, ptr, memBytes));
        }
        in.setBuffer((int) ptr);
        mark("abi, metadata, buffer");
        return in;
    }

    private void readMetadata(PluginInstance in, Instance instance) throws PluginException {
        name = "unnamed";
        version = "0.0.0";
        properties = List.of();
        if (hasMetadata) {
            ExportFunction md = instance.export("pctl_metadata");
            long r = guarded(in, "pctl_metadata", options.callLimitNanos, () -> md.apply())[0];
            long ptr = r >>> 32;
            long len = r & 0xffffffffL;
            if (len > MAX_METADATA) {
                throw loadError(Kind.BAD_METADATA, String.format("pctl_metadata returned %d bytes; the limit is %d", len, MAX_METADATA));
            }
            long memBytes = (long) in.memory().pages() * 65536;
            if (ptr + len > memBytes) {
                throw loadError(Kind.BAD_METADATA, String.format("pctl_metadata points at [%d, %d), outside memory (%d bytes)", ptr, ptr + len, memBytes));
            }
            byte[] doc = in.memory().readBytes((int) ptr, (int) len);
            parseMetadata(doc);
        }
        in.describe(describe());
        if (properties.contains("ancestry") && !hasAncestry) {
            throw loadError(Kind.BAD_METADATA, "metadata declares the \"ancestry\" property but the module does not export pctl_ancestry");
        }
    }

    /**
     * Reads the metadata document by the rules of spec/abi-v1.md §2.6, which every host applies
     * alike: strict UTF-8 without a byte-order mark, one RFC 8259 JSON object nested at most
     * {@link #MAX_METADATA_DEPTH} deep, keys matched exactly (a repeated key counts with its last
     * value), null as absent, and the types of the four known keys.
     */
    private void parseMetadata(byte[] doc) throws PluginException {
        String prefix = String.format("pctl_metadata returned %d bytes that are not a JSON object: ", doc.length);
        if (!Config.validUtf8(doc)) {
            throw loadError(Kind.BAD_METADATA, prefix + "not valid UTF-8 (spec/abi-v1.md §2.6)");
        }
        if (doc.length >= 3 && (doc[0] & 0xff) == 0xef && (doc[1] & 0xff) == 0xbb && (doc[2] & 0xff) == 0xbf) {
            throw loadError(Kind.BAD_METADATA, prefix + "it starts with a byte-order mark (spec/abi-v1.md §2.6)");
        }
        int depth = jsonDepth(doc);
        if (depth > MAX_METADATA_DEPTH) {
            throw loadError(Kind.BAD_METADATA, prefix + String.format("arrays and objects nest %d deep; at most %d are allowed (spec/abi-v1.md §2.6)", depth, MAX_METADATA_DEPTH));
        }
        Object v;
        try {
            v = Json.parse(new String(doc, StandardCharsets.UTF_8));
        } catch (Json.JsonException e) {
            throw loadError(Kind.BAD_METADATA, prefix + e.getMessage());
        }
        if (!(v instanceof Map)) {
            throw loadError(Kind.BAD_METADATA, prefix + "not an object");
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> obj = (Map<String, Object>) v;
        String n = stringField("name", obj.get("name"), "");
        String ver = stringField("version", obj.get("version"), "");
        stringField("description", obj.get("description"), "");
        List<String> props = new ArrayList<>();
        Object pv = obj.get("properties");
        if (pv != null) {
            if (!(pv instanceof List)) {
                throw loadError(Kind.BAD_METADATA, "metadata \"properties\" must be a list of strings (spec/abi-v1.md §2.6)");
            }
            for (Object p : (List<?>) pv) {
                if (!(p instanceof String)) {
                    throw loadError(Kind.BAD_METADATA, "metadata \"properties\" must be a list of strings (spec/abi-v1.md §2.6)");
                }
                props.add((String) p);
            }
        }
        if (!NAME.matcher(n).matches()) {
            throw loadError(Kind.BAD_METADATA, String.format("metadata name \"%s\" must match [a-z0-9][a-z0-9-]{0,62} (spec/abi-v1.md §2.6)", n));
        }
        if (ver.isEmpty()) {
            throw loadError(Kind.BAD_METADATA, "metadata has no \"version\" (spec/abi-v1.md §2.6)");
        }
        name = n;
        version = ver;
        properties = Collections.unmodifiableList(props);
    }

    /** How deep arrays and objects nest in b, read as JSON (brackets inside strings do not count). */
    static int jsonDepth(byte[] b) {
        int depth = 0;
        int max = 0;
        boolean inString = false;
        boolean escaped = false;
        for (byte x : b) {
            int c = x & 0xff;
            if (inString) {
                if (escaped) {
                    escaped = false;
                } else if (c == '\\') {
                    escaped = true;
                } else if (c == '"') {
                    inString = false;
                }
            } else if (c == '"') {
                inString = true;
            } else if (c == '{' || c == '[') {
                max = Math.max(max, ++depth);
            } else if (c == '}' || c == ']') {
                depth--;
            }
        }
        return max;
    }

    private String stringField(String field, Object val, String current) throws PluginException {
        if (val == null) {
            return current;
        }
        if (!(val instanceof String)) {
            throw loadError(Kind.BAD_METADATA, "metadata \"" + field + "\" must be a string (spec/abi-v1.md §2.6)");
        }
        return (String) val;
    }

    // ---- calls -----------------------------------------------------------------------------

    /**
     * Runs one crossing under the time limit and turns any failure into a {@link PluginException}
     * of the right kind; marks the instance broken on failure.
     */
    <T> T guarded(PluginInstance in, String op, long limitNanos, Callable<T> body) throws PluginException {
        Watchdog.Slot slot = in.slot();
        slot.begin(limitNanos);
        T result = null;
        Throwable failure = null;
        try {
            result = body.call();
        } catch (Throwable t) {
            failure = t;
        }
        boolean fired = slot.end();
        if (failure == null) {
            return result;
        }
        in.broken = true;
        throw classify(in, op, failure, fired, limitNanos);
    }

    private PluginException classify(PluginInstance in, String op, Throwable t, boolean fired, long limitNanos) {
        Wasi.ProcExit exit = find(t, Wasi.ProcExit.class);
        if (exit != null) {
            String code = Integer.toUnsignedString(exit.code);
            return PluginException.call(Kind.EXIT, name, digest, op, "plugin exited with code " + code,
                    "proc_exit(" + code + "); a partitioner must return, not exit");
        }
        if (in.fuel() < 0) {
            return PluginException.call(Kind.TIME_LIMIT, name, digest, op, null, String.format(
                    "used its whole work budget of %d units (spec/abi-v1.md §7.2, about %ds of work): it loops forever, does unbounded work or is far too slow for a partitioner",
                    op.equals("start") || op.equals("_initialize") ? 4 * FUEL : FUEL, op.equals("start") || op.equals("_initialize") ? 4 : 1));
        }
        if (fired) {
            return PluginException.call(Kind.TIME_LIMIT, name, digest, op, null, String.format(
                    "ran for more than %s of wall-clock time, this host's last-resort limit (spec/abi-v1.md §7): it loops forever or is far too slow for a partitioner",
                    seconds(limitNanos)));
        }
        if (find(t, ChicoryInterruptedException.class) != null) {
            return PluginException.call(Kind.INTERRUPTED, name, digest, op, null,
                    "the calling thread was interrupted while the module ran; the call was abandoned (no partition)");
        }
        if (in.depth() > MAX_CALL_DEPTH) {
            return PluginException.call(Kind.CALL_DEPTH, name, digest, op, null, String.format(
                    "nested more than %d calls (unbounded recursion?)", MAX_CALL_DEPTH));
        }
        if (find(t, StackOverflowError.class) != null || messageHas(t, "call stack exhausted")) {
            return PluginException.engineStack(name, digest, op, String.format(
                    "the JVM stack of thread \"%s\" ran out at %d nested calls (the limit is %d); run calls on a thread with a larger stack (-Xss, or Thread's stackSize)",
                    Thread.currentThread().getName(), in.depth(), MAX_CALL_DEPTH));
        }
        CappedMemory mem = in.memory();
        if (mem != null && (mem.growRefused() || in.memFail() != 0 || mem.pages() >= MAX_MEMORY_PAGES)) {
            return PluginException.call(Kind.MEMORY_LIMIT, name, digest, op, null, String.format(
                    "trapped after memory.grow was refused at %d of at most %d pages (%d MiB): %s",
                    mem.pages(), MAX_MEMORY_PAGES, MAX_MEMORY_PAGES / 16, firstLine(t)));
        }
        return PluginException.call(Kind.TRAP, name, digest, op, null, firstLine(t));
    }

    private static String seconds(long nanos) {
        if (nanos % 1_000_000_000L == 0) {
            return (nanos / 1_000_000_000L) + " s";
        }
        return (nanos / 1_000_000L) + " ms";
    }

    private static <E extends Throwable> E find(Throwable t, Class<E> c) {
        for (int i = 0; t != null && i < 20; t = t.getCause(), i++) {
            if (c.isInstance(t)) {
                return c.cast(t);
            }
        }
        return null;
    }

    private static boolean messageHas(Throwable t, String s) {
        for (int i = 0; t != null && i < 20; t = t.getCause(), i++) {
            if (t.getMessage() != null && t.getMessage().contains(s)) {
                return true;
            }
        }
        return false;
    }

    static String firstLine(Throwable t) {
        String s = t.getMessage();
        if (s == null || s.isEmpty()) {
            s = t.getClass().getSimpleName();
        }
        int nl = s.indexOf('\n');
        return nl >= 0 ? s.substring(0, nl) : s;
    }

    /** The depth counter of an instance, for classification (read as unsigned). */
    long depthOf(Instance instance) {
        if (instance == null) {
            return 0;
        }
        return instance.global(depthGlobal).getValue() & 0xffffffffL;
    }

    /** The fuel left in an instance (spec/abi-v1.md §7.2): negative after the budget ran out. */
    long fuelOf(Instance instance) {
        if (instance == null) {
            return 0;
        }
        return instance.global(fuelGlobal).getValue();
    }

    /** The memory.grow refusal flag of an instance. */
    long memFailOf(Instance instance) {
        if (instance == null) {
            return 0;
        }
        return instance.global(memFailGlobal).getValue();
    }



    /** A result code's name (§5), or "unknown error code r". */
    public static String codeName(int code) {
        switch (code) {
            case CODE_INVALID:
                return "PCTL_E_INVALID";
            case CODE_CONFIG:
                return "PCTL_E_CONFIG";
            case CODE_UNSUPPORTED:
                return "PCTL_E_UNSUPPORTED";
            case CODE_BUFFER:
                return "PCTL_E_BUFFER";
            case CODE_INTERNAL:
                return "PCTL_E_INTERNAL";
            default:
                return "unknown error code " + code;
        }
    }
}
