package dev.pctl;

import dev.pctl.runtime.Config;
import dev.pctl.runtime.Plugin;
import dev.pctl.runtime.PluginException;
import dev.pctl.runtime.PluginInstance;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A partitioner module ready to compute partitions: {@code partition(key, n)} in {@code [0, n)},
 * exactly as every other pctl host computes it (spec/abi-v1.md). Usable offline, from the
 * module's bytes or a {@code .wasm} file; the {@link Producer} uses one per epoch.
 *
 * <pre>{@code
 * try (Partitioner p = Partitioner.load(Path.of("plugins/builtin/kafka-murmur2.wasm"))) {
 *     int partition = p.partition("user-1".getBytes(UTF_8), 12);
 * }
 * }</pre>
 *
 * <p><b>Threads.</b> Thread-safe: calls from many threads run on separate instances of the
 * module, taken from a pool that grows to the number of concurrent callers. Each result depends
 * only on (key, n, config), so which instance answers does not matter. A call runs on the
 * caller's thread; in the rare case that a module nests calls so deeply that the thread's JVM
 * stack runs out before the ABI's limit of 1000 frames, the call is run again on an internal
 * thread with a 1 GiB stack, so the limit is the same as on every other host.
 *
 * <p><b>Errors.</b> A module that cannot be loaded, or that rejects its config, raises {@link
 * PluginRejectedException}; a call that fails (a trap, the time limit of 1 s, memory or stack
 * limits, an error code or a result out of range) raises {@link PluginFailedException}, naming
 * the plugin, and never returns a partition. A failed call's instance is discarded.
 *
 * <p>Loading compiles the module to JVM bytecode (Chicory): a fraction of a second for the
 * built-ins, a few seconds for a 2 MB Go-built module. Keep a Partitioner for as long as its
 * module is needed.
 */
public final class Partitioner implements AutoCloseable {
    /** {@code PCTL_MAX_KEY}: the longest key, in bytes. */
    public static final int MAX_KEY = Plugin.MAX_KEY;

    private static final long BIG_STACK = 1L << 30;
    private static volatile ExecutorService bigStack;

    private final Plugin plugin;
    private final byte[] config;
    // Idle instances: one in a slot (no allocation on the single-threaded path), more in the deque.
    private final AtomicReference<PluginInstance> idle = new AtomicReference<>();
    private final ConcurrentLinkedDeque<PluginInstance> pool = new ConcurrentLinkedDeque<>();
    private volatile boolean closed;
    // The native fast path (NativeBuiltins): a built-in's Java function, null for the module.
    private final NativeBuiltins.Fn nat;

    private Partitioner(Plugin plugin, byte[] config, PluginInstance first, NativeBuiltins.Fn nat) {
        this.plugin = plugin;
        this.config = config;
        this.nat = nat;
        idle.set(first);
    }

    /**
     * The names of the built-in partitioners embedded in this library (the modules of
     * plugins/builtin, byte for byte), sorted: {@code jump}, {@code kafka-murmur2}, ...
     */
    public static List<String> builtinNames() {
        return BUILTINS;
    }

    private static final List<String> BUILTINS = List.of(
            "jump", "kafka-murmur2", "librdkafka-consistent", "librdkafka-fnv1a", "linear-murmur2", "sarama-fnv1a");

    /**
     * A built-in partitioner by name, from the module embedded in this library: works offline,
     * with no file and no broker. {@code Partitioner.builtin("kafka-murmur2").partition(key, 12)}
     * is what Kafka's Java client computes for that key.
     *
     * @throws NotFoundException if {@code name} is not a built-in (see {@link #builtinNames()})
     */
    public static Partitioner builtin(String name) {
        byte[] module = builtinModule(name);
        return fromBytes(module, name);
    }

    /** The embedded module bytes of a built-in partitioner. */
    public static byte[] builtinModule(String name) {
        if (!BUILTINS.contains(name)) {
            throw new NotFoundException(name + " is not a built-in partitioner; the built-ins are " + String.join(", ", BUILTINS), null);
        }
        try (var in = Partitioner.class.getResourceAsStream("builtin/" + name + ".wasm")) {
            if (in == null) {
                throw new InternalException("built-in " + name + " is missing from this jar (dev/pctl/builtin/" + name + ".wasm): the package was built without plugins/builtin", null);
            }
            return in.readAllBytes();
        } catch (IOException e) {
            throw new InternalException("read built-in " + name + ": " + e.getMessage(), e);
        }
    }

    /** Loads a {@code .wasm} file with no config. */
    public static Partitioner load(Path wasm) throws IOException {
        return load(wasm, Map.of());
    }

