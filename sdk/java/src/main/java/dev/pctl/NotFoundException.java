package dev.pctl;

/** No such topic or plugin. Code {@code not_found} (spec/protocol.md §3). */
public class NotFoundException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public NotFoundException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public NotFoundException(String message, Throwable cause) {
        this(message, null, cause);
    }

    NotFoundException(String message, String detail, Throwable cause) {
        super(ErrorCode.NOT_FOUND, message, detail, cause);
    }
}
