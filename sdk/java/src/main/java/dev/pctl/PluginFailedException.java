package dev.pctl;

import dev.pctl.runtime.PluginException;

/**
 * Code {@code plugin_failed} (spec/protocol.md §3): a call into a partitioner module failed —
 * it trapped, ran out of time, memory or stack, exited, or returned an error code or a partition
 * out of range (spec/abi-v1.md §4, §7). The record that needed the partition is not produced. The
 * message names the plugin (metadata name and digest) and what went wrong.
 */
public class PluginFailedException extends PctlException {
    private static final long serialVersionUID = 1L;

    private final String plugin;
    private final String digest;
    private final PluginException.Kind kind;

    /** An error with this message. */
    public PluginFailedException(String message) {
        this(message, null, null, null, null, null);
    }

    PluginFailedException(String message, String plugin, String digest, PluginException.Kind kind, String detail, Throwable cause) {
        super(ErrorCode.PLUGIN_FAILED, message, detail, cause);
        this.plugin = plugin;
        this.digest = digest;
        this.kind = kind;
    }

    /** The plugin's metadata name, or null if unknown (a broker-side failure). */
    public String plugin() {
        return plugin;
    }

    /** The module's digest (hex SHA-256), or null if unknown. */
    public String digest() {
        return digest;
    }

    /** What went wrong (a trap, the time limit, ...), or null for a broker-side failure. */
    public PluginException.Kind kind() {
        return kind;
    }

    static PluginFailedException of(PluginException e, String plugin, String digest) {
        return new PluginFailedException(e.getMessage(), plugin, digest, e.kind(), null, e);
    }
}
