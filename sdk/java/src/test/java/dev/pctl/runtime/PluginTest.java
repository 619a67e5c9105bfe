package dev.pctl.runtime;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.runtime.PluginException.Kind;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/**
 * The runtime's public API (Plugin, PluginInstance) on the modules of runtime/testdata/hostile
 * and the built-ins: what each failure is classified as, that nothing failed becomes a partition,
 * and that one Plugin serves many threads. The conformance host's tests check the same modules
 * through its command line.
 */
class PluginTest {
    private static Plugin.Options fast() {
        Plugin.Options o = new Plugin.Options();
        o.callLimitNanos = 300_000_000L; // the limit is 1 s; a shorter one keeps the test quick
        return o;
    }

    private static Plugin hostile(String name) throws Exception {
        return TestSupport.load(TestSupport.repo("runtime/testdata/hostile/" + name + ".wasm"), fast());
    }

    private static PluginException callFails(Plugin p, byte[] key, int n) throws Exception {
        return TestSupport.onBigStack(() -> {
            PluginInstance in = p.open(new byte[0]);
            PluginException e = assertThrows(PluginException.class, () -> in.partition(key, 0, key.length, n));
            assertTrue(in.isBroken() || e.kind() == Kind.ERROR_CODE, "a failed call discards the instance: " + e.getMessage());
            return e;
        });
    }

    @Test
    void runTimeFailuresNameThePluginAndTheKind() throws Exception {
        record Tc(String module, byte[] key, Kind kind, String has) {}
        List<Tc> cases = List.of(
                new Tc("loop-forever", new byte[0], Kind.TIME_LIMIT, "time limit exceeded"),
                new Tc("exponential", new byte[0], Kind.TIME_LIMIT, "time limit exceeded"),
                new Tc("memory-grow", new byte[0], Kind.MEMORY_LIMIT, "memory limit exceeded"),
                new Tc("recurse", new byte[0], Kind.CALL_DEPTH, "call stack exhausted"),
                new Tc("trap-some-keys", new byte[] {(byte) 0xff}, Kind.TRAP, "plugin trapped"),
                new Tc("out-of-range", new byte[] {1}, Kind.OUT_OF_RANGE, "returned 10 for n=10"),
                new Tc("proc-exit", new byte[0], Kind.EXIT, "plugin exited with code 3"));
        for (Tc tc : cases) {
            PluginException e = callFails(hostile(tc.module()), tc.key(), 10);
            assertEquals(tc.kind(), e.kind(), tc.module() + ": " + e.getMessage());
            assertFalse(e.atLoad(), tc.module());
            assertFalse(e.engineStackOverflow(), tc.module() + ": the 1000-frame limit, not the JVM's stack");
            assertTrue(e.getMessage().startsWith("plugin " + tc.module() + " (sha256:"), e.getMessage());
            assertTrue(e.getMessage().contains(tc.has()), e.getMessage());
        }
    }

    @Test
    void loadRefusals() throws Exception {
        record Tc(String file, Kind kind, String has) {}
        List<Tc> cases = List.of(
                new Tc("hostile/memory-initial", Kind.MEMORY_LIMIT, "513"),
                new Tc("hostile/forbidden-import", Kind.FORBIDDEN_IMPORT, "env.now"),
                new Tc("hostile/forbidden-wasi-import", Kind.FORBIDDEN_IMPORT, "wasi_snapshot_preview1.fd_read"),
                new Tc("hostile/wasi-wrong-signature", Kind.FORBIDDEN_IMPORT, "(i32) -> (i32)"),
                new Tc("hostile/missing-export", Kind.MISSING_EXPORT, "(i32, i32) -> (i32)"),
                new Tc("hostile/bad-signature", Kind.BAD_SIGNATURE, "pctl_partition"),
                new Tc("hostile/abi-v2", Kind.UNSUPPORTED_ABI, "module declares ABI version 2; this host supports 1; upgrade pctl"),
                new Tc("hostile/oversize", Kind.TOO_LARGE, "module too large"),
                new Tc("hostile/not-wasm", Kind.NOT_WASM, "not a WebAssembly module"),
                new Tc("hostile/truncated", Kind.INVALID_MODULE, "invalid WebAssembly module"),
                new Tc("resource/feature-tail-call", Kind.UNSUPPORTED_FEATURE, "unsupported WebAssembly feature"),
                new Tc("resource/simd", Kind.UNSUPPORTED_FEATURE, "SIMD"),
                new Tc("resource/reserved-export", Kind.INVALID_MODULE, "pctl.depth"));
        for (Tc tc : cases) {
            String[] parts = tc.file().split("/");
            var path = parts[0].equals("hostile") ? TestSupport.repo("runtime/testdata/hostile/" + parts[1] + ".wasm") : TestSupport.resource(parts[1] + ".wasm");
            PluginException e = assertThrows(PluginException.class, () -> TestSupport.load(path, fast()), tc.file());
            assertEquals(tc.kind(), e.kind(), tc.file() + ": " + e.getMessage());
            assertTrue(e.atLoad(), tc.file());
            assertTrue(e.getMessage().contains(tc.has()), e.getMessage());
        }
    }

