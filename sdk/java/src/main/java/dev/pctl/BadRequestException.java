package dev.pctl;

/** A malformed request or record: a bad name, a key over 64 KiB, a record larger than the broker stores, a closed producer. Code {@code bad_request} (spec/protocol.md §3). */
public class BadRequestException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public BadRequestException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public BadRequestException(String message, Throwable cause) {
        this(message, null, cause);
    }

    BadRequestException(String message, String detail, Throwable cause) {
        super(ErrorCode.BAD_REQUEST, message, detail, cause);
    }
}
