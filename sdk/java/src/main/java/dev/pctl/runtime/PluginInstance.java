package dev.pctl.runtime;

import com.dylibso.chicory.runtime.ExportFunction;
import com.dylibso.chicory.runtime.Instance;
import dev.pctl.runtime.PluginException.Kind;

/**
 * One instance of a {@link Plugin}, prepared per spec/abi-v1.md §3, and the calls of §2.3 and
 * §2.4 with the result checks of §4. After a failure ({@link #isBroken()}) it must not be used
 * again: the caller {@linkplain #close() closes} it and opens a fresh instance (§3: the state of
 * a trapped instance may be inconsistent).
 *
 * <p>Not thread-safe: one thread at a time (any thread) calls it.
 */
public final class PluginInstance implements AutoCloseable {
    private final Plugin plugin;
    private final CappedMemory[] memoryHolder; // filled by Chicory's memory factory
    private final Watchdog.Slot slot;
    private Instance instance;
    private ExportFunction fnPartition;
    private ExportFunction fnBatch;
    private int buf;
    private byte[] scratch = new byte[0];
    boolean broken;

    PluginInstance(Plugin plugin, CappedMemory[] memoryHolder, String who) {
        this.plugin = plugin;
        this.memoryHolder = memoryHolder;
        this.slot = new Watchdog.Slot(who);
    }

    CappedMemory[] memoryHolder() {
        return memoryHolder;
    }

    Watchdog.Slot slot() {
        return slot;
    }

    void describe(String who) {
        slot.describe(who);
    }

    /** The module this is an instance of. */
    public Plugin plugin() {
        return plugin;
    }

    /** True after a failed call: the instance must not be used again. */
    public boolean isBroken() {
        return broken;
    }

    /** Releases the instance (its memory goes with it); it must not be used afterwards. */
    @Override
    public void close() {
        broken = true;
        slot.close();
    }

    void attach(Instance instance) {
        this.instance = instance;
        this.fnPartition = instance.export("pctl_partition");
        this.fnBatch = plugin.hasBatch ? instance.export("pctl_partition_batch") : null;
    }

    void setBuffer(int ptr) {
        this.buf = ptr;
    }

    CappedMemory memory() {
        return memoryHolder[0];
    }

    long depth() {
        return plugin.depthOf(instance);
    }

    long fuel() {
        return plugin.fuelOf(instance);
    }

    long memFail() {
        return plugin.memFailOf(instance);
    }

    /** Whether batch calls are available (the module exports {@code pctl_partition_batch}). */
    public boolean hasBatch() {
        return fnBatch != null;
    }

    /** Lifecycle step 5 (§2.5). */
    void configure(byte[] config) throws PluginException {
        String op = "pctl_configure";
        if (config.length > Plugin.MAX_CONFIG) {
            throw refusal(Kind.CONFIG_TOO_LARGE, op, String.format("%d bytes; the limit is %d", config.length, Plugin.MAX_CONFIG));
        }
        if (!plugin.hasConfigure) {
            if (config.length > 0) {
                throw refusal(Kind.CONFIG_UNSUPPORTED, op, String.format(
                        "it does not export pctl_configure, so its config must be empty (got %d bytes); drop the --config flags", config.length));
            }
            return;
        }
        memory().write(buf, config, 0, config.length);
        ExportFunction fn = instance.export(op);
        int code = (int) plugin.guarded(this, op, plugin.options.callLimitNanos, () -> fn.apply(config.length))[0];
        if (code == 0) {
            return;
        }
        broken = true;
        String detail = String.format("config of %d bytes \"%s\"", config.length, printable(config, 80));
        if (code == Plugin.CODE_CONFIG) {
            throw refusal(Kind.CONFIG_REJECTED, op, null,
                    detail + " (PCTL_E_CONFIG); check the --config values against the plugin's documentation");
        }
        throw refusal(Kind.ERROR_CODE, op, Kind.ERROR_CODE.text + " " + Plugin.codeName(code), detail);
    }

    private PluginException refusal(Kind kind, String op, String detail) {
        return refusal(kind, op, null, detail);
    }

    private PluginException refusal(Kind kind, String op, String text, String detail) {
        PluginException e = PluginException.call(kind, plugin.name, plugin.digest, op, text, detail);
        return e.asRefusal();
    }

