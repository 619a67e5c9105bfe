package dev.pctl;

import dev.pctl.runtime.PluginException;

/**
 * Code {@code plugin_rejected} (spec/protocol.md §3): a module that cannot be used. From the
 * broker, a module that failed conformance ({@link #detail()} holds the report); from the SDK, a
 * module that the runtime refused to load (not WebAssembly, a forbidden import, a missing export,
 * an unsupported feature, ...), a config the plugin rejected, or bytes whose digest is not the one
 * asked for. The message names the plugin.
 */
public class PluginRejectedException extends PctlException {
    private static final long serialVersionUID = 1L;

    private final String plugin;
    private final String digest;
    private final PluginException.Kind kind;

    /** An error with this message. */
    public PluginRejectedException(String message) {
        this(message, null, null, null, null, null);
    }

    PluginRejectedException(String message, String plugin, String digest, PluginException.Kind kind, String detail, Throwable cause) {
        super(ErrorCode.PLUGIN_REJECTED, message, detail, cause);
        this.plugin = plugin;
        this.digest = digest;
        this.kind = kind;
    }

    /** The plugin's name (its metadata name, or where it came from), or null if unknown. */
    public String plugin() {
        return plugin;
    }

    /** The module's digest (hex SHA-256), or null if unknown. */
    public String digest() {
        return digest;
    }

    /** What the runtime found wrong, or null when the broker rejected the module. */
    public PluginException.Kind kind() {
        return kind;
    }

    static PluginRejectedException of(PluginException e, String plugin, String digest) {
        return new PluginRejectedException(e.getMessage(), plugin, digest, e.kind(), null, e);
    }
}
