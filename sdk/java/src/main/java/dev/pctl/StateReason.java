package dev.pctl;

/** Why keys are handed over (spec/protocol.md §6.9): see {@link StateHandler}. */
public enum StateReason {
    /** The member is about to deliver a record of a key it does not hold ({@link StateHandler#load}). */
    KEY_ARRIVES,
    /** The member gives the partition up, or closes, or follows a seek ({@link StateHandler#flush}). */
    PARTITION_REVOKED,
    /**
     * Keys leave the partition at the end of epoch {@link KeySet#fromEpoch()} for partitions of
     * {@link KeySet#toEpoch()} that other members own ({@link StateHandler#flush}).
     */
    KEYS_REVOKED
}