    @Test
    void configIsPassedExactlyOrRefused() throws Exception {
        Plugin p = hostile("config-echo");
        int got = TestSupport.onBigStack(() -> p.open("a=1\n".getBytes(StandardCharsets.UTF_8)).partition(new byte[0], 0, 0, 10));
        assertEquals(4, got, "config-echo: (key_len + config_len) % n with the 4 config bytes");
        PluginException e = assertThrows(PluginException.class, () -> p.open("!".getBytes(StandardCharsets.UTF_8)));
        assertEquals(Kind.CONFIG_REJECTED, e.kind());
        assertTrue(e.atLoad());
        PluginException none = assertThrows(PluginException.class,
                () -> TestSupport.load(TestSupport.repo("plugins/builtin/jump.wasm"), fast()).open(new byte[] {'a'}));
        assertEquals(Kind.CONFIG_UNSUPPORTED, none.kind());
        assertTrue(none.getMessage().contains("plugin jump"), none.getMessage());
    }

    @Test
    void afterATrapAFreshInstanceAnswers() throws Exception {
        Plugin p = hostile("trap-some-keys");
        TestSupport.onBigStack(() -> {
            PluginInstance in = p.open(new byte[0]);
            assertThrows(PluginException.class, () -> in.partition(new byte[] {(byte) 0xff}, 0, 1, 10));
            assertTrue(in.isBroken());
            in.close();
            assertEquals(2, p.open(new byte[0]).partition(new byte[] {1, 2}, 0, 2, 10));
            return null;
        });
    }

    @Test
    void depthLimitIsExact() throws Exception {
        // depth.wasm recurses key_len + 2 frames deep: 998 bytes of key is 1000 frames.
        Plugin p = TestSupport.load(TestSupport.resource("depth.wasm"), fast());
        TestSupport.onBigStack(() -> {
            byte[] ok = new byte[998];
            assertEquals(998, p.open(new byte[0]).partition(ok, 0, ok.length, 100000));
            byte[] deep = new byte[999];
            PluginException e = assertThrows(PluginException.class, () -> p.open(new byte[0]).partition(deep, 0, deep.length, 100000));
            assertEquals(Kind.CALL_DEPTH, e.kind());
            assertFalse(e.engineStackOverflow());
            return null;
        });
    }

    @Test
    void aSmallJvmStackIsReportedAsSuch() throws Exception {
        // 998 frames are legal; on a 136 KiB thread (the JVM's smallest) its stack runs out first, and the
        // error says so (the SDK retries such a call on a thread with a large stack).
        Plugin p = TestSupport.load(TestSupport.resource("depth.wasm"), fast());
        PluginException e = TestSupport.onThread(136 << 10, () -> {
            byte[] ok = new byte[998];
            return assertThrows(PluginException.class, () -> p.open(new byte[0]).partition(ok, 0, ok.length, 100000));
        });
        assertEquals(Kind.CALL_DEPTH, e.kind());
        assertTrue(e.engineStackOverflow(), e.getMessage());
    }

