package dev.pctl;

import java.util.function.Predicate;

/**
 * Keys that move between partitions at an epoch change: KIP-253's key-level rebalance listener
 * (spec/protocol.md §6.5).
 *
 * <p>{@link RebalanceListener#onKeysRevoked} gets one on the member that owns the old {@code
 * partition}, after it delivered (and the application acknowledged) all its records of {@code
 * fromEpoch}, before the group can deliver any moved key's record of {@code toEpoch}. {@link
 * RebalanceListener#onKeysAssigned} gets one on the member that owns the new {@code partition}
 * before it delivers the first record of a key that moved there from {@code parent}.
 *
 * @param topic the topic
 * @param fromEpoch the epoch the keys leave
 * @param toEpoch the epoch they arrive in
 * @param partition the partition whose keys leave (revoked) or arrive (assigned)
 * @param parent for keys assigned, the old partition they come from; for keys revoked, {@code partition}
 * @param moved whether a key is one of the moving keys (runs the two epochs' partitioners)
 */
public record KeyChange(String topic, int fromEpoch, int toEpoch, int partition, int parent, Predicate<byte[]> moved) {
    /** Whether {@code key} is one of the keys that move. */
    public boolean isMoved(byte[] key) {
        return moved.test(key);
    }

    @Override
    public String toString() {
        return "KeyChange[" + topic + " epoch " + fromEpoch + "->" + toEpoch + ", partition " + partition + ", parent " + parent + "]";
    }
}