    /**
     * Loads a {@code .wasm} file with a config given as pairs, encoded canonically (spec/abi-v1.md
     * §2.5: the same pairs always give the same bytes, whatever the map's order).
     *
     * @throws BadRequestException if a pair breaks the config rules
     * @throws PluginRejectedException if the module cannot be loaded or rejects the config
     * @throws NoSuchFileException if the file does not exist
     */
    public static Partitioner load(Path wasm, Map<String, String> config) throws IOException {
        byte[] cfg;
        try {
            cfg = Config.encode(config);
        } catch (Config.BadConfigException e) {
            throw new BadRequestException(e.getMessage(), e);
        }
        return fromBytes(Files.readAllBytes(wasm), wasm.getFileName().toString(), cfg, new Plugin.Options());
    }

    /** A partitioner from a module's bytes, with no config; {@code source} names it in errors. */
    public static Partitioner fromBytes(byte[] module, String source) {
        return fromBytes(module, source, new byte[0], new Plugin.Options());
    }

    /**
     * A partitioner from a module's bytes and raw config bytes (a topic's epoch carries its config
     * as bytes), with the runtime's settings (limits, engine).
     *
     * @throws PluginRejectedException if the module cannot be loaded or rejects the config
     */
    public static Partitioner fromBytes(byte[] module, String source, byte[] config, Plugin.Options options) {
        Plugin p;
        try {
            p = Plugin.load(module, source, options);
        } catch (PluginException e) {
            throw PluginRejectedException.of(e, source, e.kind() == PluginException.Kind.NOT_WASM ? null : Plugin.sha256(module));
        }
        byte[] cfg = config == null ? new byte[0] : config.clone();
        try {
            return new Partitioner(p, cfg, p.open(cfg), null);
        } catch (PluginException e) {
            throw PluginRejectedException.of(e, p.name(), p.digest());
        }
    }

    /** A built-in's module (loaded: name, digest, metadata) that partitions with its Java function {@code nat}. */
    static Partitioner withNative(byte[] module, String source, Plugin.Options options, NativeBuiltins.Fn nat) {
        Partitioner w = fromBytes(module, source, new byte[0], options);
        PluginInstance first = w.idle.getAndSet(null);
        return new Partitioner(w.plugin, w.config, first, nat);
    }

    /**
     * The partition of {@code key} among {@code n} partitions, in {@code [0, n)}. An empty key is
     * a key like any other (keyless records never reach a partitioner).
     *
     * @throws IllegalArgumentException if {@code n < 1}
     * @throws BadRequestException if the key is longer than {@link #MAX_KEY}
     * @throws PluginFailedException if the module failed; no partition is returned
     */
    public int partition(byte[] key, int n) {
        checkArgs(key.length, n);
        if (nat != null) {
            return nat.partition(key, n);
        }
        return run(in -> in.partition(key, 0, key.length, n));
    }

    /**
     * The partitions of many keys, in order: the same results as {@link #partition} for each, in
     * fewer crossings when the module exports {@code pctl_partition_batch} (up to 4096 keys or
     * 1 MiB per crossing).
     *
     * @throws PluginFailedException for the first key whose partition failed (named by its index)
     */
    public int[] partitionAll(List<byte[]> keys, int n) {
        int[] out = new int[keys.size()];
        for (byte[] k : keys) {
            checkArgs(k.length, n);
        }
        if (nat != null) {
            for (int j = 0; j < out.length; j++) {
                out[j] = nat.partition(keys.get(j), n);
            }
            return out;
        }
        int i = 0;
        while (i < keys.size()) {
            int start = i;
            int bytes = 0;
            while (i < keys.size() && i - start < Plugin.MAX_BATCH_KEYS && 4 * (i - start + 1) + bytes + keys.get(i).length <= Plugin.BUFFER_BYTES) {
                bytes += keys.get(i).length;
                i++;
            }
            int from = start;
            int to = i;
            int total = bytes;
            run(in -> {
                chunk(in, keys, from, to, total, n, out);
                return 0;
            });
        }
        return out;
    }

    private void chunk(PluginInstance in, List<byte[]> keys, int from, int to, int bytes, int n, int[] out) throws PluginException {
        int count = to - from;
        if (count == 1 || !in.hasBatch() || !plugin.options().useBatch) {
            for (int j = from; j < to; j++) {
                try {
                    out[j] = in.partition(keys.get(j), 0, keys.get(j).length, n);
                } catch (PluginException e) {
                    throw e.withContext("key " + j);
                }
            }
            return;
        }
        byte[] arena = new byte[bytes];
        int[] ends = new int[count];
        int pos = 0;
        for (int j = 0; j < count; j++) {
            byte[] k = keys.get(from + j);
            System.arraycopy(k, 0, arena, pos, k.length);
            pos += k.length;
            ends[j] = pos;
        }
        int[] res = new int[count];
        try {
            in.batch(arena, ends, count, n, res);
        } catch (PluginException batchError) {
            // Name the failing key: the same keys one at a time on a fresh instance (the module may
            // be broken only in batch calls, which §2.4 forbids: then the batch error stands).
            in.close();
            PluginInstance fresh = plugin.open(config);
            try {
                for (int j = from; j < to; j++) {
                    try {
                        fresh.partition(keys.get(j), 0, keys.get(j).length, n);
                    } catch (PluginException e) {
                        throw e.withContext("key " + j);
                    }
                }
            } finally {
                fresh.close();
            }
            throw batchError.withContext("batch of keys " + from + " to " + (to - 1) + "; each of them succeeded in a single call");
        }
        System.arraycopy(res, 0, out, from, count);
    }