    private static String printable(byte[] b, int max) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < Math.min(b.length, max); i++) {
            int c = b[i] & 0xff;
            if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
                sb.append((char) c);
            } else if (c == '\n') {
                sb.append("\\n");
            } else {
                sb.append(String.format("\\x%02x", c));
            }
        }
        return sb.toString();
    }

    /**
     * One key (§2.3): the partition of {@code key[off, off+len)} in {@code [0, n)}. The caller
     * checks {@code 1 <= n} and {@code len <= PCTL_MAX_KEY}.
     */
    public int partition(byte[] key, int off, int len, int n) throws PluginException {
        memory().write(buf, key, off, len);
        long[] r = plugin.guarded(this, "pctl_partition", plugin.options.callLimitNanos, () -> fnPartition.apply(len, n));
        int p = (int) r[0];
        if (p >= 0 && p < n) {
            return p;
        }
        throw resultError("pctl_partition", p, n, -1);
    }

    /**
     * A batch (§2.4): keys {@code i = arena[ends[i-1], ends[i])} ({@code ends[-1] = 0}) for
     * {@code i < count}; the caller guarantees {@code 1 <= count <= MAX_BATCH_KEYS} and
     * {@code 4*count + sum(len) <= BUFFER_BYTES}. Results go to {@code out[0, count)}.
     */
    public void batch(byte[] arena, int[] ends, int count, int n, int[] out) throws PluginException {
        int keyBytes = ends[count - 1];
        int size = 4 * count + keyBytes;
        if (scratch.length < size) {
            scratch = new byte[Math.max(size, Math.min(2 * scratch.length, Plugin.BUFFER_BYTES))];
        }
        int prev = 0;
        for (int i = 0; i < count; i++) {
            int len = ends[i] - prev;
            prev = ends[i];
            scratch[4 * i] = (byte) len;
            scratch[4 * i + 1] = (byte) (len >>> 8);
            scratch[4 * i + 2] = (byte) (len >>> 16);
            scratch[4 * i + 3] = (byte) (len >>> 24);
        }
        System.arraycopy(arena, 0, scratch, 4 * count, keyBytes);
        memory().write(buf, scratch, 0, size);
        long[] r = plugin.guarded(this, "pctl_partition_batch", plugin.options.callLimitNanos, () -> fnBatch.apply(count, n));
        int status = (int) r[0];
        if (status != 0) {
            throw statusError(status);
        }
        byte[] res = memory().readBytes(buf, 4 * count);
        for (int i = 0; i < count; i++) {
            int p = (res[4 * i] & 0xff) | (res[4 * i + 1] & 0xff) << 8 | (res[4 * i + 2] & 0xff) << 16 | (res[4 * i + 3] & 0xff) << 24;
            if (p < 0 || p >= n) {
                throw resultError("pctl_partition_batch", p, n, i);
            }
            out[i] = p;
        }
    }

    /** §2.4: a batch status other than 0 fails the whole batch (no result is trusted). */
    private PluginException statusError(int status) {
        String op = "pctl_partition_batch";
        String detail = "the whole batch failed";
        if (status > 0) {
            broken = true;
            detail += "; a batch returns 0 or a negative code (spec/abi-v1.md §2.4)";
        } else if (Plugin.codeName(status).startsWith("unknown")) {
            detail += "; treated as PCTL_E_INTERNAL (spec/abi-v1.md §4)";
        }
        return PluginException.call(Kind.ERROR_CODE, plugin.name, plugin.digest, op, Kind.ERROR_CODE.text + " " + Plugin.codeName(status), detail);
    }

    /** §4: a result that is not a partition; index is the key's slot in a batch, or -1. */
    private PluginException resultError(String op, int r, int n, int index) {
        String where = index >= 0 ? "key " + index + " of the batch: " : "";
        if (r >= n) {
            broken = true; // a module that returns garbage may be in a bad state
            return PluginException.call(Kind.OUT_OF_RANGE, plugin.name, plugin.digest, op, null,
                    String.format("%sreturned %d for n=%d; a partition must be in [0, n)", where, r, n));
        }
        String detail = index >= 0 ? "key " + index + " of the batch" : "";
        if (Plugin.codeName(r).startsWith("unknown")) {
            detail = (detail.isEmpty() ? "" : detail + "; ") + "treated as PCTL_E_INTERNAL (spec/abi-v1.md §4)";
        }
        return PluginException.call(Kind.ERROR_CODE, plugin.name, plugin.digest, op, Kind.ERROR_CODE.text + " " + Plugin.codeName(r), detail);
    }
}
