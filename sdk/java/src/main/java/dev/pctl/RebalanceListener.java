package dev.pctl;

import java.util.Collection;

/**
 * Callbacks of a consumer-group member, like Kafka's {@code ConsumerRebalanceListener} plus the
 * key-level handover of KIP-253 (spec/protocol.md §6.5). Every method runs on the thread that
 * calls {@link Consumer#poll} (or {@link Consumer#close}, {@link Consumer#seekToBeginning} ...),
 * between two records, never concurrently with the application's processing; it may call {@link
 * Consumer#commit()}. Override what you need: every method does nothing by default, except {@link
 * #onPartitionsLost}, which calls {@link #onPartitionsRevoked}.
 */
public interface RebalanceListener {
    /** The member now owns these partitions (it reads them from the group's committed position). */
    default void onPartitionsAssigned(Collection<Integer> partitions) {}

    /**
     * The member gives these partitions up: a rebalance assigns them to another member, a seek
     * resets them, or the member closes. Runs before the final commit, so a manual committer can
     * commit what it processed here.
     */
    default void onPartitionsRevoked(Collection<Integer> partitions) {}

    /**
     * Another member took these partitions over (this member's lease had expired, or a seek reset
     * them first): a commit of them fails now, and their records not committed are delivered
     * again by their new owner.
     */
    default void onPartitionsLost(Collection<Integer> partitions) {
        onPartitionsRevoked(partitions);
    }

    /**
     * Keys leave {@code change.partition()} at an epoch change: every record of {@code
     * change.fromEpoch()} of that partition was delivered and acknowledged; no moved key's record of
     * the next epoch is delivered by the group before this returns.
     */
    default void onKeysRevoked(KeyChange change) {}

    /**
     * Keys arrive in {@code change.partition()} from {@code change.parent()}: runs before the first
     * record of such a key is delivered (after the parent's owner ran {@link #onKeysRevoked}). The
     * member only works out a record's previous partition (one partitioner call per record of a
     * new epoch) when this method is overridden.
     */
    default void onKeysAssigned(KeyChange change) {}
}
