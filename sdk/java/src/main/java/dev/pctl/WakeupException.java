package dev.pctl;

/**
 * Thrown by a {@link Consumer} call that was blocked (or was about to block) when another thread
 * called {@link Consumer#wakeup()}: the way to interrupt a poll loop from outside, as with Kafka's
 * consumer. Not an error of the broker: nothing was lost, the consumer may be used again (or
 * closed). Code {@code unavailable}.
 */
public final class WakeupException extends PctlException {
    private static final long serialVersionUID = 1L;

    WakeupException() {
        super(ErrorCode.UNAVAILABLE, "woken up by Consumer.wakeup()");
    }
}
