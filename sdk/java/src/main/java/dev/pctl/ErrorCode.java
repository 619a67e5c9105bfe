package dev.pctl;

import java.util.Locale;

/**
 * The error codes of pctl's broker API (spec/protocol.md §3). A broker's error reply carries one
 * in its {@code Pctl-Error} header and body; the SDK raises the {@link PctlException} subclass of
 * the same code for errors it finds itself, so callers branch the same way on both.
 */
public enum ErrorCode {
    /** A malformed request, a bad name, a record that can never be stored (too large). */
    BAD_REQUEST,
    /** No such topic or plugin. */
    NOT_FOUND,
    /** The topic or plugin already exists. */
    EXISTS,
    /** A compare-and-set lost to another change. */
    CONFLICT,
    /** The plugin is used by a topic. */
    IN_USE,
    /** The broker (or this SDK) refused a module: it fails conformance, or cannot be loaded. */
    PLUGIN_REJECTED,
    /** A call into a module failed (trap, time limit, ...). */
    PLUGIN_FAILED,
    /** The epoch was fenced: a newer epoch exists. */
    FENCED,
    /** Another epoch change is in progress. */
    CHANGE_IN_PROGRESS,
    /** The credentials' role may not do this. */
    PERMISSION,
    /** The broker is unreachable or not ready, or a topic is being created or deleted. */
    UNAVAILABLE,
    /**
     * The produce service refused a request because one before it (same producer) never arrived,
     * or because it does not know the producer on its own subject (§5.2): re-send every
     * unacknowledged record in order.
     */
    OUT_OF_SEQUENCE,
    /** The request or the group needs something this implementation lacks (§6.1). */
    UNSUPPORTED,
    /** A bug or an unexpected state; the message says what. */
    INTERNAL;

    /** The code as it is written on the wire: {@code bad_request}, {@code not_found}, ... */
    public String wire() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The code for a wire string; an unknown code is {@link #INTERNAL}. */
    public static ErrorCode fromWire(String code) {
        if (code != null) {
            for (ErrorCode c : values()) {
                if (c.wire().equals(code)) {
                    return c;
                }
            }
        }
        return INTERNAL;
    }
}
