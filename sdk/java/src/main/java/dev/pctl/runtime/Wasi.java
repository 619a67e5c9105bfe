package dev.pctl.runtime;

import com.dylibso.chicory.runtime.GlobalInstance;
import com.dylibso.chicory.runtime.HostFunction;
import com.dylibso.chicory.runtime.Memory;
import com.dylibso.chicory.wasm.types.FunctionType;
import com.dylibso.chicory.wasm.types.ValType;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The deterministic WASI of the wasi-deterministic import profile (spec/abi-v1.md §6.2): the ten
 * functions of {@code wasi_snapshot_preview1} that the profile allows, with no files, no
 * environment, no arguments, a fixed clock and a fixed random stream.
 *
 * <p>One object per instance: it owns that instance's position in the random stream, which
 * starts when the instance is created and continues across calls. Every function checks every
 * pointer argument before it writes anything: a range outside memory gives errno 21 (fault) and
 * leaves memory unchanged. Not thread-safe (an instance is used by one thread at a time).
 */
final class Wasi {
    static final String MODULE = "wasi_snapshot_preview1";
    /** PCTL_WASI_TIME: 2024-01-01T00:00:00Z in nanoseconds, what every clock reads. */
    static final long TIME = 1704067200000000000L;

    static final int ERRNO_SUCCESS = 0;
    static final int ERRNO_BADF = 8;
    static final int ERRNO_FAULT = 21;
    static final int ERRNO_INVAL = 28;

    private static final byte I32 = WasmBinary.I32;
    private static final byte I64 = WasmBinary.I64;

    /** The profile: name to exact signature. */
    static final Map<String, WasmBinary.FuncType> SIGNATURES;

    static {
        Map<String, WasmBinary.FuncType> m = new TreeMap<>();
        m.put("args_sizes_get", sig(new byte[] {I32, I32}, I32));
        m.put("args_get", sig(new byte[] {I32, I32}, I32));
        m.put("environ_sizes_get", sig(new byte[] {I32, I32}, I32));
        m.put("environ_get", sig(new byte[] {I32, I32}, I32));
        m.put("clock_time_get", sig(new byte[] {I32, I64, I32}, I32));
        m.put("random_get", sig(new byte[] {I32, I32}, I32));
        m.put("fd_write", sig(new byte[] {I32, I32, I32, I32}, I32));
        m.put("poll_oneoff", sig(new byte[] {I32, I32, I32, I32}, I32));
        m.put("sched_yield", sig(new byte[] {}, I32));
        m.put("proc_exit", WasmBinary.FuncType.of(new byte[] {I32}, new byte[] {}));
        SIGNATURES = Collections.unmodifiableMap(m);
    }

    private static WasmBinary.FuncType sig(byte[] params, byte result) {
        return WasmBinary.FuncType.of(params, new byte[] {result});
    }

    /** Thrown by proc_exit: it ends the current call; the host reports the code and discards the instance. */
    static final class ProcExit extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final int code;