    @Test
    void aPendingInterruptSurvivesACallAndDoesNotFailIt() throws Exception {
        Plugin p = TestSupport.load(TestSupport.repo("plugins/builtin/kafka-murmur2.wasm"), fast());
        TestSupport.onBigStack(() -> {
            PluginInstance in = p.open(new byte[0]);
            Thread.currentThread().interrupt();
            assertEquals(4, in.partition("21".getBytes(StandardCharsets.UTF_8), 0, 2, 8), "kafka-murmur2(\"21\", 8) = 4 (spec/vectors)");
            assertTrue(Thread.interrupted(), "the caller's interrupt is still pending after the call");
            return null;
        });
    }

    @Test
    void timeLimitDoesNotLeakIntoTheNextCall() throws Exception {
        Plugin loop = hostile("loop-forever");
        Plugin ok = TestSupport.load(TestSupport.repo("plugins/builtin/kafka-murmur2.wasm"), fast());
        TestSupport.onBigStack(() -> {
            assertThrows(PluginException.class, () -> loop.open(new byte[0]).partition(new byte[0], 0, 0, 3));
            assertFalse(Thread.currentThread().isInterrupted(), "the watchdog's interrupt is cleared");
            assertEquals(4, ok.open(new byte[0]).partition("21".getBytes(StandardCharsets.UTF_8), 0, 2, 8));
            return null;
        });
    }

    @Test
    void manyThreadsOnePlugin() throws Exception {
        // One Plugin, one instance per thread (as the SDK's pool does): same answers as one thread.
        Plugin p = TestSupport.load(TestSupport.repo("plugins/builtin/kafka-murmur2.wasm"), new Plugin.Options());
        List<byte[]> keys = new ArrayList<>();
        java.util.Random rnd = new java.util.Random(1);
        for (int i = 0; i < 5000; i++) {
            byte[] k = new byte[rnd.nextInt(40)];
            rnd.nextBytes(k);
            keys.add(k);
        }
        int[] want = TestSupport.partitions(p.open(new byte[0]), keys, 997, false);
        ExecutorService ex = Executors.newFixedThreadPool(8);
        try {
            List<Future<int[]>> fs = new ArrayList<>();
            for (int t = 0; t < 16; t++) {
                boolean batch = t % 2 == 0;
                fs.add(ex.submit(() -> TestSupport.partitions(p.open(new byte[0]), keys, 997, batch)));
            }
            for (Future<int[]> f : fs) {
                assertArrayEquals(want, f.get());
            }
        } finally {
            ex.shutdownNow();
        }
    }

    @Test
    void builtinsMatchTheirVectors() throws Exception {
        record Tc(String wasm, String vectors, boolean compile) {}
        List<Tc> cases = List.of(
                new Tc("plugins/builtin/kafka-murmur2.wasm", "kafka-murmur2", true),
                new Tc("plugins/builtin/linear-murmur2.wasm", "linear-murmur2", true),
                new Tc("plugins/builtin/librdkafka-consistent.wasm", "librdkafka-consistent", true),
                new Tc("plugins/builtin/librdkafka-fnv1a.wasm", "librdkafka-fnv1a", true),
                new Tc("plugins/builtin/sarama-fnv1a.wasm", "sarama-fnv1a", true),
                new Tc("plugins/builtin/jump.wasm", "jump", true),
                new Tc("plugins/builtin/kafka-murmur2.wasm", "kafka-murmur2", false));
        for (Tc tc : cases) {
            Plugin.Options o = new Plugin.Options();
            o.compile = tc.compile();
            Plugin p = TestSupport.load(TestSupport.repo(tc.wasm()), o);
            TestSupport.onBigStack(() -> {
                PluginInstance in = p.open(new byte[0]);
                for (TestSupport.Case c : TestSupport.cases(tc.vectors())) {
                    int got = in.partition(c.key(), 0, c.key().length, c.n());
                    assertEquals(c.partition(), got, () -> tc.wasm() + ": key " + TestSupport.hex(c.key()) + " n=" + c.n()
                            + " (keys would remap for users of the reference client)");
                }
                return null;
            });
        }
    }
}
