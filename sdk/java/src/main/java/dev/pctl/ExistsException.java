package dev.pctl;

/** The topic or plugin already exists. Code {@code exists} (spec/protocol.md §3). */
public class ExistsException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public ExistsException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public ExistsException(String message, Throwable cause) {
        this(message, null, cause);
    }

    ExistsException(String message, String detail, Throwable cause) {
        super(ErrorCode.EXISTS, message, detail, cause);
    }
}
