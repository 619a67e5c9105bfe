package dev.pctl;

/** The broker is unreachable or not ready, or the topic is being created or deleted: retry later. Code {@code unavailable} (spec/protocol.md §3). */
public class UnavailableException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public UnavailableException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public UnavailableException(String message, Throwable cause) {
        this(message, null, cause);
    }

    UnavailableException(String message, String detail, Throwable cause) {
        super(ErrorCode.UNAVAILABLE, message, detail, cause);
    }
}
