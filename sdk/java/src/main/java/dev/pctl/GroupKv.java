package dev.pctl;

import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * The KV operations consumer groups need, on the group bucket's stream directly (spec/protocol.md
 * §6, §8.2): reads are direct gets by last subject with the subject in the request subject (what a
 * credential scoped to one group allows); writes are JetStream publishes, compare-and-set with
 * {@code Nats-Expected-Last-Subject-Sequence}. Internal.
 */
class GroupKv { // not final: a test's bucket answers a get as a lagging follower does
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
            if (e.errCode == JsApi.WRONG_LAST_SEQ || e.errCode == JsApi.WRONG_LAST_SEQ_CONSTANT) {
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

    /**
     * Writes {@code key} only if {@code guard} (another key) has no message before this write in
     * the stream's order ({@code Nats-Expected-Last-Subject-Sequence-Subject}, nats-server 2.11+):
     * true when stored, false when refused with "wrong last sequence" (the guard exists, or a write
     * of it is in flight). The leader checks it, and every replica again when it applies the
     * write. Other failures throw UnavailableException or PermissionDeniedException.
     */
    boolean putIfAbsent(String key, byte[] value, String guard) {
        Headers h = new Headers();
        h.put("Nats-Expected-Last-Subject-Sequence", "0");
        h.put("Nats-Expected-Last-Subject-Sequence-Subject", PREFIX + guard);
        try {
            publish(key, value, h, timeout);
            return true;
        } catch (Conflict e) {
            return false;
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

    /**
     * The initial values of a watch of {@code pattern} (a key pattern, {@code *} and {@code >}
     * allowed): the latest entry of every matching key, deleted and purged keys left out, by key.
     * They come from one server's state: an ephemeral consumer (deliver last per subject) reads
     * them on the one server that holds it, up to its pending count 0 (spec/protocol.md §6.1,
     * "Reading the group's keys at join"). Throws UnavailableException or
     * PermissionDeniedException.
     */
    Map<String, Entry> initialValues(String pattern) {
        String filter = PREFIX + pattern;
        String name = "pctl_kvw_" + Long.toHexString(ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE);
        Map<String, Object> r;
        try {
            r = JsApi.createEphemeral(c, STREAM, name, filter, Map.of("deliver_policy", "last_per_subject"), 5_000_000_000L, timeout);
        } catch (JsApi.JsError e) {
            throw new UnavailableException("watch " + filter + ": " + e.getMessage());
        }
        Map<String, Entry> vals = new HashMap<>();
        RawConn raw = c.raw();
        int sid = 0;
        try {
            if (JsApi.num(r.get("num_pending")) == 0) {
                return vals;
            }
            LinkedBlockingQueue<RawConn.Msg> q = new LinkedBlockingQueue<>();
            String inbox = raw.newInbox();
            sid = raw.subscribe(inbox, q::add);
            long expires = Math.max(timeout.toNanos() - 100_000_000L, 100_000_000L);
            byte[] pull = utf8("{\"batch\":256,\"expires\":" + expires + "}");
            String next = "$JS.API.CONSUMER.MSG.NEXT." + STREAM + "." + name;
            raw.publish(next, inbox, pull);
            long deadline = System.nanoTime() + timeout.toNanos();
            while (true) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new UnavailableException("the initial values of " + filter + " did not arrive within " + timeout.toMillis() + " ms");
                }
                RawConn.Msg m;
                try {
                    m = q.poll(left, TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new UnavailableException("interrupted while reading " + filter, e);
                }
                if (m == null) {
                    continue;
                }
                int status = m.status();
                if (status == 100) {
                    continue; // a heartbeat
                }
                if (status == 404 || status == 408 || status == 409) {
                    raw.publish(next, inbox, pull); // the pull ended before the last value: again
                    continue;
                }
                if (status != 0) {
                    throw new UnavailableException("watch " + filter + ": status " + status + " " + m.statusDescription());
                }
                long[] ack = ackOf(m.reply(), name);
                if (ack == null) {
                    continue;
                }
                String key = m.subject().substring(PREFIX.length());
                String op = m.header("KV-Operation");
                op = op == null ? "" : op.trim();
                Entry e = new Entry(key, m.data() == null ? new byte[0] : m.data(), ack[0], op);
                if (e.deleted()) {
                    vals.remove(key);
                } else {
                    vals.put(key, e);
                }
                if (ack[1] == 0) {
                    return vals;
                }
            }
        } finally {
            if (sid != 0) {
                raw.unsubscribe(sid);
            }
            try {
                JsApi.request(c, "$JS.API.CONSUMER.DELETE." + STREAM + "." + name, null, new byte[0], Duration.ofSeconds(2));
            } catch (RuntimeException | JsApi.JsError e) {
                // it goes by its inactive threshold anyway
            }
        }
    }

    /**
     * {stream sequence, pending} of a delivery of consumer {@code name}, from its reply subject
     * {@code $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>} or the v2 form
     * with domain and account hash (12 tokens or more); null for anything else.
     */
    static long[] ackOf(String reply, String name) {
        if (reply == null) {
            return null;
        }
        String[] t = reply.split("\\.", -1);
        int ci = t.length == 9 ? 3 : t.length >= 12 ? 5 : -1;
        if (ci < 0 || !t[ci].equals(name)) {
            return null;
        }
        try {
            return new long[] {Long.parseLong(t[ci + 2]), Long.parseLong(t[ci + 5])};
        } catch (NumberFormatException e) {
            return null;
        }
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
