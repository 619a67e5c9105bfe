package dev.pctl;

import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;

/**
 * The KV operations consumer groups need, on the group bucket's stream directly (spec/protocol.md
 * §6, §8.2): reads are direct gets by last subject with the subject in the request subject (what a
 * credential scoped to one group allows); writes are JetStream publishes, compare-and-set with
 * {@code Nats-Expected-Last-Subject-Sequence}. Internal.
 */
final class GroupKv {
    static final String BUCKET = "pctl-groups";
    static final String STREAM = "KV_" + BUCKET;
    static final String PREFIX = "$KV." + BUCKET + ".";

    private final PctlClient c;
    private final Duration timeout;

    GroupKv(PctlClient c, Duration timeout) {
        this.c = c;
        this.timeout = timeout;
    }

    /** A compare-and-set lost: the key changed since the revision given. */
    static final class Conflict extends Exception {
        private static final long serialVersionUID = 1L;

        Conflict(String key) {
            super(key + " changed (compare-and-set lost)");
        }
    }

    /** A key's latest entry (a delete marker too). */
    record Entry(String key, byte[] value, long revision, String op) {
        boolean deleted() {
            return "DEL".equals(op) || "PURGE".equals(op);
        }
    }

    /** The key's latest entry, or null if it has none. */
    Entry get(String key) {
        String subject = "$JS.API.DIRECT.GET." + STREAM + "." + PREFIX + key;
        // On the raw connection: the entry's headers are whatever its writer put there.
        RawConn.Msg m = c.raw().request(subject, new byte[0], timeout);
        int status = m.status();
        if (status != 0) {
            if (status == 404) {
                return null;
            }
            throw new UnavailableException("read " + key + " of the group state: status " + status + " " + m.statusDescription());
        }
        String seq = m.header("Nats-Sequence");
        long rev;
        try {
            rev = seq == null ? 0 : Long.parseLong(seq.trim());
        } catch (NumberFormatException e) {
            rev = 0;
        }
        if (rev == 0) {
            throw new UnavailableException("read " + key + " of the group state: a direct get answer without Nats-Sequence");
        }
        String op = m.header("KV-Operation");
        return new Entry(key, m.data() == null ? new byte[0] : m.data(), rev, op == null ? "" : op.trim());
    }

    private long publish(String key, byte[] value, Headers h, Duration t) throws Conflict {
        try {
            Map<String, Object> r = JsApi.request(c, PREFIX + key, h, value, t);
            return JsApi.num(r.get("seq"));
        } catch (JsApi.JsError e) {
            if (e.errCode == JsApi.WRONG_LAST_SEQ) {
                throw new Conflict(key);
            }
            throw new UnavailableException("write " + key + " of the group state: " + e.getMessage());
        }
    }

    long put(String key, byte[] value, Duration t) {
        try {
            return publish(key, value, null, t);
        } catch (Conflict e) {
            throw new InternalException("an unconditional write conflicted: " + e.getMessage());
        }
    }

    /** Compare-and-set: writes only if the key's latest revision is {@code revision}. */
    long update(String key, byte[] value, long revision) throws Conflict {
        Headers h = new Headers();
        h.put("Nats-Expected-Last-Subject-Sequence", Long.toString(revision));
        return publish(key, value, h, timeout);
    }

    /** Writes only if the key does not exist (or was deleted). */
    long create(String key, byte[] value) throws Conflict {
        try {
            return update(key, value, 0);
        } catch (Conflict e) {
            Entry en = get(key);
            if (en != null && en.deleted()) {
                return update(key, value, en.revision());
            }
            throw e;
        }
    }

    void delete(String key, Duration t) {
        Headers h = new Headers();
        h.put("KV-Operation", "DEL");
        try {
            publish(key, new byte[0], h, t);
        } catch (Conflict e) {
            throw new InternalException("a delete conflicted: " + e.getMessage());
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