        ProcExit(int code) {
            super("proc_exit(" + Integer.toUnsignedString(code) + ")", null, false, false);
            this.code = code;
        }
    }

    /**
     * Thrown by a WASI function whose charge the crossing's budget cannot pay (spec/abi-v1.md
     * §7.2, rule 4); the instance's fuel is then negative and the host reports a time limit.
     */
    static final class FuelExhausted extends RuntimeException {
        private static final long serialVersionUID = 1L;

        FuelExhausted() {
            super("work budget exhausted in a WASI call", null, false, false);
        }
    }

    /** {@code PCTL_WASI_CALL_FUEL} and the charge per byte a call may touch (§7.2, rule 4). */
    static final long CALL_FUEL = 16384;
    static final long BYTE_FUEL = 64;

    private final long time;
    private final RandomStream random;
    private GlobalInstance fuel; // the instance's work budget, once it exists

    /** Charges every later call to this global, the instance's fuel (its export pctl.fuel). */
    void meter(GlobalInstance fuel) {
        this.fuel = fuel;
    }

    /** What one call may touch, in bytes, from its arguments (read as unsigned). */
    static long bytesOf(String name, long[] a) {
        switch (name) {
            case "args_sizes_get":
            case "environ_sizes_get":
            case "clock_time_get":
                return 8;
            case "random_get":
                return a[1] & 0xffffffffL;
            case "fd_write":
                return 8 * (a[2] & 0xffffffffL) + 4;
            case "poll_oneoff":
                return 80 * (a[2] & 0xffffffffL) + 4;
            default:
                return 0;
        }
    }

    /** Takes the call's cost from the budget first, before the call checks or touches anything. */
    private void charge(String name, long[] args) {
        GlobalInstance f = fuel;
        if (f == null) {
            return;
        }
        long left = f.getValue() - (CALL_FUEL + BYTE_FUEL * bytesOf(name, args));
        f.setValue(left);
        if (left < 0) {
            throw new FuelExhausted();
        }
    }

    /** The spec's WASI: clock {@link #TIME}, random stream from SplitMix64 state 0. */
    Wasi() {
        this(TIME, 0);
    }

    /** Another clock and seed, as conformance uses to prove a module ignores them. */
    Wasi(long time, long seed) {
        this.time = time;
        this.random = new RandomStream(seed);
    }

    /** Host functions for Chicory, bound to this object's state. */
    List<HostFunction> hostFunctions() {
        List<HostFunction> out = new ArrayList<>();
        out.add(host("args_sizes_get", (mem, a) -> zeroSizes(mem, a[0], a[1])));
        out.add(host("args_get", (mem, a) -> ERRNO_SUCCESS));
        out.add(host("environ_sizes_get", (mem, a) -> zeroSizes(mem, a[0], a[1])));
        out.add(host("environ_get", (mem, a) -> ERRNO_SUCCESS));
        out.add(host("clock_time_get", (mem, a) -> clockTimeGet(mem, a[0], a[1], a[2])));
        out.add(host("random_get", (mem, a) -> randomGet(mem, a[0], a[1])));
        out.add(host("fd_write", (mem, a) -> fdWrite(mem, a[0], a[1], a[2], a[3])));
        out.add(host("poll_oneoff", (mem, a) -> pollOneoff(mem, a[0], a[1], a[2], a[3])));
        out.add(host("sched_yield", (mem, a) -> ERRNO_SUCCESS));
        out.add(new HostFunction(MODULE, "proc_exit", chicoryType(SIGNATURES.get("proc_exit")), (inst, a) -> {
            charge("proc_exit", a);
            throw new ProcExit((int) a[0]);
        }));
        return out;
    }

    @FunctionalInterface
    private interface Fn {
        int apply(Memory mem, long[] args);
    }

    private HostFunction host(String name, Fn fn) {
        return new HostFunction(MODULE, name, chicoryType(SIGNATURES.get(name)), (inst, args) -> {
            charge(name, args);
            return new long[] {fn.apply(inst.memory(), args)};
        });
    }

    static FunctionType chicoryType(WasmBinary.FuncType t) {
        return FunctionType.of(valTypes(t.params()), valTypes(t.results()));
    }

    private static ValType[] valTypes(byte[] ts) {
        ValType[] out = new ValType[ts.length];
        for (int i = 0; i < ts.length; i++) {
            out[i] = ts[i] == I64 ? ValType.I64 : ValType.I32;
        }
        return out;
    }

    // ---- the functions, on any Chicory memory (package-private for tests) -----------------

    /** Whether [ptr, ptr+len) lies inside memory; ptr is an i32 taken as unsigned. */
    static boolean inside(Memory mem, long ptr, long len) {
        long p = ptr & 0xffffffffL;
        return len >= 0 && p + len <= (long) mem.pages() * Memory.PAGE_SIZE;
    }

    static int zeroSizes(Memory mem, long countPtr, long sizePtr) {
        if (!inside(mem, countPtr, 4) || !inside(mem, sizePtr, 4)) {
            return ERRNO_FAULT;
        }
        mem.writeI32((int) countPtr, 0);
        mem.writeI32((int) sizePtr, 0);
        return ERRNO_SUCCESS;
    }

    int clockTimeGet(Memory mem, long id, long precision, long timePtr) {
        if ((id & 0xffffffffL) > 3) {
            return ERRNO_INVAL;
        }
        if (!inside(mem, timePtr, 8)) {
            return ERRNO_FAULT;
        }
        mem.writeLong((int) timePtr, time);
        return ERRNO_SUCCESS;
    }

    int randomGet(Memory mem, long buf, long len) {
        long n = len & 0xffffffffL;
        if (!inside(mem, buf, n)) {
            return ERRNO_FAULT;
        }
        byte[] b = new byte[(int) n];
        random.read(b, 0, b.length);
        mem.write((int) buf, b, 0, b.length);
        return ERRNO_SUCCESS;
    }

    static int fdWrite(Memory mem, long fd, long iovs, long iovsLen, long nwrittenPtr) {
        int f = (int) fd;
        if (f != 1 && f != 2) {
            return ERRNO_BADF;
        }
        long n = iovsLen & 0xffffffffL;
        if (!inside(mem, iovs, n * 8) || !inside(mem, nwrittenPtr, 4)) {
            return ERRNO_FAULT;
        }
        int total = 0; // u32, wrapping, as the Go host sums it
        for (long i = 0; i < n; i++) {
            total += mem.readInt((int) (iovs + i * 8 + 4));
        }
        mem.writeI32((int) nwrittenPtr, total);
        return ERRNO_SUCCESS;
    }

    /**
     * Every subscription completes at once. Subscription i (48 bytes at in + 48i: userdata u64
     * at +0, tag u8 at +8) gives event i (32 bytes at out + 32i, zero-filled; userdata at +0;
     * error u16 at +8: 0 for a clock (tag 0), 8 (badf) otherwise; type u8 at +10: the tag). Each
     * subscription is read just before its event is written, so overlapping in and out behave as
     * in the Go host.
     */
    static int pollOneoff(Memory mem, long in, long out, long nsubs, long neventsPtr) {
        long n = nsubs & 0xffffffffL;
        if (n == 0) {
            return ERRNO_INVAL;
        }
        if (!inside(mem, in, n * 48) || !inside(mem, out, n * 32) || !inside(mem, neventsPtr, 4)) {
            return ERRNO_FAULT;
        }
        byte[] event = new byte[32];
        for (long i = 0; i < n; i++) {
            int s = (int) (in + 48 * i);
            long userdata = mem.readLong(s);
            int tag = mem.read(s + 8) & 0xff;
            java.util.Arrays.fill(event, (byte) 0);
            for (int k = 0; k < 8; k++) {
                event[k] = (byte) (userdata >>> (8 * k));
            }
            if (tag != 0) {
                event[8] = ERRNO_BADF;
            }
            event[10] = (byte) tag;
            mem.write((int) (out + 32 * i), event, 0, 32);
        }
        mem.writeI32((int) neventsPtr, (int) n);
        return ERRNO_SUCCESS;
    }
}
