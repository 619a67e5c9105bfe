package dev.pctl;

/** The plugin is still used by a topic. Code {@code in_use} (spec/protocol.md §3). */
public class InUseException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public InUseException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public InUseException(String message, Throwable cause) {
        this(message, null, cause);
    }

    InUseException(String message, String detail, Throwable cause) {
        super(ErrorCode.IN_USE, message, detail, cause);
    }
}
