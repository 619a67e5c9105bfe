package dev.pctl;

import java.nio.charset.StandardCharsets;

/**
 * One record to produce: a value and, for a keyed record, a key. A record with a key (the empty
 * key included: it is a key like any other) goes to the partition the topic's partitioner gives
 * it, and records with the same key are delivered in the order they were sent. A keyless record
 * ({@link #keyless}) never reaches the partitioner: the producer spreads keyless records over the
 * partitions (round robin) and promises no order for them.
 */
public final class ProducerRecord {
    private final byte[] key;
    private final byte[] value;

    private ProducerRecord(byte[] key, byte[] value) {
        this.key = key;
        this.value = value == null ? new byte[0] : value;
    }

    /** A keyed record; {@code key} may be empty but not null (use {@link #keyless} for no key). */
    public static ProducerRecord keyed(byte[] key, byte[] value) {
        if (key == null) {
            throw new IllegalArgumentException("a keyed record needs a key; use ProducerRecord.keyless(value) for a record without one");
        }
        return new ProducerRecord(key, value);
    }

    /** A keyed record with a UTF-8 key and value. */
    public static ProducerRecord keyed(String key, String value) {
        return keyed(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
    }

    /** A keyless record: no partitioner, no order promised. */
    public static ProducerRecord keyless(byte[] value) {
        return new ProducerRecord(null, value);
    }

    /** A keyless record with a UTF-8 value. */
    public static ProducerRecord keyless(String value) {
        return keyless(value.getBytes(StandardCharsets.UTF_8));
    }

    /** The key, or null for a keyless record. The array is the record's own: do not change it. */
    public byte[] key() {
        return key;
    }

    /** The value. The array is the record's own: do not change it. */
    public byte[] value() {
        return value;
    }

    /** Whether the record has a key (possibly empty). */
    public boolean hasKey() {
        return key != null;
    }
}
