package dev.pctl;

/**
 * Code {@code internal} (spec/protocol.md §3): a bug or an unexpected state, including a reply
 * that does not follow the protocol, or an error code this SDK does not know ({@link #wireCode()}
 * then names it).
 */
public class InternalException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public InternalException(String message) {
        this(message, null);
    }

    /** An error with this message and cause. */
    public InternalException(String message, Throwable cause) {
        this("internal", message, null, cause);
    }

    InternalException(String wireCode, String message, String detail, Throwable cause) {
        super(ErrorCode.INTERNAL, wireCode, message, detail, cause);
    }
}
