package dev.pctl.runtime;

/**
 * Why a module was refused, or why a call into it failed. The message names the module (the
 * file at load, the metadata name and digest at run time), the kind of failure in the words of
 * the Go host's sentinel errors (runtime/errors.go), and what exactly happened.
 *
 * <p>{@link #atLoad()} tells a refusal (the module, or its config, cannot be used: loading it
 * again will not help) from a failed call (the instance is discarded; a later call runs on a
 * fresh one).
 */
public final class PluginException extends Exception {
    private static final long serialVersionUID = 1L;

    /** Kinds of failure; the text is the same as the Go runtime's sentinel for that kind. */
    public enum Kind {
        NOT_WASM("not a WebAssembly module"),
        TOO_LARGE("module too large"),
        INVALID_MODULE("invalid WebAssembly module"),
        UNSUPPORTED_FEATURE("unsupported WebAssembly feature"),
        MISSING_EXPORT("missing export"),
        BAD_SIGNATURE("export has the wrong signature"),
        FORBIDDEN_IMPORT("forbidden import"),
        UNSUPPORTED_ABI("unsupported ABI version"),
        BAD_METADATA("invalid plugin metadata"),
        BAD_BUFFER("plugin did not provide a usable key buffer"),
        CONFIG_REJECTED("plugin rejected its configuration"),
        CONFIG_UNSUPPORTED("plugin takes no configuration"),
        CONFIG_TOO_LARGE("configuration too large"),
        TIME_LIMIT("time limit exceeded"),
        MEMORY_LIMIT("memory limit exceeded"),
        TABLE_LIMIT("table limit exceeded"),
        CALL_DEPTH("call stack exhausted"),
        TRAP("plugin trapped"),
        EXIT("plugin exited"),
        OUT_OF_RANGE("plugin returned a partition out of range"),
        ERROR_CODE("plugin returned an error code"),
        /** The calling thread was interrupted (not by the time limit) while the module ran. */
        INTERRUPTED("call interrupted");

        final String text;

        Kind(String text) {
            this.text = text;
        }

        /** The phrase that names this kind in messages (the Go runtime's words). */
        public String text() {
            return text;
        }
    }

    final Kind kind;
    /** True when the module was refused while loading (exit status 2), false for a failed call (1). */
    final boolean atLoad;
    /** A {@link Kind#CALL_DEPTH} failure caused by the JVM's own stack, below the ABI's 1000 frames. */
    final boolean engineStack;

    private PluginException(Kind kind, boolean atLoad, String message) {
        this(kind, atLoad, false, message);
    }

    private PluginException(Kind kind, boolean atLoad, boolean engineStack, String message) {
        super(message);
        this.kind = kind;
        this.atLoad = atLoad;
        this.engineStack = engineStack;
    }

    /** What went wrong. */
    public Kind kind() {
        return kind;
    }

    /** True when the module or its config was refused (at load or while preparing an instance). */
    public boolean atLoad() {
        return atLoad;
    }

    /**
     * True when a call ran out of the calling thread's JVM stack before it reached the ABI's
     * call-depth limit: the same call on a thread with a larger stack may succeed (the SDK
     * retries it on one).
     */
    public boolean engineStackOverflow() {
        return engineStack;
    }

    /** A call that overflowed the JVM stack below the ABI's depth limit. */
    static PluginException engineStack(String name, String digest, String op, String detail) {
        PluginException e = call(Kind.CALL_DEPTH, name, digest, op, null, detail);
        return new PluginException(e.kind, false, true, e.getMessage());
    }

    /** A module refused at load: "FILE (sha256:0123456789ab): KIND: detail". */
    static PluginException load(Kind kind, String who, String digest, String detail) {
        StringBuilder sb = new StringBuilder(who);
        if (digest != null) {
            sb.append(" (sha256:").append(Plugin.shortDigest(digest)).append(')');
        }
        sb.append(": ").append(kind.text);
        if (detail != null && !detail.isEmpty()) {
            sb.append(": ").append(detail);
        }
        return new PluginException(kind, true, sb.toString());
    }

    /** A failed call: "plugin NAME (sha256:0123456789ab): OP: KIND: detail". */
    static PluginException call(Kind kind, String name, String digest, String op, String kindText, String detail) {
        StringBuilder sb = new StringBuilder("plugin ").append(name);
        sb.append(" (sha256:").append(Plugin.shortDigest(digest)).append("): ").append(op).append(": ");
        sb.append(kindText != null ? kindText : kind.text);
        if (detail != null && !detail.isEmpty()) {
            sb.append(": ").append(detail);
        }
        return new PluginException(kind, false, sb.toString());
    }

    /** The same failure as a refusal at load (a call made while loading the module failed). */
    PluginException asLoad(String who, String digest) {
        String msg = getMessage();
        return new PluginException(kind, true, who + " (sha256:" + Plugin.shortDigest(digest) + "): while loading: " + msg);
    }

    /** The same failure as a refusal (exit status 2): a config the plugin cannot take. */
    PluginException asRefusal() {
        return new PluginException(kind, true, getMessage());
    }

    /** The same failure, with context added in front of the detail (such as the key's line). */
    public PluginException withContext(String context) {
        return new PluginException(kind, atLoad, engineStack, getMessage() + " (" + context + ")");
    }

    /** The conformance host's exit status for this failure: 2 for a refusal, 1 for a failed call. */
    public int exitStatus() {
        return atLoad ? 2 : 1;
    }
}
