package dev.pctl;

/**
 * A commit could not be written because the partition is no longer this member's: taken over
 * after its lease expired, revoked by a rebalance, or reset by a seek. Its records not yet
 * committed will be delivered again, in order, by its next owner. Code {@code conflict}.
 */
public final class CommitFailedException extends ConflictException {
    private static final long serialVersionUID = 1L;

    CommitFailedException(String message) {
        super(message);
    }
}
