package dev.pctl.host;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.runtime.Plugin;
import dev.pctl.runtime.PluginException;
import dev.pctl.runtime.PluginInstance;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Every module of runtime/testdata/hostile (README.md there says what a host must do with each)
 * and the feature modules of src/test/resources/wasm, through the host command: the exit status,
 * the partitions printed before a failure, and the words the error must contain (the plugin's
 * name and the kind of failure).
 */
class HostileTest {
    private record Tc(String name, String file, String[] extraArgs, String stdin, int status, String stdout, String... stderrHas) {}

    private static String[] args(String... a) {
        return a;
    }

    private static final String[] NONE = {};
    private static final String KEYS = "\n61\nff01\n6162\n"; // lengths 0, 1, 2, 2; the third starts with 0xff

    private static String hostile(String f) {
        return TestSupport.repo("runtime/testdata/hostile/" + f).toString();
    }

    private static List<Tc> cases() {
        List<Tc> t = new ArrayList<>();
        t.add(new Tc("loop-forever: time limit", hostile("loop-forever.wasm"), NONE, KEYS, 1, "", "plugin loop-forever", "time limit exceeded", "line 1"));
        t.add(new Tc("exponential: time limit without loops", hostile("exponential.wasm"), NONE, KEYS, 1, "", "plugin exponential", "time limit exceeded"));
        for (String f : List.of("loop-br-if", "loop-br-table")) {
            t.add(new Tc(f + ": time limit (the interpreter needs the host's check)", TestSupport.resource(f + ".wasm").toString(), NONE, KEYS, 1, "", "plugin " + f, "time limit exceeded"));
        }
        t.add(new Tc("memory-grow: memory limit, not a bare trap", hostile("memory-grow.wasm"), NONE, KEYS, 1, "", "plugin memory-grow", "memory limit exceeded"));
        t.add(new Tc("memory-initial: refused at load", hostile("memory-initial.wasm"), NONE, KEYS, 2, "", "memory limit exceeded", "513"));
        t.add(new Tc("recurse: call depth", hostile("recurse.wasm"), NONE, KEYS, 1, "", "plugin recurse", "call stack exhausted"));
        t.add(new Tc("trap-some-keys: the keys before the trap, then the trap", hostile("trap-some-keys.wasm"), NONE, KEYS, 1, "0\n1\n", "plugin trap-some-keys", "plugin trapped", "line 3"));
        t.add(new Tc("trap-some-keys: other keys fine", hostile("trap-some-keys.wasm"), NONE, "\n61\n6162\n", 0, "0\n1\n2\n"));
        t.add(new Tc("out-of-range", hostile("out-of-range.wasm"), NONE, KEYS, 1, "0\n", "plugin out-of-range", "out of range", "returned 10 for n=10", "line 2"));
        t.add(new Tc("forbidden-import", hostile("forbidden-import.wasm"), NONE, KEYS, 2, "", "forbidden import", "env.now"));
        t.add(new Tc("forbidden-wasi-import", hostile("forbidden-wasi-import.wasm"), NONE, KEYS, 2, "", "forbidden import", "wasi_snapshot_preview1.fd_read"));
        t.add(new Tc("wasi-wrong-signature", hostile("wasi-wrong-signature.wasm"), NONE, KEYS, 2, "", "forbidden import", "wasi_snapshot_preview1.random_get", "(i32) -> (i32)", "(i32, i32) -> (i32)"));
        t.add(new Tc("missing-export", hostile("missing-export.wasm"), NONE, KEYS, 2, "", "missing export", "pctl_partition", "(i32, i32) -> (i32)"));
        t.add(new Tc("bad-signature", hostile("bad-signature.wasm"), NONE, KEYS, 2, "", "pctl_partition", "(i32) -> (i32)", "(i32, i32) -> (i32)"));
        t.add(new Tc("abi-v2", hostile("abi-v2.wasm"), NONE, KEYS, 2, "", "module declares ABI version 2; this host supports 1; upgrade pctl"));
        t.add(new Tc("proc-exit", hostile("proc-exit.wasm"), NONE, KEYS, 1, "", "plugin proc-exit", "plugin exited with code 3"));
        t.add(new Tc("config-echo: config bytes exactly", hostile("config-echo.wasm"), args("--config", "a=1"), "\n", 0, "4\n"));
        t.add(new Tc("config-echo: --config-hex, rejected", hostile("config-echo.wasm"), args("--config-hex", "21"), "\n", 2, "", "plugin config-echo", "rejected its configuration"));
        t.add(new Tc("config-echo: --config-hex, raw bytes", hostile("config-echo.wasm"), args("--config-hex", "00ff0a"), "\n", 0, "3\n"));
        t.add(new Tc("config-echo: --config-hex, empty", hostile("config-echo.wasm"), args("--config-hex", ""), "\n", 0, "0\n"));
        t.add(new Tc("config-echo: no config", hostile("config-echo.wasm"), NONE, "\n61\n", 0, "0\n1\n"));
        t.add(new Tc("config for a module without pctl_configure", TestSupport.repo("plugins/builtin/jump.wasm").toString(), args("--config", "a=1"), "\n", 2, "", "plugin jump", "takes no configuration"));
        t.add(new Tc("oversize: refused before compiling", hostile("oversize.wasm"), NONE, KEYS, 2, "", "module too large"));
        t.add(new Tc("not-wasm", hostile("not-wasm.wasm"), NONE, KEYS, 2, "", "not a WebAssembly module"));
        t.add(new Tc("truncated", hostile("truncated.wasm"), NONE, KEYS, 2, "", "invalid WebAssembly module"));
        for (String f : List.of("feature-tail-call", "feature-shared-memory", "feature-atomics", "feature-exceptions", "feature-memory64")) {
            t.add(new Tc(f, TestSupport.resource(f + ".wasm").toString(), NONE, KEYS, 2, "", "unsupported WebAssembly feature"));
        }
        t.add(new Tc("reserved export name, as the Go host", TestSupport.resource("reserved-export.wasm").toString(), NONE, KEYS, 2, "", "invalid WebAssembly module", "pctl.depth"));
        t.add(new Tc("simd: refused at load by this host (see README)", TestSupport.resource("simd.wasm").toString(), NONE, KEYS, 2, "", "unsupported WebAssembly feature", "SIMD"));
        t.add(new Tc("depth: 1000 frames succeed", TestSupport.resource("depth.wasm").toString(), NONE, "ab".repeat(998) + "\n", 0, "998\n"));
        t.add(new Tc("depth: 1001 frames fail", TestSupport.resource("depth.wasm").toString(), NONE, "ab".repeat(997) + "\n" + "ab".repeat(999) + "\n", 1, "997\n", "plugin depth", "call stack exhausted", "line 2"));
        return t;
    }

