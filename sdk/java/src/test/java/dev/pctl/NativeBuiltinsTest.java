package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.pctl.runtime.Plugin;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The native fast path (spec/builtins.md): every Java built-in of NativeBuiltins against its
 * spec/vectors file (partitions computed by the real clients, never by pctl), against this SDK's
 * own run of the built-in's WebAssembly module (Chicory) on random keys through both entry points,
 * and the digest rule: only a built-in's exact digest without config takes the native path. The
 * switch against a real broker is NativeBuiltinsBrokerTest.
 */
class NativeBuiltinsTest {
    static final int[] NS = {1, 2, 3, 7, 8, 16, 31, 100, 1000, 65535, 2147483647};
    // The spec's million random keys of 0-300 bytes (the same for every built-in), each against the
    // 11 counts of NS: 5 to 10 s per built-in on this machine; -Dpctl.nativeKeys overrides.
    static final int KEYS = Integer.getInteger("pctl.nativeKeys", 1_000_000);
    private static List<byte[]> random;

    static synchronized List<byte[]> keys() {
        if (random == null) {
            random = randomKeys(1, KEYS);
        }
        return random;
    }

    static List<String> names() {
        return Partitioner.builtinNames();
    }

    static List<byte[]> randomKeys(long seed, int count) {
        SplittableRandom r = new SplittableRandom(seed);
        List<byte[]> keys = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            byte[] k = new byte[r.nextInt(301)];
            r.nextBytes(k);
            keys.add(k);
        }
        return keys;
    }

    /** keys.txt expanded: "hex/n" per case, in order. */
    static List<String> keysTxt() throws Exception {
        List<String> out = new ArrayList<>();
        for (String line : Files.readAllLines(Repo.path("spec/vectors/keys.txt"))) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String[] f = line.split(" ");
            for (String n : f[0].split(",")) {
                out.add(f[1].substring(1) + "/" + n);
            }
        }
        return out;
    }

    @Test
    void everyBuiltinHasANativeFunction() {
        assertEquals(new TreeSet<>(names()), new TreeSet<>(NativeBuiltins.FUNCS.keySet()));
        assertEquals(new TreeSet<>(names()), new TreeSet<>(NativeBuiltins.builtinDigests().values()));
    }

    @ParameterizedTest
    @MethodSource("names")
    void nativeAgainstTheVectors(String name) throws Exception {
        List<Repo.Case> cases = Repo.vectors(name);
        List<String> got = new ArrayList<>();
        for (Repo.Case c : cases) {
            got.add(HexFormat.of().formatHex(c.key()) + "/" + c.n());
        }
        assertEquals(keysTxt(), got, name + ".json: the cases of keys.txt");
        NativeBuiltins.Fn f = NativeBuiltins.FUNCS.get(name);
        for (Repo.Case c : cases) {
            int p = f.partition(c.key(), c.n());
            if (p != c.partition()) {
                fail(name + ": key " + HexFormat.of().formatHex(c.key()) + " n=" + c.n() + ": native gives " + p + ", the reference client " + c.partition());
            }
        }
        try (Partitioner p = NativeBuiltins.nativeFor(Plugin.sha256(Partitioner.builtinModule(name)), new byte[0], null, new Plugin.Options())) {
            Map<Integer, List<Repo.Case>> byN = new LinkedHashMap<>();
            for (Repo.Case c : cases) {
                byN.computeIfAbsent(c.n(), k -> new ArrayList<>()).add(c);
            }
            for (var e : byN.entrySet()) {
                int[] want = e.getValue().stream().mapToInt(Repo.Case::partition).toArray();
                assertArrayEquals(want, p.partitionAll(e.getValue().stream().map(Repo.Case::key).toList(), e.getKey()), name + " partitionAll n=" + e.getKey());
            }
        }
    }

    @ParameterizedTest
    @MethodSource("names")
    void nativeAgreesWithTheModule(String name) {
        List<byte[]> keys = keys();
        NativeBuiltins.Fn f = NativeBuiltins.FUNCS.get(name);
        try (Partitioner wasm = Partitioner.builtin(name)) {
            for (int n : NS) {
                int[] got = wasm.partitionAll(keys, n); // pctl_partition_batch
                for (int i = 0; i < keys.size(); i++) {
                    int want = f.partition(keys.get(i), n);
                    if (got[i] != want) {
                        fail(name + " n=" + n + " key=" + HexFormat.of().formatHex(keys.get(i)) + ": wasm " + got[i] + ", native " + want + ": the native implementation is not the module's");
                    }
                }
            }
            for (int i = 0; i < 20_000 && i < keys.size(); i++) { // pctl_partition, the single-call export
                int n = NS[i % NS.length];
                int r = wasm.partition(keys.get(i), n);
                if (r != f.partition(keys.get(i), n)) {
                    fail(name + " single call n=" + n + " key=" + HexFormat.of().formatHex(keys.get(i)) + ": wasm " + r + ", native " + f.partition(keys.get(i), n));
                }
            }
        }
    }

    @Test
    void nativeForTakesABuiltinDigestWithoutConfigOnly() throws Exception {
        Plugin.Options o = new Plugin.Options();
        for (String name : names()) {
            String d = Plugin.sha256(Partitioner.builtinModule(name));
            try (Partitioner p = NativeBuiltins.nativeFor(d, new byte[0], null, o)) {
                assertNotNull(p, name);
                assertTrue(p.isNative());
                assertEquals(d, p.digest());
                assertEquals(name, p.name(), "the metadata is the module's");
            }
            assertNull(NativeBuiltins.nativeFor(d, "a=1\0".getBytes(StandardCharsets.UTF_8), null, o), name + " with config runs the module");
        }
        for (String other : List.of("kafka-murmur2-rust", "kafka-murmur2-as", "kafka-murmur2-go")) {
            byte[] m = Files.readAllBytes(Repo.path("plugins/murmur2/" + other + ".wasm"));
            assertNull(NativeBuiltins.nativeFor(Plugin.sha256(m), new byte[0], m, o), other + ": another module of the same function is still run as a module");
        }
        try (Partitioner w = Partitioner.builtin("kafka-murmur2")) {
            assertFalse(w.isNative(), "Partitioner.builtin runs the module");
        }
    }

    @Test
    void nativeErrorsAreTheModulePaths() {
        try (Partitioner p = NativeBuiltins.nativeFor(Plugin.sha256(Partitioner.builtinModule("kafka-murmur2")), null, null, new Plugin.Options());
                Partitioner w = Partitioner.builtin("kafka-murmur2")) {
            for (Partitioner q : List.of(p, w)) {
                for (int bad : new int[] {0, -1, Integer.MIN_VALUE}) {
                    assertThrows(IllegalArgumentException.class, () -> q.partition(new byte[] {1}, bad));
                    assertThrows(IllegalArgumentException.class, () -> q.partitionAll(List.of(new byte[] {1}), bad));
                }
                BadRequestException e = assertThrows(BadRequestException.class, () -> q.partition(new byte[65537], 3));
                assertTrue(e.getMessage().contains("key too long"), e.getMessage());
                assertThrows(BadRequestException.class, () -> q.partitionAll(List.of(new byte[1], new byte[65537]), 3));
            }
            assertEquals(w.partition(new byte[65536], 3), p.partition(new byte[65536], 3), "a key of exactly 65536 bytes is a key");
        }
    }

    /**
     * WASM / native per built-in, 16-byte keys, Partitioner.partition per call and partitionAll,
     * the two paths' rounds interleaved, best of ROUNDS rounds in one run: printed, never asserted
     * (a ratio the README records; -Dpctl.benchRounds overrides the rounds).
     */
    @ParameterizedTest
    @MethodSource("names")
    void nativeVsWasmPerCallRatio(String name) {
        int rounds = Integer.getInteger("pctl.benchRounds", 15);
        List<byte[]> keys = new ArrayList<>();
        for (int i = 0; i < 100_000; i++) {
            keys.add(String.format("k%-15d", i).replace(' ', '.').getBytes(StandardCharsets.UTF_8));
        }
        try (Partitioner nat = NativeBuiltins.nativeFor(Plugin.sha256(Partitioner.builtinModule(name)), null, null, new Plugin.Options());
                Partitioner wasm = Partitioner.builtin(name)) {
            assertTrue(nat.isNative(), name);
            long bn = Long.MAX_VALUE;
            long bw = Long.MAX_VALUE;
            for (int r = 0; r < rounds; r++) {
                long t0 = System.nanoTime();
                long a = 0;
                for (byte[] k : keys) {
                    a += nat.partition(k, 1000);
                }
                long t1 = System.nanoTime();
                long b = 0;
                for (byte[] k : keys) {
                    b += wasm.partition(k, 1000);
                }
                long t2 = System.nanoTime();
                assertEquals(b, a);
                bn = Math.min(bn, t1 - t0);
                bw = Math.min(bw, t2 - t1);
            }
            System.out.printf("%s 16-byte keys, Partitioner.partition per call: wasm %.1f ns, native %.1f ns: wasm/native %.2fx (best of %d)%n",
                    name, bw / (double) keys.size(), bn / (double) keys.size(), bw / (double) bn, rounds);
            bn = Long.MAX_VALUE;
            bw = Long.MAX_VALUE;
            for (int r = 0; r < rounds; r++) {
                long t0 = System.nanoTime();
                int[] a = nat.partitionAll(keys, 1000);
                long t1 = System.nanoTime();
                int[] b = wasm.partitionAll(keys, 1000);
                long t2 = System.nanoTime();
                assertArrayEquals(b, a);
                bn = Math.min(bn, t1 - t0);
                bw = Math.min(bw, t2 - t1);
            }
            System.out.printf("%s 16-byte keys, partitionAll: wasm %.1f ns/key, native %.1f ns/key: wasm/native %.2fx (best of %d)%n",
                    name, bw / (double) keys.size(), bn / (double) keys.size(), bw / (double) bn, rounds);
        }
    }
}
