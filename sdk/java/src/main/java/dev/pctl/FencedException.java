package dev.pctl;

/** The epoch was fenced: a newer epoch exists. Code {@code fenced} (spec/protocol.md §3). */
public class FencedException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public FencedException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public FencedException(String message, Throwable cause) {
        this(message, null, cause);
    }

    FencedException(String message, String detail, Throwable cause) {
        super(ErrorCode.FENCED, message, detail, cause);
    }
}