    private static final long FAST_LIMIT = 300_000_000L;

    private static Plugin.Options fast() {
        Plugin.Options o = new Plugin.Options();
        o.callLimitNanos = FAST_LIMIT; // the limit is 1 s; a shorter one keeps the test quick
        return o;
    }

    private static void runAll(Plugin.Options o, String mode) throws Exception {
        for (Tc tc : cases()) {
            // The short net only where a time limit is the expected outcome: a case that must end
            // with another error (memory-grow copies 32 MiB in 1 MiB steps) may take longer than
            // 300 ms on a loaded machine, and must not be cut short by the net.
            o.callLimitNanos = List.of(tc.stderrHas()).contains("time limit exceeded") ? FAST_LIMIT : 30_000_000_000L;
            List<String> a = new ArrayList<>(List.of("run", "--wasm", tc.file(), "--partitions", "10"));
            if (tc.name().startsWith("depth")) {
                a.set(4, "100000");
            }
            a.addAll(List.of(tc.extraArgs()));
            TestSupport.Result r = TestSupport.run(o, tc.stdin(), a.toArray(new String[0]));
            String what = tc.name() + " (" + mode + "): stderr " + r.stderr();
            assertEquals(tc.status(), r.status(), what);
            assertEquals(tc.stdout(), r.stdout(), what);
            for (String s : tc.stderrHas()) {
                assertTrue(r.stderr().contains(s), what + " must contain \"" + s + "\"");
            }
            if (tc.status() != 0) {
                assertEquals(1, r.stderr().split("\n").length, what + ": one line of error");
            }
        }
    }

    @Test
    void compilerBatch() throws Exception {
        runAll(fast(), "compiler, batch");
    }

    @Test
    void compilerSingle() throws Exception {
        Plugin.Options o = fast();
        o.useBatch = false;
        runAll(o, "compiler, single calls");
    }

    @Test
    void interpreter() throws Exception {
        Plugin.Options o = fast();
        o.compile = false;
        runAll(o, "interpreter");
    }