    private static void checkArgs(int keyLen, int n) {
        if (n < 1) {
            throw new IllegalArgumentException("invalid partition count " + n + ": give 1 to 2147483647");
        }
        if (keyLen > MAX_KEY) {
            throw new BadRequestException("key too long: " + keyLen + " bytes; keys are at most " + MAX_KEY + " bytes (spec/abi-v1.md §1.1)");
        }
    }

    private interface Call<T> {
        T apply(PluginInstance in) throws PluginException;
    }

    private <T> T run(Call<T> call) {
        if (closed) {
            throw new IllegalStateException("partitioner " + describe() + " is closed");
        }
        try {
            return attempt(call);
        } catch (PluginException e) {
            if (e.engineStackOverflow()) {
                return onBigStack(() -> {
                    try {
                        return attempt(call);
                    } catch (PluginException again) {
                        throw failed(again);
                    }
                });
            }
            throw failed(e);
        }
    }

    private <T> T attempt(Call<T> call) throws PluginException {
        PluginInstance in = idle.getAndSet(null);
        if (in == null) {
            in = pool.pollFirst();
        }
        if (in == null) {
            try {
                in = plugin.open(config);
            } catch (PluginException e) {
                throw PluginRejectedException.of(e, plugin.name(), plugin.digest());
            }
        }
        T r;
        try {
            r = call.apply(in);
        } catch (PluginException | RuntimeException | Error e) {
            in.close(); // §3: a failed call's instance is discarded
            throw e;
        }
        if (in.isBroken() || closed) {
            in.close();
        } else if (!idle.compareAndSet(null, in)) {
            pool.offerFirst(in);
        }
        if (closed) {
            drain(); // a close that raced with this call
        }
        return r;
    }

    private PluginFailedException failed(PluginException e) {
        if (e.atLoad()) {
            throw PluginRejectedException.of(e, plugin.name(), plugin.digest());
        }
        return PluginFailedException.of(e, plugin.name(), plugin.digest());
    }

    private static <T> T onBigStack(Callable<T> body) {
        ExecutorService ex = bigStack;
        if (ex == null) {
            synchronized (Partitioner.class) {
                if (bigStack == null) {
                    bigStack = Executors.newCachedThreadPool(r -> {
                        Thread t = new Thread(null, r, "pctl-wasm-deep", BIG_STACK);
                        t.setDaemon(true);
                        return t;
                    });
                }
                ex = bigStack;
            }
        }
        Future<T> f = ex.submit(body);
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return f.get();
                } catch (InterruptedException e) {
                    interrupted = true; // the call is bounded by the time limit: wait for it
                }
            }
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RuntimeException) {
                throw (RuntimeException) e.getCause();
            }
            throw new InternalException("partition call failed: " + e.getCause(), e.getCause());
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Whether this partitions with a built-in's Java function (the native fast path) instead of the module. */
    boolean isNative() {
        return nat != null;
    }

    /** The module's metadata name (spec/abi-v1.md §2.6), "unnamed" if it has none. */
    public String name() {
        return plugin.name();
    }

    /** The module's metadata version. */
    public String version() {
        return plugin.version();
    }

    /** The module's digest: the hex SHA-256 of its bytes, its identity. */
    public String digest() {
        return plugin.digest();
    }

    /** The module's metadata properties ("ancestry", "compatible:kafka-murmur2", ...). */
    public List<String> properties() {
        return plugin.properties();
    }

    /** The config bytes this partitioner was prepared with (a copy). */
    public byte[] config() {
        return config.clone();
    }

    /** "plugin NAME (sha256:0123456789ab)". */
    public String describe() {
        return plugin.describe();
    }

    @Override
    public String toString() {
        return "Partitioner[" + describe() + "]";
    }

    /** Releases the pooled instances. Calls after close fail with IllegalStateException. */
    @Override
    public void close() {
        closed = true;
        drain();
    }

    private void drain() {
        PluginInstance in = idle.getAndSet(null);
        if (in != null) {
            in.close();
        }
        while ((in = pool.pollFirst()) != null) {
            in.close();
        }
    }
}
