package dev.pctl;

/**
 * The request or the group needs something this implementation lacks, for example a consumer group
 * whose assignor it does not implement (spec/protocol.md §6.1). Code {@code unsupported}
 * (spec/protocol.md §3).
 */
public class UnsupportedException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public UnsupportedException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public UnsupportedException(String message, Throwable cause) {
        this(message, null, cause);
    }

    UnsupportedException(String message, String detail, Throwable cause) {
        super(ErrorCode.UNSUPPORTED, message, detail, cause);
    }
}
