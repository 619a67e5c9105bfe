package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;

/**
 * An ordered reader of one JetStream stream that never stalls for good (spec/protocol.md §6.7).
 * Internal.
 *
 * <p>It owns an ephemeral pull consumer (in memory, one replica, no acknowledgements, filtered on
 * a subject given in the consumer-create subject, which is what a scoped credential allows, §8.2)
 * and keeps one pull request outstanding while its buffer has room. Every way a read can be lost
 * is recovered without waiting for a lease or a restart:
 *
 * <ul>
 *   <li>every pull has an expiry and an idle heartbeat: nothing from the server for two heartbeats,
 *       or no end-of-pull status after the expiry, means the pull was lost: a new one is issued
 *       (after two lost pulls in a row the consumer is re-created);
 *   <li>a gap in the consumer sequence, or a heartbeat whose {@code Nats-Last-Consumer} is above
 *       the last consumer sequence received, means messages were lost: the consumer is re-created
 *       from the last stream sequence received + 1;
 *   <li>after a reconnect, a deleted consumer (409, no responders, not found) or a failed
 *       request, the consumer is re-created;
 *   <li>a reader that received nothing for five heartbeats asks the server: a consumer that is
 *       gone, that delivered what the reader never got or counts messages pending, or (for a
 *       whole stream) a stream whose last sequence is at or past the reader's position, makes it
 *       re-create its consumer. That check catches whatever the others miss.
 * </ul>
 *
 * <p>Messages of an older consumer or an older pull are ignored, so a re-created consumer never
 * delivers twice or out of order: the position only moves by exactly the sequences received in
 * order from the current consumer.
 *
 * <p>Messages come on a {@link RawConn} (never through jnats' header parser: a record may carry any
 * header bytes). One thread reads ({@link #nextBatch}); the raw connection's thread delivers; {@link
 * #close} and {@link #restart} may come from anywhere. No lock is held across a network call.
 */
final class StreamReader implements AutoCloseable {
    /** A stream message as the reader received it. */
    record Raw(long seq, String subject, byte[] headers, byte[] data, long timeNanos, long pending) {}

    /** The reader was closed. */
    static final class Closed extends Exception {
        private static final long serialVersionUID = 1L;

        Closed() {
            super("reader closed", null, false, false);
        }
    }

    /** What the reader did (for tests and logs). */
    static final class Stats {
        long created;
        long lostPulls;
        long gaps;
        long staleChecks;
        long staleRecoveries;
        long received;

        @Override
        public String toString() {
            return "created=" + created + " lost_pulls=" + lostPulls + " gaps=" + gaps + " stale_checks=" + staleChecks
                    + " stale_recoveries=" + staleRecoveries + " received=" + received;
        }
    }

