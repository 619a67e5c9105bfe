package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.runtime.PluginException;
import java.nio.charset.StandardCharsets;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/** The offline Partitioner: the reference vectors, batches, config, errors, threads. */
class PartitionerTest {
    private static final Path MURMUR2 = Repo.path("plugins/builtin/kafka-murmur2.wasm");

    @Test
    void kafkaMurmur2MatchesTheReferenceVectors() throws Exception {
        // spec/vectors/kafka-murmur2.json: computed by the Kafka Java client. A mismatch means keys
        // would remap for existing users of Kafka's default partitioner.
        List<Repo.Case> cases = Repo.vectors("kafka-murmur2");
        assertTrue(cases.size() > 100, "vectors present");
        try (Partitioner p = Partitioner.load(MURMUR2)) {
            assertEquals("kafka-murmur2", p.name());
            for (Repo.Case c : cases) {
                assertEquals(c.partition(), p.partition(c.key(), c.n()),
                        () -> "key " + java.util.HexFormat.of().formatHex(c.key()) + " n=" + c.n() + ": keys would remap for users of Kafka's default partitioner");
                assertEquals(c.partition(), NativeMurmur2.partition(c.key(), c.n()), "the native baseline agrees");
            }
        }
    }

    @Test
    void partitionAllEqualsSingleCalls() throws Exception {
        Random rnd = new Random(3);
        List<byte[]> keys = new ArrayList<>();
        for (int i = 0; i < 10000; i++) {
            byte[] k = new byte[rnd.nextInt(200)];
            rnd.nextBytes(k);
            keys.add(k);
        }
        for (int i = 0; i < 20; i++) {
            keys.add(new byte[Partitioner.MAX_KEY]); // byte-bound batches
        }
        keys.add(new byte[0]);
        try (Partitioner p = Partitioner.load(MURMUR2)) {
            int[] all = p.partitionAll(keys, 1000);
            for (int i = 0; i < keys.size(); i++) {
                assertEquals(p.partition(keys.get(i), 1000), all[i], "key " + i);
                assertEquals(NativeMurmur2.partition(keys.get(i), 1000), all[i], "key " + i);
            }
        }
    }

    @Test
    void configIsEncodedCanonically() throws Exception {
        // config-echo: (key_len + config_len) % n; "a=1\nb=22\n" is 9 bytes whatever the map order.
        Path echo = Repo.path("runtime/testdata/hostile/config-echo.wasm");
        try (Partitioner p = Partitioner.load(echo, Map.of("b", "22", "a", "1"))) {
            assertEquals(9, p.partition(new byte[0], 100));
            assertArrayEquals("a=1\nb=22\n".getBytes(StandardCharsets.UTF_8), p.config());
        }
        assertThrows(BadRequestException.class, () -> Partitioner.load(echo, Map.of("a=b", "1")));
        PluginRejectedException e = assertThrows(PluginRejectedException.class, () -> Partitioner.load(MURMUR2, Map.of("seed", "1")));
        assertEquals(PluginException.Kind.CONFIG_UNSUPPORTED, e.kind());
        assertEquals(ErrorCode.PLUGIN_REJECTED, e.code());
        assertTrue(e.getMessage().contains("plugin kafka-murmur2") && e.getMessage().contains("takes no configuration"), e.getMessage());
    }

    @Test
    void errorsNameThePlugin() throws Exception {
        try (Partitioner p = Partitioner.load(MURMUR2)) {
            assertThrows(IllegalArgumentException.class, () -> p.partition(new byte[1], 0));
            BadRequestException tooLong = assertThrows(BadRequestException.class, () -> p.partition(new byte[Partitioner.MAX_KEY + 1], 3));
            assertTrue(tooLong.getMessage().contains("key too long"), tooLong.getMessage());
        }
        try (Partitioner p = Partitioner.load(Repo.path("runtime/testdata/hostile/trap-some-keys.wasm"))) {
            PluginFailedException e = assertThrows(PluginFailedException.class, () -> p.partition(new byte[] {(byte) 0xff}, 10));
            assertEquals(ErrorCode.PLUGIN_FAILED, e.code());
            assertEquals("trap-some-keys", e.plugin());
            assertEquals(PluginException.Kind.TRAP, e.kind());
            assertTrue(e.getMessage().startsWith("plugin trap-some-keys (sha256:"), e.getMessage());
            assertEquals(2, p.partition(new byte[2], 10), "a fresh instance answers the next key");
            PluginFailedException inBatch = assertThrows(PluginFailedException.class,
                    () -> p.partitionAll(List.of(new byte[1], new byte[] {(byte) 0xff, 1}, new byte[3]), 10));
            assertTrue(inBatch.getMessage().contains("key 1"), "names the failing key: " + inBatch.getMessage());
        }
        PluginRejectedException notWasm = assertThrows(PluginRejectedException.class, () -> Partitioner.load(Repo.path("runtime/testdata/hostile/not-wasm.wasm")));
        assertEquals(PluginException.Kind.NOT_WASM, notWasm.kind());
        assertThrows(NoSuchFileException.class, () -> Partitioner.load(Path.of("/nonexistent.wasm")));
    }

    @Test
    void deepButLegalRecursionWorksOnASmallStack() throws Exception {
        // depth.wasm nests key_len + 2 frames: 998 bytes is 1000 frames, legal on every host. On a
        // 256 KiB thread the JVM stack runs out first; the partitioner re-runs the call on a thread
        // with a large stack, so the answer is the same as everywhere else.
        try (Partitioner p = Partitioner.fromBytes(java.nio.file.Files.readAllBytes(Repo.path("sdk/java/src/test/resources/wasm/depth.wasm")), "depth.wasm")) {
            int[] got = new int[1];
            Thread t = new Thread(null, () -> got[0] = p.partition(new byte[998], 100000), "small", 256 << 10);
            t.start();
            t.join();
            assertEquals(998, got[0]);
            PluginFailedException e = assertThrows(PluginFailedException.class, () -> p.partition(new byte[999], 100000));
            assertEquals(PluginException.Kind.CALL_DEPTH, e.kind());
        }
    }

    @Test
    void manyThreads() throws Exception {
        List<byte[]> keys = new ArrayList<>();
        for (int i = 0; i < 2000; i++) {
            keys.add(("key-" + i).getBytes(StandardCharsets.UTF_8));
        }
        ExecutorService ex = Executors.newFixedThreadPool(8);
        try (Partitioner p = Partitioner.load(MURMUR2)) {
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 8; t++) {
                fs.add(ex.submit(() -> {
                    for (byte[] k : keys) {
                        assertEquals(NativeMurmur2.partition(k, 31), p.partition(k, 31));
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get();
            }
        } finally {
            ex.shutdownNow();
        }
    }
}