    @Test
    void randClockSeesTheClockAndTheStream() throws Exception {
        // (key_len + clock/2 + random_u64/2) % n, with the stream advancing 8 bytes per call.
        // The stream is SplitMix64 from state 0 (spec/abi-v1.md §6.2), the clock PCTL_WASI_TIME.
        long state = 0;
        long time = 1704067200000000000L;
        StringBuilder want = new StringBuilder();
        String[] keys = {"", "61", "6162", "", "616263"};
        long n = 1000003;
        for (String k : keys) {
            state += 0x9E3779B97F4A7C15L;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            long sum = k.length() / 2 + (time >>> 1) + ((z ^ (z >>> 31)) >>> 1);
            want.append(Long.remainderUnsigned(sum, n)).append('\n');
        }
        for (boolean batch : new boolean[] {true, false}) {
            Plugin.Options o = new Plugin.Options();
            o.useBatch = batch;
            TestSupport.Result r = TestSupport.run(o, String.join("\n", keys) + "\n", "run", "--wasm", hostile("rand-clock.wasm"), "--partitions", Long.toString(n));
            assertEquals(0, r.status(), r.stderr());
            assertEquals(want.toString(), r.stdout(), "the clock is PCTL_WASI_TIME and random_get continues one stream per instance");
        }
    }

    @Test
    void configRejectedIsARefusal() throws Exception {
        Plugin p = Plugin.load(TestSupport.read(TestSupport.repo("runtime/testdata/hostile/config-echo.wasm")), "config-echo.wasm", new Plugin.Options());
        PluginException e = assertThrows(PluginException.class, () -> p.open("!".getBytes(StandardCharsets.UTF_8)));
        assertEquals(PluginException.Kind.CONFIG_REJECTED, e.kind());
        assertEquals(2, e.exitStatus());
        assertTrue(e.getMessage().contains("plugin config-echo") && e.getMessage().contains("plugin rejected its configuration"), e.getMessage());
        PluginInstance ok = p.open("a=1\n".getBytes(StandardCharsets.UTF_8));
        assertEquals(4, ok.partition(new byte[0], 0, 0, 10), "a fresh instance after the refusal");
    }

    @Test
    void badInputIsUsage() throws Exception {
        String wasm = TestSupport.repo("plugins/builtin/kafka-murmur2.wasm").toString();
        record U(String name, String stdin, String[] args, String has) {}
        List<U> us = List.of(
                new U("not hex", "zz\n", args("run", "--wasm", wasm, "--partitions", "3"), "line 1"),
                new U("odd hex", "00\n0\n", args("run", "--wasm", wasm, "--partitions", "3"), "line 2"),
                new U("key too long", "00".repeat(65537) + "\n", args("run", "--wasm", wasm, "--partitions", "3"), "key too long"),
                new U("without the command name", "zz\n", args("--wasm", wasm, "--partitions", "3"), "line 1"),
                new U("n = 0", "", args("run", "--wasm", wasm, "--partitions", "0"), "invalid partition count"),
                new U("n too large", "", args("run", "--wasm", wasm, "--partitions", "2147483648"), "--partitions"),
                new U("n not a number", "", args("run", "--wasm", wasm, "--partitions", "x"), "--partitions"),
                new U("no --wasm", "", args("run", "--partitions", "3"), "--wasm"),
                new U("missing file", "", args("run", "--wasm", "/nonexistent.wasm", "--partitions", "3"), "no such file"),
                new U("bad config", "", args("run", "--wasm", wasm, "--partitions", "3", "--config", "a"), "bad partitioner config"),
                new U("unknown flag", "", args("run", "--wasm", wasm, "--partitions", "3", "--hex"), "unknown flag"),
                new U("unexpected argument", "", args("run", "partition"), "unexpected argument"),
                new U("--config-hex with --config", "", args("run", "--wasm", wasm, "--partitions", "3", "--config", "a=1", "--config-hex", "00"), "cannot be combined"),
                new U("--config-hex not hex", "", args("run", "--wasm", wasm, "--partitions", "3", "--config-hex", "0g"), "not hex"));
        for (U u : us) {
            TestSupport.Result r = TestSupport.run(new Plugin.Options(), u.stdin(), u.args());
            assertEquals(2, r.status(), u.name() + ": " + r.stderr());
            assertTrue(r.stderr().contains(u.has()), u.name() + ": " + r.stderr());
        }
    }

