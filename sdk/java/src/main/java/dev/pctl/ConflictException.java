package dev.pctl;

/** A compare-and-set lost to another change; read again and retry. Code {@code conflict} (spec/protocol.md §3). */
public class ConflictException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public ConflictException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public ConflictException(String message, Throwable cause) {
        this(message, null, cause);
    }

    ConflictException(String message, String detail, Throwable cause) {
        super(ErrorCode.CONFLICT, message, detail, cause);
    }
}