    private static final SecureRandom RANDOM = new SecureRandom();
    static final ExecutorService BACKGROUND = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "pctl-reader-cleanup");
        t.setDaemon(true);
        return t;
    });

    private final PctlClient c;
    private final RawConn conn;
    final String stream;
    private final String filter;
    private final boolean whole;
    private final int batch;
    private final int maxBuffer;
    private final long expiresNanos;
    private final long heartbeatNanos;
    private final long staleAfterNanos;
    private final long inactiveNanos;
    private final Duration opTimeout;
    private final Consumer<String> logf;
    private final String inbox;

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition wake = lock.newCondition();
    // Guarded by lock:
    private boolean lastPerSubject;
    private long nextSeq;
    private final ArrayDeque<Raw> buf = new ArrayDeque<>();
    private String consumer;
    private int gen;
    private long cseq;
    private long pullNo;
    private long[] pull; // {pull no, batch, received, deadline nanos}, or null
    private long activity;
    private int lostInRow;
    private String reset;
    private boolean closed;
    private long lastData;
    private long lastCheck;
    private boolean caughtUp;
    private int sub;
    private Runnable stopListening;
    final Stats stats = new Stats();

    /**
     * A reader of {@code stream} from sequence {@code startSeq} (or, with {@code lastPerSubject},
     * the last message of every subject matching the filter, then everything after). {@code
     * whole}: the filter matches every message of the stream (so the stream's last sequence says
     * what the reader must get).
     */
    StreamReader(PctlClient c, RawConn conn, String stream, long startSeq, String filter, boolean whole, boolean lastPerSubject,
            int batch, int maxBuffer, Duration heartbeat, Consumer<String> logf) {
        this.c = c;
        this.conn = conn;
        this.stream = stream;
        this.filter = filter;
        this.whole = whole;
        this.lastPerSubject = lastPerSubject;
        this.nextSeq = Math.max(1, startSeq);
        this.batch = batch;
        this.maxBuffer = maxBuffer;
        this.heartbeatNanos = heartbeat.toNanos();
        this.expiresNanos = Math.max(TimeUnit.SECONDS.toNanos(3), 3 * heartbeatNanos);
        this.staleAfterNanos = 5 * heartbeatNanos;
        this.inactiveNanos = TimeUnit.SECONDS.toNanos(60);
        this.opTimeout = Duration.ofNanos(Math.max(TimeUnit.SECONDS.toNanos(2), 5 * heartbeatNanos));
        this.logf = logf;
        this.inbox = conn.newInbox();
        long now = System.nanoTime();
        this.lastData = now;
        this.lastCheck = now;
    }

    /**
     * The next messages in stream order (at least one); an empty list when none came within
     * {@code timeoutNanos}.
     *
     * @throws Closed after {@link #close}
     * @throws NotFoundException when the stream does not exist
     * @throws PermissionDeniedException when the credentials may not read it
     */
    List<Raw> nextBatch(long timeoutNanos) throws Closed {
        long deadline = System.nanoTime() + timeoutNanos;
        long backoff = 50;
        while (true) {
            boolean stale = false;
            lock.lock();
            try {
                if (closed) {
                    throw new Closed();
                }
                if (!buf.isEmpty()) {
                    List<Raw> out = new ArrayList<>(buf);
                    buf.clear();
                    lastData = System.nanoTime();
                    return out;
                }
                long now = System.nanoTime();
                if (now - Math.max(lastData, lastCheck) > staleAfterNanos) {
                    lastCheck = now;
                    stale = true;
                }
            } finally {
                lock.unlock();
            }
            if (stale) {
                checkStale();
            }
            try {
                ensure();
                backoff = 50;
            } catch (NotFoundException | PermissionDeniedException e) {
                throw e;
            } catch (PctlException e) {
                logf.accept("reader " + stream + ": " + e.getMessage() + "; retrying in " + backoff + " ms");
                lock.lock();
                try {
                    consumer = null;
                    if (!closed) {
                        wake.await(backoff, TimeUnit.MILLISECONDS);
                    }
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw new UnavailableException("interrupted", ie);
                } finally {
                    lock.unlock();
                }
                backoff = Math.min(backoff * 2, 2000);
                if (System.nanoTime() >= deadline) {
                    return List.of();
                }
                continue;
            }
            lock.lock();
            try {
                if (!buf.isEmpty()) {
                    continue;
                }
                long now = System.nanoTime();
                long wait = checkLiveness(now);
                if (now >= deadline) {
                    return List.of();
                }
                wait = Math.min(wait, deadline - now);
                if (reset != null || closed || (pull == null && consumer != null && buf.size() < maxBuffer - batch + 1)) {
                    continue;
                }
                wake.awaitNanos(Math.max(wait, 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new UnavailableException("interrupted while reading " + stream, e);
            } finally {
                lock.unlock();
            }
        }
    }

    /** Whether the reader has seen the end of the stream once. */
    boolean caughtUp() {
        lock.lock();
        try {
            return caughtUp;
        } finally {
            lock.unlock();
        }
    }

    /** Waits up to timeoutNanos until the reader has seen the end of the stream once. */
    boolean awaitCaughtUp(long timeoutNanos) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutNanos;
        lock.lock();
        try {
            while (!caughtUp && !closed) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                wake.awaitNanos(left);
            }
            return caughtUp;
        } finally {
            lock.unlock();
        }
    }

    /** Drops what is buffered and reads again from stream sequence {@code seq}. */
    void restart(long seq) {
        lock.lock();
        try {
            buf.clear();
            nextSeq = Math.max(1, seq);
            lastPerSubject = false;
            needResetLocked("restart");
        } finally {
            lock.unlock();
        }
    }

    /** Stops the reader; its consumer is deleted in the background (else it expires after 60 s unused). */
    @Override
    public void close() {
        String name;
        int s;
        Runnable stop;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            wake.signalAll();
            name = consumer;
            s = sub;
            stop = stopListening;
        } finally {
            lock.unlock();
        }
        if (stop != null) {
            stop.run();
        }
        if (s != 0) {
            conn.unsubscribe(s);
        }
        deleteConsumer(name);
    }

    // ---- consumer and pulls -----------------------------------------------------------------

    private void ensure() {
        String old = null;
        boolean create;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            if (sub == 0) {
                sub = conn.subscribe(inbox + ".>", this::onMessage);
                stopListening = conn.onReconnect(() -> needReset("reconnect"));
            }
            if (reset != null && consumer != null) {
                logf.accept("reader " + stream + ": re-creating its consumer at " + nextSeq + " (" + reset + ")");
                old = consumer;
                consumer = null;
            }
            reset = null;
            create = consumer == null;
        } finally {
            lock.unlock();
        }
        if (old != null) {
            deleteConsumer(old);
        }
        if (create) {
            create();
        }
        long[] p = null;
        String name;
        int g;
        lock.lock();
        try {
            name = consumer;
            g = gen;
            if (!closed && name != null && pull == null && reset == null && buf.size() < maxBuffer - batch + 1) {
                pullNo++;
                p = new long[] {pullNo, batch, 0, System.nanoTime() + expiresNanos + 2 * heartbeatNanos};
                pull = p;
                activity = System.nanoTime();
            }
        } finally {
            lock.unlock();
        }
        if (p != null) {
            String body = "{\"batch\":" + batch + ",\"expires\":" + expiresNanos + ",\"idle_heartbeat\":" + heartbeatNanos + "}";
            try {
                conn.publish("$JS.API.CONSUMER.MSG.NEXT." + stream + "." + name, inbox + "." + g + "." + p[0],
                        body.getBytes(StandardCharsets.US_ASCII));
            } catch (RuntimeException e) {
                lock.lock();
                try {
                    if (pull == p) {
                        pull = null;
                    }
                } finally {
                    lock.unlock();
                }
                throw new UnavailableException("pull from " + stream + ": " + e.getMessage(), e);
            }
        }
    }

    private void create() {
        int g;
        long start;
        boolean lps;
        lock.lock();
        try {
            g = ++gen;
            start = nextSeq;
            lps = lastPerSubject;
        } finally {
            lock.unlock();
        }
        byte[] rnd = new byte[8];
        RANDOM.nextBytes(rnd);
        String name = "pctl_" + HexFormat.of().formatHex(rnd);
        Map<String, Object> cfg = new LinkedHashMap<>();
        cfg.put("name", name);
        cfg.put("ack_policy", "none");
        cfg.put("replay_policy", "instant");
        cfg.put("mem_storage", true);
        cfg.put("num_replicas", 1);
        cfg.put("inactive_threshold", inactiveNanos);
        cfg.put("max_waiting", 16);
        if (lps) {
            cfg.put("deliver_policy", "last_per_subject");
        } else {
            cfg.put("deliver_policy", "by_start_sequence");
            cfg.put("opt_start_seq", start);
        }
        if (filter != null) {
            cfg.put("filter_subject", filter);
        }
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("stream_name", stream);
        req.put("config", cfg);
        req.put("action", "create");
        String api = "$JS.API.CONSUMER.CREATE." + stream + "." + name + (filter != null ? "." + filter : "");
        Map<String, Object> r;
        try {
            r = JsApi.request(c, api, req, opTimeout);
        } catch (JsApi.JsError e) {
            if (e.errCode == JsApi.STREAM_NOT_FOUND) {
                throw new NotFoundException("stream " + stream + " does not exist (was the topic deleted?)");
            }
            throw new UnavailableException("create a consumer on " + stream + ": " + e.getMessage());
        }
        boolean drop = false;
        lock.lock();
        try {
            if (g != gen || closed) {
                drop = true;
            } else {
                consumer = name;
                cseq = 0;
                pull = null;
                activity = System.nanoTime();
                lostInRow = 0;
                stats.created++;
                lastPerSubject = false; // a re-created consumer goes on by sequence
                if (JsApi.num(r.get("num_pending")) == 0) {
                    caughtUp = true;
                    wake.signalAll();
                }
            }
        } finally {
            lock.unlock();
        }
        if (drop) {
            deleteConsumer(name);
        }
    }

    /** Notices a lost pull (lock held); returns how long to wait before checking again. */
    private long checkLiveness(long now) {
        if (pull != null) {
            long silent = now - activity;
            long limit = 2 * heartbeatNanos + 500_000_000L;
            if (silent > limit || now > pull[3]) {
                stats.lostPulls++;
                lostInRow++;
                pull = null;
                if (lostInRow >= 2) {
                    needResetLocked("pulls lost");
                }
                return 0;
            }
            return Math.max(10_000_000L, Math.min(limit - silent, pull[3] - now));
        }
        return heartbeatNanos;
    }

    private void needReset(String why) {
        lock.lock();
        try {
            needResetLocked(why);
        } finally {
            lock.unlock();
        }
    }

    private void needResetLocked(String why) {
        if (reset == null) {
            reset = why;
        }
        pull = null;
        wake.signalAll();
    }

    // ---- the safety net ---------------------------------------------------------------------

    /**
     * Asks the server whether the reader misses something while it has nothing buffered; returns
     * true when it re-created its consumer.
     */
    boolean checkStale() {
        long before;
        String name;
        lock.lock();
        try {
            if (closed || !buf.isEmpty() || consumer == null) {
                return false;
            }
            stats.staleChecks++;
            before = nextSeq;
            name = consumer;
        } finally {
            lock.unlock();
        }
        String why = null;
        try {
            Map<String, Object> info = JsApi.request(c, "$JS.API.CONSUMER.INFO." + stream + "." + name, null, new byte[0], opTimeout);
            long delivered = JsApi.num(JsApi.obj(info.get("delivered")).get("stream_seq"));
            long pending = JsApi.num(info.get("num_pending"));
            if (delivered >= before) {
                why = "its consumer delivered " + delivered + ", the reader is at " + (before - 1);
            } else if (pending > 0) {
                why = "its consumer has " + pending + " pending that no pull brings";
            }
        } catch (JsApi.JsError e) {
            if (e.errCode == JsApi.CONSUMER_NOT_FOUND || e.code == 404) {
                why = "its consumer is gone";
            } else {
                return false;
            }
        } catch (PctlException e) {
            return false;
        }
        if (why == null && whole) {
            long last;
            try {
                last = JsApi.lastSeq(c, stream, opTimeout);
            } catch (PctlException e) {
                return false;
            }
            if (last >= before) {
                why = "the stream is at " + last + ", the reader at " + (before - 1);
            }
        }
        if (why == null) {
            return false;
        }
        lock.lock();
        try {
            if (nextSeq == before && buf.isEmpty() && name.equals(consumer) && !closed) {
                stats.staleRecoveries++;
                needResetLocked(why);
                return true;
            }
        } finally {
            lock.unlock();
        }
        return false;
    }

    private void deleteConsumer(String name) {
        if (name == null) {
            return;
        }
        try {
            BACKGROUND.execute(() -> {
                try {
                    JsApi.request(c, "$JS.API.CONSUMER.DELETE." + stream + "." + name, null, new byte[0], Duration.ofSeconds(2));
                } catch (RuntimeException | JsApi.JsError e) {
                    // best effort; the inactive threshold removes it anyway
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // shutting down
        }
    }

    // ---- messages (on the raw connection's thread) ---------------------------------------------

    private void onMessage(RawConn.Msg m) {
        String reply = m.reply();
        if (reply != null && reply.startsWith("$JS.ACK.")) {
            onRecord(m, reply);
            return;
        }
        int status = m.status();
        if (status == 0) {
            return;
        }
        // A status: its subject is the reply subject of the pull it is about, <inbox>.<gen>.<pull>.
        String subj = m.subject();
        if (subj.length() <= inbox.length() + 1) {
            return;
        }
        String tail = subj.substring(inbox.length() + 1);
        int dot = tail.indexOf('.');
        if (dot < 0) {
            return;
        }
        int g;
        long pn;
        try {
            g = Integer.parseInt(tail.substring(0, dot));
            pn = Long.parseLong(tail.substring(dot + 1));
        } catch (NumberFormatException e) {
            return;
        }
        String desc = m.statusDescription();
        lock.lock();
        try {
            if (closed || g != gen) {
                return;
            }
            activity = System.nanoTime();
            boolean current = pull != null && pull[0] == pn;
            if (status == 100) {
                if (current) {
                    lostInRow = 0;
                }
                String last = m.header("Nats-Last-Consumer");
                if (last != null) {
                    try {
                        long l = Long.parseLong(last.trim());
                        if (l > cseq) {
                            stats.gaps++;
                            needResetLocked("heartbeat says consumer sequence " + l + ", received " + cseq);
                            return;
                        }
                    } catch (NumberFormatException e) {
                        // ignore
                    }
                }
                if (buf.isEmpty() && pull != null) {
                    caughtUp = true;
                    wake.signalAll();
                }
                return;
            }
            if (status == 404 || status == 408) {
                if (current) {
                    pull = null;
                    lostInRow = 0;
                    caughtUp = true;
                    wake.signalAll();
                }
                return;
            }
            if (status == 409 && desc.contains("Exceeded MaxWaiting")) {
                if (current) {
                    pull = null;
                    wake.signalAll();
                }
                return;
            }
            if (status == 409 || status == 503) {
                needResetLocked(("status " + status + " " + desc).trim());
                return;
            }
            if (current) {
                pull = null;
                wake.signalAll();
            }
        } finally {
            lock.unlock();
        }
    }

    private void onRecord(RawConn.Msg m, String reply) {
        // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or the v2 form
        // $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<token>
        int[] dots = new int[16];
        int n = 0;
        for (int i = 0; i < reply.length() && n < dots.length; i++) {
            if (reply.charAt(i) == '.') {
                dots[n++] = i;
            }
        }
        int tokens = n + 1;
        int ci;
        if (tokens == 9) {
            ci = 3;
        } else if (tokens >= 12) {
            ci = 5;
        } else {
            return;
        }
        String name = reply.substring(dots[ci - 1] + 1, dots[ci]);
        long sseq;
        long cs;
        long ts;
        long pending;
        try {
            sseq = Long.parseLong(reply, dots[ci + 1] + 1, dots[ci + 2], 10);
            cs = Long.parseLong(reply, dots[ci + 2] + 1, dots[ci + 3], 10);
            ts = Long.parseLong(reply, dots[ci + 3] + 1, dots[ci + 4], 10);
            int end = ci + 5 < n ? dots[ci + 5] : reply.length();
            pending = Long.parseLong(reply, dots[ci + 4] + 1, end, 10);
        } catch (NumberFormatException | IndexOutOfBoundsException e) {
            return;
        }
        lock.lock();
        try {
            if (closed || !name.equals(consumer)) {
                return; // an older consumer's
            }
            if (cs != cseq + 1) {
                if (cs <= cseq) {
                    return; // a repeat: already had it
                }
                stats.gaps++;
                needResetLocked("consumer sequence " + cs + " after " + cseq);
                return;
            }
            cseq = cs;
            activity = System.nanoTime();
            lostInRow = 0;
            if (sseq < nextSeq) {
                return;
            }
            nextSeq = sseq + 1;
            stats.received++;
            boolean wasEmpty = buf.isEmpty();
            buf.addLast(new Raw(sseq, m.subject(), m.headers(), m.data(), ts, pending));
            boolean signal = wasEmpty;
            if (pending == 0 && !caughtUp) {
                caughtUp = true;
                signal = true;
            }
            if (pull != null) {
                pull[2]++;
                if (pull[2] >= pull[1]) {
                    pull = null; // complete: the next one is issued when the buffer has room
                    signal = true;
                }
            }
            if (signal) {
                wake.signalAll(); // the reader's thread waits only while the buffer is empty
            }
        } finally {
            lock.unlock();
        }
    }
}
