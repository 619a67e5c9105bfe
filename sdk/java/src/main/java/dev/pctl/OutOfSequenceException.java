package dev.pctl;

/**
 * The produce service refused a request because one before it (same producer) never arrived, or
 * because it does not know the producer on its own subject (spec/protocol.md §5.2): re-send every
 * unacknowledged record in order. Code {@code out_of_sequence} (spec/protocol.md §3).
 */
public class OutOfSequenceException extends PctlException {
    private static final long serialVersionUID = 1L;

    /** An error with this message. */
    public OutOfSequenceException(String message) {
        this(message, null, null);
    }

    /** An error with this message and cause. */
    public OutOfSequenceException(String message, Throwable cause) {
        this(message, null, cause);
    }

    OutOfSequenceException(String message, String detail, Throwable cause) {
        super(ErrorCode.OUT_OF_SEQUENCE, message, detail, cause);
    }
}
