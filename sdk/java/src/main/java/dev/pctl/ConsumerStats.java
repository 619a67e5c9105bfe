package dev.pctl;

/**
 * What a consumer-group member did, as counted when {@link Consumer#stats()} was called.
 *
 * @param delivered records returned by {@code poll}
 * @param gated records that waited at a gate for a parent partition (spec/protocol.md §6.5)
 * @param totalWaitNanos the time they waited, in all
 * @param maxWaitNanos the longest such wait
 * @param commits positions written to the group state
 * @param lost partitions taken over by another member while this one owned them
 * @param resets group generations (seeks) followed
 * @param misplaced misplaced records read, whatever the policy did with them (§6.8)
 * @param readerRecoveries partition readers that re-created their JetStream consumer (§6.7)
 */
public record ConsumerStats(long delivered, long gated, long totalWaitNanos, long maxWaitNanos, long commits, long lost, long resets,
        long misplaced, long readerRecoveries) {}
