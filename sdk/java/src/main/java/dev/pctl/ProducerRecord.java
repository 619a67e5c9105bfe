package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * One record to produce: a value and, for a keyed record, a key; optionally application headers
 * and a timestamp (spec/protocol.md §5.3). A record with a key (the empty key included: it is a
 * key like any other) goes to the partition the topic's partitioner gives it, and records with the
 * same key are delivered in the order they were sent. A keyless record ({@link #keyless}) never
 * reaches the partitioner: the producer spreads keyless records over the partitions (round robin)
 * and promises no order for them.
 *
 * <pre>{@code
 * ProducerRecord r = ProducerRecord.keyed("user-1", "created")
 *         .withHeader("trace-id", "4bf92f35")
 *         .withHeader("tag", "a").withHeader("tag", "b")   // several values of one name keep their order
 *         .withTimestamp(Instant.parse("2026-01-02T15:04:05Z"));
 * }</pre>
 *
 * <p>Immutable: the {@code with...} methods return a new record. They refuse (with {@link
 * BadRequestException}) what §5.3 forbids, before anything is sent: a header name that is not 1 to
 * 128 of {@code A-Z a-z 0-9 _ . -} or that starts with {@code Pctl-} or {@code Nats-} (in any letter
 * case), a value with a control character or leading or trailing spaces, more than 65536 bytes of
 * application headers, a timestamp outside {@code [0, 2^53)} ms.
 */
public final class ProducerRecord {
    /** Most bytes of application headers a record carries, as {@code <name>: <value>\r\n} lines. */
    public static final int MAX_HEADER_BYTES = 65536;
    /** The largest timestamp, in unix milliseconds: {@code 2^53 - 1}. */
    public static final long MAX_TIMESTAMP = (1L << 53) - 1;

    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_.-]{1,128}");

    private final byte[] key;
    private final byte[] value;
    private final List<String[]> headers; // (name, value) in order
    private final int headerBytes;
    private final long timestamp; // -1: none given (the producer stamps the send time)
    private final boolean tombstone;

    private ProducerRecord(byte[] key, byte[] value, List<String[]> headers, int headerBytes, long timestamp) {
        this(key, value, headers, headerBytes, timestamp, false);
    }

    private ProducerRecord(byte[] key, byte[] value, List<String[]> headers, int headerBytes, long timestamp, boolean tombstone) {
        this.tombstone = tombstone;
        this.key = key;
        this.value = value == null ? new byte[0] : value;
        this.headers = headers;
        this.headerBytes = headerBytes;
        this.timestamp = timestamp;
    }

    /** A keyed record; {@code key} may be empty but not null (use {@link #keyless} for no key). */
    public static ProducerRecord keyed(byte[] key, byte[] value) {
        if (key == null) {
            throw new IllegalArgumentException("a keyed record needs a key; use ProducerRecord.keyless(value) for a record without one");
        }
        return new ProducerRecord(key, value, List.of(), 0, -1);
    }

    /** A keyed record with a UTF-8 key and value. */
    public static ProducerRecord keyed(String key, String value) {
        return keyed(key.getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * A tombstone: a record without a value that deletes its key (spec/protocol.md §10.2). On a
     * compacted topic the key's value is gone at once, and the tombstone itself after the topic's
     * delete retention; consumers deliver it flagged ({@link ConsumerRecord#tombstone()}).
     */
    public static ProducerRecord tombstone(byte[] key) {
        if (key == null) {
            throw new BadRequestException("a tombstone deletes a key: it needs one");
        }
        return new ProducerRecord(key, new byte[0], List.of(), 0, -1, true);
    }

    /** A tombstone of a UTF-8 key. */
    public static ProducerRecord tombstone(String key) {
        return tombstone(key.getBytes(StandardCharsets.UTF_8));
    }

    /** A keyless record: no partitioner, no order promised. */
    public static ProducerRecord keyless(byte[] value) {
        return new ProducerRecord(null, value, List.of(), 0, -1);
    }

    /** A keyless record with a UTF-8 value. */
    public static ProducerRecord keyless(String value) {
        return keyless(value.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * This record with one more application header value (after the ones it has: values of one
     * name keep their order).
     *
     * @throws BadRequestException for a reserved or malformed name, a malformed value, or more than
     *     {@link #MAX_HEADER_BYTES} of headers
     */
    public ProducerRecord withHeader(String name, String value) {
        checkName(name);
        checkValue(name, value);
        int size = headerBytes + name.length() + 4 + value.getBytes(StandardCharsets.UTF_8).length;
        if (size > MAX_HEADER_BYTES) {
            throw new BadRequestException(String.format(
                    "application headers of %d bytes; a record carries at most %d bytes of them (spec/protocol.md §5.3)", size, MAX_HEADER_BYTES));
        }
        List<String[]> hs = new ArrayList<>(headers.size() + 1);
        hs.addAll(headers);
        hs.add(new String[] {name, value});
        return new ProducerRecord(key, this.value, Collections.unmodifiableList(hs), size, timestamp, tombstone);
    }

    /** This record with these headers added, name by name, each name's values in order. */
    public ProducerRecord withHeaders(Map<String, ? extends Collection<String>> headers) {
        ProducerRecord r = this;
        for (Map.Entry<String, ? extends Collection<String>> e : headers.entrySet()) {
            for (String v : e.getValue()) {
                r = r.withHeader(e.getKey(), v);
            }
        }
        return r;
    }

    /**
     * This record with a timestamp (its {@code Pctl-Time}, Kafka's CreateTime), in unix
     * milliseconds. Without one, the producer stamps the time {@code send} was called.
     *
     * @throws BadRequestException outside {@code [0, 2^53)}
     */
    public ProducerRecord withTimestamp(long unixMillis) {
        if (unixMillis < 0 || unixMillis > MAX_TIMESTAMP) {
            throw new BadRequestException("timestamp " + unixMillis + " ms is outside [0, 2^53) ms (spec/protocol.md §5.3)");
        }
        return new ProducerRecord(key, value, headers, headerBytes, unixMillis, tombstone);
    }

    /** {@link #withTimestamp(long)} of an instant (millisecond precision). */
    public ProducerRecord withTimestamp(Instant t) {
        long ms;
        try {
            ms = t.toEpochMilli();
        } catch (ArithmeticException e) {
            throw new BadRequestException("timestamp " + t + " is outside [0, 2^53) ms (spec/protocol.md §5.3)");
        }
        return withTimestamp(ms);
    }

    private static void checkName(String name) {
        if (name == null || !NAME.matcher(name).matches()) {
            throw new BadRequestException("header name " + (name == null ? "null" : "\"" + name + "\"")
                    + ": 1 to 128 characters of A-Z a-z 0-9 _ . - (spec/protocol.md §5.3)");
        }
        String low = name.toLowerCase(Locale.ROOT);
        if (low.startsWith("pctl-") || low.startsWith("nats-")) {
            throw new BadRequestException("header name \"" + name
                    + "\" is reserved: names starting with Pctl- or Nats- belong to pctl and JetStream; choose another name");
        }
    }

    private static void checkValue(String name, String value) {
        if (value == null) {
            throw new BadRequestException("header " + name + ": the value is null; give a string (possibly empty)");
        }
        for (int i = 0; i < value.length(); i++) {
            char ch = value.charAt(i);
            if (ch < 0x20 || ch == 0x7f) {
                throw new BadRequestException("header " + name + ": value \"" + abbrev(value)
                        + "\" has a control character, which NATS headers cannot carry (encode binary data, e.g. as base64)");
            }
            if (Character.isSurrogate(ch) && !(Character.isHighSurrogate(ch) && i + 1 < value.length() && Character.isLowSurrogate(value.charAt(i + 1)))
                    && !(Character.isLowSurrogate(ch) && i > 0 && Character.isHighSurrogate(value.charAt(i - 1)))) {
                throw new BadRequestException("header " + name + ": value \"" + abbrev(value) + "\" is not valid UTF-16 text (a lone surrogate)");
            }
        }
        if (!value.isEmpty() && (value.charAt(0) == ' ' || value.charAt(value.length() - 1) == ' ')) {
            throw new BadRequestException("header " + name + ": value \"" + abbrev(value)
                    + "\" has leading/trailing spaces, which NATS clients trim; remove them");
        }
    }

    private static String abbrev(String v) {
        return v.length() > 40 ? v.substring(0, 40) + "..." : v;
    }

    /** The key, or null for a keyless record. The array is the record's own: do not change it. */
    public byte[] key() {
        return key;
    }

    /** The value. The array is the record's own: do not change it. */
    public byte[] value() {
        return value;
    }

    /** Whether the record is a tombstone (see {@link #tombstone(byte[])}). */
    public boolean isTombstone() {
        return tombstone;
    }

    /** Whether the record has a key (possibly empty). */
    public boolean hasKey() {
        return key != null;
    }

    /** The application headers as (name, value) pairs, in order (unmodifiable; the arrays are the record's own). */
    public List<String[]> headers() {
        return headers;
    }

    /** The size of the application headers as {@code <name>: <value>\r\n} lines. */
    public int headerBytes() {
        return headerBytes;
    }

    /** The timestamp given, unix milliseconds, or -1 for none (the producer stamps the send time). */
    public long timestamp() {
        return timestamp;
    }
}
