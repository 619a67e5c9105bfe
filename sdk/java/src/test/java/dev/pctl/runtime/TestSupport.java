package dev.pctl.runtime;

import dev.pctl.internal.Json;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** Helpers shared by the runtime tests: repository paths, the vectors, hex, big-stack calls. */
final class TestSupport {
    private TestSupport() {}

    /** Stack of the threads the tests make calls on: deep enough for 1000 wasm frames. */
    static final long BIG_STACK = 1L << 30;

    /** The repository root (set by Surefire from pom.xml; defaults to two levels up). */
    static Path root() {
        return Path.of(System.getProperty("pctl.root", "../..")).toAbsolutePath().normalize();
    }

    static Path repo(String rel) {
        return root().resolve(rel);
    }

    static Path resource(String name) {
        return root().resolve("sdk/java/src/test/resources/wasm").resolve(name);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> json(Path p) throws Exception {
        return (Map<String, Object>) Json.parse(Files.readString(p, StandardCharsets.UTF_8));
    }

    static byte[] read(Path p) throws IOException {
        return Files.readAllBytes(p);
    }

    /** One case of a spec/vectors file. */
    record Case(byte[] key, int n, int partition) {}

    @SuppressWarnings("unchecked")
    static List<Case> cases(String partitioner) throws Exception {
        Map<String, Object> doc = json(repo("spec/vectors/" + partitioner + ".json"));
        List<Case> out = new ArrayList<>();
        for (Object o : (List<Object>) doc.get("cases")) {
            Map<String, Object> c = (Map<String, Object>) o;
            out.add(new Case(unhex((String) c.get("key_hex")), ((Long) c.get("n")).intValue(), ((Long) c.get("partition")).intValue()));
        }
        return out;
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder(2 * b.length);
        for (byte x : b) {
            sb.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
        }
        return sb.toString();
    }

    static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    /** Runs body on a fresh thread with a 1 GiB stack (as the conformance host's worker) and returns its result. */
    static <T> T onBigStack(Callable<T> body) throws Exception {
        return onThread(BIG_STACK, body);
    }

    static <T> T onThread(long stack, Callable<T> body) throws Exception {
        Object[] result = new Object[1];
        Throwable[] thrown = new Throwable[1];
        Thread t = new Thread(null, () -> {
            try {
                result[0] = body.call();
            } catch (Throwable e) {
                thrown[0] = e;
            }
        }, "test-wasm", stack);
        t.start();
        t.join();
        if (thrown[0] instanceof Exception) {
            throw (Exception) thrown[0];
        }
        if (thrown[0] != null) {
            throw new AssertionError(thrown[0]);
        }
        @SuppressWarnings("unchecked")
        T r = (T) result[0];
        return r;
    }

    static Plugin load(Path wasm, Plugin.Options o) throws PluginException, IOException {
        return Plugin.load(read(wasm), wasm.getFileName().toString(), o);
    }

    /** The partitions of keys, all by single calls or by batches of up to 4096 keys, on one instance. */
    static int[] partitions(PluginInstance in, List<byte[]> keys, int n, boolean batch) throws PluginException {
        int[] out = new int[keys.size()];
        if (!batch || !in.hasBatch()) {
            for (int i = 0; i < keys.size(); i++) {
                out[i] = in.partition(keys.get(i), 0, keys.get(i).length, n);
            }
            return out;
        }
        byte[] arena = new byte[Plugin.BUFFER_BYTES];
        int[] ends = new int[Plugin.MAX_BATCH_KEYS];
        int[] res = new int[Plugin.MAX_BATCH_KEYS];
        int count = 0;
        int first = 0;
        for (int i = 0; i <= keys.size(); i++) {
            boolean flush = i == keys.size() || count == Plugin.MAX_BATCH_KEYS
                    || 4 * (count + 1) + (count == 0 ? 0 : ends[count - 1]) + keys.get(i).length > Plugin.BUFFER_BYTES;
            if (flush && count > 0) {
                in.batch(arena, ends, count, n, res);
                System.arraycopy(res, 0, out, first, count);
                first += count;
                count = 0;
            }
            if (i == keys.size()) {
                break;
            }
            int start = count == 0 ? 0 : ends[count - 1];
            System.arraycopy(keys.get(i), 0, arena, start, keys.get(i).length);
            ends[count++] = start + keys.get(i).length;
        }
        return out;
    }
}
