package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.Map;

/**
 * A record delivered to a consumer-group member.
 *
 * <ul>
 *   <li>{@link #key()}: the key, or null for a keyless record (the empty key is a key);
 *   <li>{@link #headers()}: the application headers, name to values in order (spec/protocol.md
 *       §5.3); {@link #header(String)} gives the first value;
 *   <li>{@link #timestamp()}: unix milliseconds, the producer's {@code Pctl-Time}, else when the
 *       stream stored the record; {@link #storedNanos()}: when the stream stored it;
 *   <li>{@link #partition()}, {@link #epoch()}, {@link #sequence()} (in the partition's stream),
 *       {@link #producer()} and {@link #producerSeq()} (its {@code Pctl-Producer} and {@code
 *       Pctl-Seq}; "" and 0 when absent);
 *   <li>{@link #misplacement()}: set when the record is stored outside its key's partition and the
 *       member delivers such records ({@link MisplacedPolicy#DELIVER}); no order is promised for it.
 * </ul>
 *
 * <p>Immutable; the arrays are the record's own: do not change them.
 */
public final class ConsumerRecord {
    private final String topic;
    private final int partition;
    private final int epoch;
    private final long sequence;
    private final byte[] key;
    private final byte[] value;
    private final Map<String, List<String>> headers;
    private final long timestamp;
    private final long storedNanos;
    private final String producer;
    private final long producerSeq;
    private Misplacement misplacement;
    boolean tombstone;
    Origin backfill;
    final long owner; // which ownership of the partition delivered it (for commit)

    ConsumerRecord(String topic, int partition, int epoch, long sequence, byte[] key, byte[] value, Map<String, List<String>> headers,
            long timestamp, long storedNanos, String producer, long producerSeq, long owner) {
        this.topic = topic;
        this.partition = partition;
        this.epoch = epoch;
        this.sequence = sequence;
        this.key = key;
        this.value = value == null ? new byte[0] : value;
        this.headers = headers;
        this.timestamp = timestamp;
        this.storedNanos = storedNanos;
        this.producer = producer;
        this.producerSeq = producerSeq;
        this.owner = owner;
    }

    void misplaced(Misplacement mp) {
        this.misplacement = mp;
    }

    /** The stored record a backfilled copy copies (spec/protocol.md §10.3): epoch, partition, stream sequence. */
    public record Origin(int epoch, int partition, long sequence) {}

    /**
     * Whether the record is a tombstone: it deletes its key (spec/protocol.md §10.2); its value is
     * then not a value.
     */
    public boolean tombstone() {
        return tombstone;
    }

    /**
     * On a backfilled copy the group delivers (spec/protocol.md §10.4), the record it copies; else
     * null. A group delivers a copy only when it cannot have delivered the original: it started
     * at the current epoch, or the original's epoch was retired.
     */
    public Origin backfill() {
        return backfill;
    }

    /** The topic. */
    public String topic() {
        return topic;
    }

    /** The partition whose stream holds the record. */
    public int partition() {
        return partition;
    }

    /** The epoch the record was produced under (from its subject; 0 if it has none). */
    public int epoch() {
        return epoch;
    }

    /** The record's sequence in its partition's stream. */
    public long sequence() {
        return sequence;
    }

    /** The key, or null for a keyless record. */
    public byte[] key() {
        return key;
    }

    /** Whether the record has a key (possibly empty). */
    public boolean hasKey() {
        return key != null;
    }

    /** The key as UTF-8 text (malformed bytes replaced), or null for a keyless record. */
    public String keyString() {
        return key == null ? null : new String(key, StandardCharsets.UTF_8);
    }

    /** The value. */
    public byte[] value() {
        return value;
    }

    /** The value as UTF-8 text (malformed bytes replaced). */
    public String valueString() {
        return new String(value, StandardCharsets.UTF_8);
    }

    /** The application headers: name to values, in the order they were sent (unmodifiable). */
    public Map<String, List<String>> headers() {
        return headers;
    }

    /** The first value of an application header, or null. */
    public String header(String name) {
        List<String> v = headers.get(name);
        return v == null || v.isEmpty() ? null : v.get(0);
    }

    /** Unix milliseconds: the producer's {@code Pctl-Time} when present and well-formed, else the store time. */
    public long timestamp() {
        return timestamp;
    }

    /** {@link #timestamp()} as an instant. */
    public Instant time() {
        return Instant.ofEpochMilli(timestamp);
    }

    /** When the stream stored the record, unix nanoseconds. */
    public long storedNanos() {
        return storedNanos;
    }

    /** The producer id ({@code Pctl-Producer}), or "". */
    public String producer() {
        return producer;
    }

    /** The record's number in its producer ({@code Pctl-Seq}), or 0. */
    public long producerSeq() {
        return producerSeq;
    }

    /** Why the record is not in its key's partition, or null for a record in its place. */
    public Misplacement misplacement() {
        return misplacement;
    }

    @Override
    public String toString() {
        String v = valueString();
        if (v.length() > 40) {
            v = v.substring(0, 40) + "...";
        }
        return "ConsumerRecord(" + topic + " p" + partition + " e" + epoch + " seq " + sequence + " key " + (key == null ? "keyless" : show(key))
                + " value " + v + (misplacement != null ? " misplaced" : "") + ")";
    }

    /** A key as Go's %q shows bytes: quoted, printable ASCII as it is, the rest escaped. */
    static String show(byte[] b) {
        if (b == null) {
            return "(none)";
        }
        StringBuilder sb = new StringBuilder("\"");
        for (byte x : b) {
            int c = x & 0xff;
            if (c == '"' || c == '\\') {
                sb.append('\\').append((char) c);
            } else if (c >= 0x20 && c < 0x7f) {
                sb.append((char) c);
            } else {
                sb.append(String.format("\\x%02x", c));
            }
        }
        return sb.append('"').toString();
    }
}
