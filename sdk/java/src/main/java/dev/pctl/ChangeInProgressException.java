package dev.pctl;

/** Another epoch change of the topic is in progress. Code {@code change_in_progress} (spec/protocol.md §3). */
public class ChangeInProgressException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public ChangeInProgressException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public ChangeInProgressException(String message, Throwable cause) {
        this(message, null, cause);
    }

    ChangeInProgressException(String message, String detail, Throwable cause) {
        super(ErrorCode.CHANGE_IN_PROGRESS, message, detail, cause);
    }
}
