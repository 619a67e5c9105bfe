package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The keys of one state handover (spec/protocol.md §6.9): {@link #keys()} (sorted by their bytes,
 * unsigned), the topic, the reason, the partition, and for {@link StateReason#KEYS_REVOKED} the
 * epoch change ({@link #fromEpoch()}, {@link #toEpoch()}; -1 otherwise).
 */
public final class KeySet {
    private final String topic;
    private final StateReason reason;
    private final int partition;
    private final int fromEpoch;
    private final int toEpoch;
    private final List<byte[]> keys;
    private final Set<String> set; // each key's bytes as ISO-8859-1: one char per byte

    KeySet(String topic, StateReason reason, int partition, Collection<String> latin1Keys, int fromEpoch, int toEpoch) {
        this.topic = topic;
        this.reason = reason;
        this.partition = partition;
        this.fromEpoch = fromEpoch;
        this.toEpoch = toEpoch;
        List<String> sorted = new ArrayList<>(latin1Keys);
        Collections.sort(sorted); // chars 0..255 in code order: the bytes' unsigned order
        List<byte[]> ks = new ArrayList<>(sorted.size());
        for (String k : sorted) {
            ks.add(k.getBytes(StandardCharsets.ISO_8859_1));
        }
        this.keys = Collections.unmodifiableList(ks);
        this.set = new HashSet<>(sorted);
    }

    static String id(byte[] key) {
        return new String(key, StandardCharsets.ISO_8859_1);
    }

    /** The topic. */
    public String topic() {
        return topic;
    }

    /** Why the keys are handed over. */
    public StateReason reason() {
        return reason;
    }

    /** The partition the keys are held for (loaded for, or leaving). */
    public int partition() {
        return partition;
    }

    /** For {@link StateReason#KEYS_REVOKED}: the epoch that ended; else -1. */
    public int fromEpoch() {
        return fromEpoch;
    }

    /** For {@link StateReason#KEYS_REVOKED}: the epoch the keys move to; else -1. */
    public int toEpoch() {
        return toEpoch;
    }

    /** The keys (copies are not made: do not change them). */
    public List<byte[]> keys() {
        return keys;
    }

    /** Whether {@code key} is in the set. */
    public boolean contains(byte[] key) {
        return key != null && set.contains(id(key));
    }

    /** The number of keys. */
    public int size() {
        return keys.size();
    }

    @Override
    public String toString() {
        return "KeySet[" + topic + " " + reason + " partition " + partition + (reason == StateReason.KEYS_REVOKED ? " epoch " + fromEpoch + "->" + toEpoch : "")
                + ", " + keys.size() + " keys" + (keys.size() == 1 ? " " + Arrays.toString(keys.get(0)) : "") + "]";
    }
}
