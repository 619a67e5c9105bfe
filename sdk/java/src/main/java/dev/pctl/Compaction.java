package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Compacted topics (spec/protocol.md §10): the key token of a record subject, the subjects of
 * records and batch ends, tombstone TTLs, backfilled copies' origins, and the read-back rule of a
 * batch whose records of one key compact each other. Pure functions.
 */
final class Compaction {
    /** The longest key encoded directly in a key token (§10.1); longer keys go by their SHA-256. */
    static final int MAX_DIRECT_KEY_TOKEN = 128;

    static final String HEADER_TOMBSTONE = "Pctl-Tombstone";
    static final String HEADER_BACKFILL = "Pctl-Backfill";
    static final String HEADER_TTL = "Nats-TTL";

    private static final Base64.Encoder B64URL = Base64.getUrlEncoder().withoutPadding();

    private Compaction() {}

    /**
     * A compacted topic's subject token for a key: "k" + base64url without padding of a key of at
     * most 128 bytes, else "h" + base64url of its SHA-256 (§10.1).
     */
    static String keyToken(byte[] key) {
        if (key.length <= MAX_DIRECT_KEY_TOKEN) {
            return "k" + B64URL.encodeToString(key);
        }
        try {
            return "h" + B64URL.encodeToString(MessageDigest.getInstance("SHA-256").digest(key));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }

    /** The subject of a record of (topic, epoch, partition): with the key's token on a compacted topic. */
    static String recordSubject(String topic, int epoch, int partition, boolean compact, byte[] key) {
        String s = "pctl.data." + topic + "." + epoch + "." + partition;
        return compact ? s + "." + keyToken(key == null ? new byte[0] : key) : s;
    }

    /**
     * Where a fast batch's EOB goes (§10.1): the partition subject, or on a compacted topic that
     * subject with the token "end" (no key token or fence marker's token is "end").
     */
    static String batchEndSubject(String topic, int epoch, int partition, boolean compact) {
        String s = "pctl.data." + topic + "." + epoch + "." + partition;
        return compact ? s + ".end" : s;
    }

    /** The Nats-TTL of a compacted topic's tombstone (§10.2): its delete retention in seconds, at least 1. */
    static String tombstoneTTL(long deleteRetentionMs) {
        return Long.toString(Math.max(deleteRetentionMs / 1000, 1));
    }

    /**
     * A Pctl-Backfill value "epoch/partition/seq" (§10.3) as {epoch, partition, seq}, or null when
     * it is not one (decimal integers, epoch > 0).
     */
    static long[] parseOrigin(String v) {
        if (v == null) {
            return null;
        }
        String[] t = v.split("/", -1);
        if (t.length != 3) {
            return null;
        }
        long[] r = new long[3];
        for (int i = 0; i < 3; i++) {
            if (t[i].isEmpty() || t[i].length() > 19 || !t[i].chars().allMatch(ch -> ch >= '0' && ch <= '9')) {
                return null;
            }
            r[i] = Long.parseLong(t[i]);
        }
        if (r[0] < 1 || r[0] > Integer.MAX_VALUE || r[1] > Integer.MAX_VALUE) {
            return null;
        }
        return r;
    }

    /**
     * A batch read back on a compacted topic (§10.1): a record not found counts as stored when a
     * later record of the same key in the batch was found (storing that one removed it). keys.get(i)
     * is record i's Pctl-Key (null: keyless); found (index to sequence) gets the superseded ones at 0.
     */
    static void supersededInBatch(List<String> keys, int from, Map<Integer, Long> found) {
        Set<String> later = new HashSet<>();
        for (int i = keys.size() - 1; i >= from; i--) {
            String k = keys.get(i);
            if (found.containsKey(i)) {
                if (k != null) {
                    later.add(k);
                }
                continue;
            }
            if (k != null && later.contains(k)) {
                found.put(i, 0L);
            }
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
