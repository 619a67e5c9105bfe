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
 * @param assignments sticky groups: the assignment records this member wrote as the group's leader (§6.2.1)
 * @param moved the fraction of keys that changed member at the last record it wrote (§6.2.2), or null before one
 * @param movedModulo the same fraction had the group used modulo, or null
 */
public record ConsumerStats(long delivered, long gated, long totalWaitNanos, long maxWaitNanos, long commits, long lost, long resets,
        long misplaced, long readerRecoveries, long assignments, Double moved, Double movedModulo) {}
