package dev.pctl;

/**
 * A stateful processor's per-key state, as a consumer hands it over between the members of its
 * group (spec/protocol.md §6.9; {@link ConsumerOptions.Builder#state}). The consumer calls it on
 * the thread that calls {@link Consumer#poll} (or {@link Consumer#close}, a seek ...), one call at
 * a time, between two records, never while the application processes a record of a key in the
 * set:
 *
 * <ul>
 *   <li>{@link #load} before the member delivers a record of a key it does not hold (the set: that
 *       key), after the record passed its epoch gate (§6.5): every older record of the key, in any
 *       partition, is then committed by the group, so whoever applied it has made its effect
 *       durable. It replaces what the processor has for the key with the durable state.
 *   <li>{@link #flush} when keys leave the member: after a partition's reading stopped and before
 *       it is released (the keys held for it), and at keys revoked for the keys that move to a
 *       partition another member owns, before the member commits past the boundary. When it
 *       returns their state must be durable; the processor may drop it.
 * </ul>
 *
 * <p>Keys that move at an epoch change between two partitions this member owns stay held (no
 * flush, no load; with the sticky assignor every key of a linear-hashing expansion). A lost
 * partition's keys are forgotten without a flush (its new owner may already write them); a seek
 * flushes every held key. An exception from either method stops the member ({@link Consumer#poll}
 * throws {@link InternalException} with it as the cause); a partition whose flush failed is not
 * released: its lease expires. A consumer with a state handler cannot disable gating.
 */
public interface StateHandler {
    /** Installs the durable state of the keys in {@code ks} (none for a new key). */
    void load(KeySet ks) throws Exception;

    /** Makes the state of the keys in {@code ks} durable; the processor may then drop it. */
    void flush(KeySet ks) throws Exception;
}