    @Test
    void inputEdges() throws Exception {
        String wasm = TestSupport.repo("plugins/builtin/kafka-murmur2.wasm").toString();
        record E(String name, String stdin, String stdout, boolean linesEqual) {
            E(String name, String stdin, String stdout) {
                this(name, stdin, stdout, false);
            }
        }
        // kafka-murmur2, n = 8: the empty key is in 1, "21" (3231) in 4 (spec/vectors/kafka-murmur2.json)
        List<E> es = List.of(
                new E("no input, no output", "", ""),
                new E("one empty line is one empty key", "\n", "1\n"),
                new E("last line without a newline", "3231", "4\n"),
                new E("empty keys around", "\n3231\n\n", "1\n4\n1\n"),
                new E("CRLF line ends", "\r\n3231\r\n", "1\n4\n"),
                new E("hex digits of either case", "3a3A\n3A3a\n", "", true));
        for (E e : es) {
            TestSupport.Result r = TestSupport.run(new Plugin.Options(), e.stdin(), "run", "--wasm", wasm, "--partitions", "8");
            assertEquals(0, r.status(), e.name() + ": " + r.stderr());
            if (e.linesEqual()) {
                assertEquals(2, r.lines().size(), e.name());
                assertEquals(r.lines().get(0), r.lines().get(1), e.name());
            } else {
                assertEquals(e.stdout(), r.stdout(), e.name());
            }
        }
        // --flag=value and hex-encoded arguments (what ./run passes)
        TestSupport.Result r = TestSupport.run(new Plugin.Options(), "\n", "--hex-args", Hex.encode("run".getBytes(StandardCharsets.UTF_8)),
                Hex.encode(("--wasm=" + wasm).getBytes(StandardCharsets.UTF_8)), Hex.encode("--partitions=8".getBytes(StandardCharsets.UTF_8)));
        assertEquals("1\n", r.stdout(), r.stderr());
    }

    @Test
    void manyKeysCrossBatchBoundaries() throws Exception {
        // 10000 keys of 0..299 bytes: several batches, split by count (4096) and by bytes (1 MiB).
        java.util.Random rnd = new java.util.Random(7);
        StringBuilder in = new StringBuilder();
        List<byte[]> keys = new ArrayList<>();
        for (int i = 0; i < 10000; i++) {
            byte[] k = new byte[rnd.nextInt(300)];
            rnd.nextBytes(k);
            keys.add(k);
            in.append(Hex.encode(k)).append('\n');
        }
        for (int i = 0; i < 20; i++) { // long keys force byte-bound batches
            byte[] k = new byte[65536];
            rnd.nextBytes(k);
            keys.add(k);
            in.append(Hex.encode(k)).append('\n');
        }
        String wasm = TestSupport.repo("plugins/builtin/kafka-murmur2.wasm").toString();
        TestSupport.Result batch = TestSupport.run(new Plugin.Options(), in.toString(), "run", "--wasm", wasm, "--partitions", "1000");
        Plugin.Options single = new Plugin.Options();
        single.useBatch = false;
        TestSupport.Result singles = TestSupport.run(single, in.toString(), "run", "--wasm", wasm, "--partitions", "1000");
        assertEquals(0, batch.status(), batch.stderr());
        assertEquals(batch.stdout(), singles.stdout(), "batch and single calls give the same partitions (§2.4)");
        List<String> lines = batch.lines();
        assertEquals(keys.size(), lines.size());
        for (int i = 0; i < keys.size(); i++) {
            assertEquals(murmur2(keys.get(i)) % 1000, Integer.parseInt(lines.get(i)), "key " + i);
        }
    }

    /** spec/builtins.md kafka-murmur2, before the modulo: (h & 0x7fffffff). */
    private static int murmur2(byte[] k) {
        int m = 0x5bd1e995;
        int h = 0x9747b28c ^ k.length;
        int i = 0;
        for (; i + 4 <= k.length; i += 4) {
            int x = (k[i] & 0xff) | (k[i + 1] & 0xff) << 8 | (k[i + 2] & 0xff) << 16 | (k[i + 3] & 0xff) << 24;
            x *= m;
            x ^= x >>> 24;
            x *= m;
            h *= m;
            h ^= x;
        }
        switch (k.length % 4) {
            case 3:
                h ^= (k[i + 2] & 0xff) << 16;
                // fall through
            case 2:
                h ^= (k[i + 1] & 0xff) << 8;
                // fall through
            case 1:
                h ^= k[i] & 0xff;
                h *= m;
                break;
            default:
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h & 0x7fffffff;
    }
}
