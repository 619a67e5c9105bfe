package dev.pctl;

import dev.pctl.internal.Json;
import io.nats.client.Message;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Produces records to one topic, partitioning them on the client with the topic's WebAssembly
 * module, and publishes them in JetStream fast batches exactly as spec/protocol.md §5.1 says (the
 * Go producer, client/sink.go, is the reference): each record carries {@code Pctl-Key} (keyed
 * records only), {@code Pctl-Producer}, {@code Pctl-Seq} and {@code Nats-Msg-Id:
 * <id>-<seq>-<token>} (32 random hex digits drawn for this record alone, §5.1.4), and one sink per
 * partition sends that partition's records in send order, one batch open at a time, many records
 * in flight inside it.
 *
 * <pre>{@code
 * Producer producer = client.producer("orders");
 * producer.send(ProducerRecord.keyed("user-1", "created"))
 *         .thenAccept(md -> System.out.println("stored in partition " + md.partition()));
 * producer.close(); // waits for every record's fate
 * }</pre>
 *
 * <p><b>Order.</b> Records with the same key are stored, and delivered to every consumer group,
 * in the order {@code send} was called, across epoch changes, lost connections and stream-leader
 * changes. The server stores a contiguous prefix of each fast batch (gap mode {@code fail}); after
 * any anomaly (a gap, a refusal, a lost connection, no reply within the acknowledgement timeout,
 * a fence) the sink stops sending, learns that prefix (from the batch's PubAck, verified against
 * the stored message, by closing the batch itself, or by reading the partition back), and re-sends
 * the rest in order in a new batch. When the topic's epoch changed (a topic event, no responders,
 * or 250 ms without a reply make the producer re-read the descriptor), every unacknowledged record
 * is re-partitioned and re-sent in the original send order under the new epoch. A re-send carries
 * the record's original deduplication id, so a record is never stored twice within JetStream's
 * 2-minute deduplication window; a duplicate acknowledgement counts only once the stored message
 * was checked to be this record (otherwise the record fails with {@link ConflictException}).
 *
 * <p><b>Clusters.</b> On a partition stream that is replicated (its info names a cluster) a
 * record is acknowledged only once its batch is confirmed: the stream's leader and its election
 * time did not change since the batch began (and the election is more than 5 s old), or else the
 * batch was read back from the leader and each record found; a record the server counted but did
 * not store (a nats-server fault) is sent again first in the next batch, with a new token, and
 * counted in {@link #holes()}. And on a cluster a batch never holds two records with the same key
 * (the per-key rule): a record whose key is already in the open batch waits for the next batch,
 * which starts only after the open one is confirmed, so a hole is re-sent ahead of every later
 * record of its key (spec/protocol.md §5.1.2).
 *
 * <p><b>Results.</b> Each record's fate is reported once: its future completes (or its callback
 * runs) with a {@link RecordMetadata}, or with a {@link PctlException}: {@link
 * BadRequestException} for a record that can never be stored (over the broker's record size),
 * {@link PluginFailedException} if the partitioner failed for its key, {@link ConflictException}
 * if another client stored a message under the record's deduplication id, {@link
 * PermissionDeniedException} if the credentials may not produce (the producer then fails every
 * record), {@link NotFoundException} if the topic was deleted, {@link MsgIdInProcessException} (an
 * {@link UnavailableException}: its fate is unknown) if JetStream refused the record's id 4 times
 * as "in process" (spec/protocol.md §5.1.5; read the partition before producing it again). A fast
 * batch's PubAck names the stream sequence of its last message only, so {@link
 * RecordMetadata#sequence()} is 0 ("stored, sequence not reported") for most records. Callbacks and futures complete on one producer
 * thread, in the order the fates became known (per partition: send order). Do not block in a
 * callback, and never call {@link #flush} or {@link #close} from one.
 *
 * <p>Needs nats-server 2.14 or later (fast batches): the constructor refuses an older server.
 * Thread-safe: records sent from several threads are ordered by the order their {@code send}
 * calls took effect. {@code send} blocks while {@link ProducerOptions#maxBuffered()} records are
 * unacknowledged.
 */
public final class Producer implements AutoCloseable {
    /**
     * Receives a record's fate. {@code error} is null when the record was acknowledged. On
     * failure {@code metadata} still names the record ({@link RecordMetadata#producerSeq()}) and
     * the partition and epoch of its last attempt (-1 if it never got one), with sequence -1.
     */
    @FunctionalInterface
    public interface Callback {
        void onCompletion(RecordMetadata metadata, PctlException error);
    }

    private static final java.security.SecureRandom TOKENS = new java.security.SecureRandom();
    private static final Object STOP = new Object();
    private static final Object CHECK = new Object();
    private static final Object WAKE = new Object();
    // JetStream API error codes the producer acts on (spec/protocol.md §5.1.1).
    private static final int ERR_TOO_LARGE = 10054;
    private static final int ERR_DUP_CONFLICT = 10071;
    private static final int ERR_BATCH_DISABLED = 10205;
    private static final int ERR_BAD_PATTERN = 10206;
    private static final int ERR_BAD_BATCH_ID = 10207;
    private static final int ERR_UNKNOWN_BATCH = 10208;
    private static final int ERR_TOO_MANY_OPEN = 10211;
    // Fast-batch operations (the <op> token of the reply subject).
    private static final int OP_START = 0;
    private static final int OP_APPEND = 1;
    private static final int OP_COMMIT = 2;
    private static final int OP_EOB = 3;
    /**
     * How many end-of-batch messages of a batch being settled may go unanswered (each for the
     * acknowledgement timeout) before the sink reads the partition back (spec/protocol.md
     * §5.1.2, settle 1).
     */
    static final int SILENT_EOBS = 3;
    /** The least time an EOB's answer is awaited while settling (spec/protocol.md §5.1.2). */
    static final long EOB_WAIT_NANOS = 1_000_000_000L;
    /** A stream leader elected more recently than this may have dropped proposals it counted. */
    private static final long LEADER_SETTLED_NANOS = TimeUnit.SECONDS.toNanos(5);

    private final PctlClient client;
    private final RawConn raw;
    private final String topic;
    /** A compacted topic (spec/protocol.md §10): records go to their keys' subjects, tombstones expire. Fixed at creation. */
    private boolean compacted;
    /** Key subjects (compacted, or a plain topic with backfill: spec §10.1): records go to their keys' subjects. Fixed at creation. */
    private boolean keySubjects;
    /** A plain topic with backfill: keyless records are refused. Fixed at creation. */
    private boolean backfill;
    private volatile long deleteRetentionMs;
    private final String id;
    private final ProducerOptions opts;
    private final long ackTimeoutNanos;
    private final Duration ackTimeout;
    private final long maxRecord; // the partition streams' max_msg_size (spec/protocol.md §5.3), or the server's max payload
    private final String inbox; // replies to fast batches arrive under inbox.>

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    // Guarded by lock:
    private TopicDescriptor desc;
    private Partitioner part;
    private Map<Integer, Sink> sinks = new HashMap<>();
    private final List<Sink> allSinks = new ArrayList<>(); // every sink ever started (to stop them)
    private final List<Pending> held = new ArrayList<>(); // records sent while repartitioning
    private boolean switching;
    private long seq;
    private int buffered; // sent, fate not yet known
    private long callbacksPending; // fates known, callbacks not yet run
    private long rr;
    private PctlException fatal;
    private boolean closed;

    private volatile boolean stopped;
    private final Map<String, Sink> batches = new ConcurrentHashMap<>(); // open batch id -> its sink
    private final LinkedBlockingQueue<Object> control = new LinkedBlockingQueue<>();
    private final AtomicBoolean checkQueued = new AtomicBoolean();
    private final Thread controlThread;
    private final ExecutorService callbacks;
    private final Runnable stopListening;
    private final Runnable stopDisconnects;
    private final int replySid;
    private final int eventSid;
    private final AtomicLong resent = new AtomicLong();
    private final AtomicLong settles = new AtomicLong();
    private final AtomicLong holes = new AtomicLong();

    Producer(PctlClient client, String topic, ProducerOptions opts) {
        this.client = client;
        this.topic = topic;
        this.opts = opts;
        this.id = opts.id();
        this.ackTimeout = client.options().ackTimeout();
        this.ackTimeoutNanos = ackTimeout.toNanos();
        requireFastBatches(client);
        this.maxRecord = maxRecord(client, topic);
        TopicDescriptor d = fetch();
        this.compacted = d.compacted;
        this.keySubjects = d.keySubjects();
        this.backfill = d.backfill;
        this.deleteRetentionMs = d.deleteRetentionMs;
        install(d);
        // Records go on the raw connection: a message written before a lost connection is never
        // written again (jnats re-sends what it buffered), and header values may be any UTF-8.
        this.raw = client.raw();
        this.inbox = raw.newInbox();
        this.callbacks = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "pctl-producer-" + id + "-callbacks");
            t.setDaemon(true);
            return t;
        });
        this.replySid = raw.subscribe(inbox + ".>", this::onReply);
        // An event is a hint to re-read the descriptor (coalesced); one with a $JS. reply subject
        // is a push consumer's redelivery aimed here, not the broker's (spec/protocol.md §8.4).
        this.eventSid = raw.subscribe("pctl.events.topic." + topic, m -> {
            if (m.reply() == null || !m.reply().startsWith("$JS.")) {
                requestCheck();
            }
        });
        Runnable a = raw.onDisconnect(() -> {
            for (Sink s : sinksNow()) {
                s.connLost();
            }
        });
        Runnable c = raw.onReconnect(() -> {
            for (Sink s : sinksNow()) {
                s.signal(); // a sink waiting for the connection sends again
            }
        });
        this.stopDisconnects = () -> {
            a.run();
            c.run();
        };
        String prefix = "pctl.data." + topic + ".";
        this.stopListening = client.onViolation(subject -> {
            if (subject.startsWith(prefix)) {
                fail(PermissionDeniedException.forSubject("publish to", subject));
            }
        });
        this.controlThread = new Thread(this::controlLoop, "pctl-producer-" + id);
        controlThread.setDaemon(true);
        controlThread.start();
    }

    /** Refuses a server older than nats-server 2.14 (spec/protocol.md §5.1), with what it found. */
    static void requireFastBatches(PctlClient client) {
        ServerVersion.require(client, "pctl's producer", "fast batch publishing, spec/protocol.md §5.1");
    }

    /** The producer id (the records' {@code Pctl-Producer}). */
    public String id() {
        return id;
    }

    /** The topic. */
    public String topic() {
        return topic;
    }

    /** The epoch the producer currently produces to. */
    public int epoch() {
        lock.lock();
        try {
            return desc.current().number();
        } finally {
            lock.unlock();
        }
    }

    /** How many records were re-sent under a new epoch after a fence. */
    public long resent() {
        return resent.get();
    }

    /**
     * How many fast batches had to be settled after an anomaly (a gap, a refusal, a lost
     * connection, a timeout, a fence).
     */
    public long settled() {
        return settles.get();
    }

    /**
     * How many records a cluster acknowledged in a committed fast batch without storing them (a
     * nats-server 2.15 fault after a stream leader's term change), found by the producer's check
     * and sent again: their keys may be out of order.
     */
    public long holes() {
        return holes.get();
    }

    // ---- sending -----------------------------------------------------------------------------

    /**
     * Sends a record; the future completes with its metadata when the broker has stored it, or
     * exceptionally with a {@link PctlException} ({@link BadRequestException} for a record that
     * can never be stored: a key over 64 KiB, a record over the broker's maximum size).
     *
     * @throws BadRequestException at once if the producer is closed
     * @throws PctlException at once if the producer has failed for good (the failure)
     */
    public CompletableFuture<RecordMetadata> send(ProducerRecord record) {
        CompletableFuture<RecordMetadata> f = new CompletableFuture<>();
        send(record, (md, err) -> {
            if (err != null) {
                f.completeExceptionally(err);
            } else {
                f.complete(md);
            }
        });
        return f;
    }

    /**
     * Sends a record; {@code callback} (may be null) runs once with its fate, on the producer's
     * callback thread. Returns the record's producer sequence number (its {@code Pctl-Seq}): every
     * record sent gets the next one, even one that fails at once.
     *
     * @throws BadRequestException at once if the producer is closed
     * @throws PctlException at once if the producer has failed for good (the failure)
     */
    public long send(ProducerRecord record, Callback callback) {
        byte[] key = record.key();
        long ts = record.timestamp() >= 0 ? record.timestamp() : System.currentTimeMillis();
        PctlException refused = null;
        // The stored message as JetStream counts it (spec/protocol.md §5.3): the header block
        // "NATS/1.0\r\n", one "<name>: <value>\r\n" line per value, "\r\n", then the value.
        long fixed = 12 + record.headerBytes() + line("Pctl-Producer", id.length()) + line("Pctl-Time", Long.toString(ts).length())
                + (key == null ? 0 : line("Pctl-Key", 4 + 4 * ((key.length + 2) / 3)));
        if (key != null && key.length > Partitioner.MAX_KEY) {
            refused = new BadRequestException("key of " + key.length + " bytes; keys are at most " + Partitioner.MAX_KEY + " bytes");
        }
        if (record.isTombstone()) {
            fixed += line(Compaction.HEADER_TOMBSTONE, 4) + line(Compaction.HEADER_TTL, 20);
        }
        if (key == null && compacted) {
            refused = new BadRequestException("topic " + topic + " is compacted: every record needs a key (a keyless record cannot be compacted)");
        }
        if (key == null && backfill) {
            refused = new BadRequestException("topic " + topic + " backfills at epoch changes: a keyless record cannot be backfilled: give it a key, or create the topic without --backfill");
        }
        Pending pd;
        lock.lock();
        try {
            while (buffered >= opts.maxBuffered() && fatal == null && !closed) {
                try {
                    changed.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new UnavailableException("interrupted while waiting for room to send (" + buffered + " records unacknowledged)", e);
                }
            }
            if (closed) {
                throw new BadRequestException("producer " + id + " is closed");
            }
            if (fatal != null) {
                throw fatal;
            }
            pd = new Pending(++seq, record, callback);
            pd.ts = ts;
            buffered++;
            if (refused == null) {
                int n = Long.toString(pd.seq).length();
                long block = fixed + line("Pctl-Seq", n) + line("Nats-Msg-Id", id.length() + 1 + n + 33);
                long size = block + record.value().length;
                if (size > maxRecord) {
                    refused = new BadRequestException(String.format(
                            "record %d of %d bytes (value %d, key %d, application headers %d, headers in all %d) is larger than topic %s's record limit of %d bytes: "
                                    + "send a smaller value or fewer headers, or run the broker with a larger --max-record-bytes (spec/protocol.md §5.3)",
                            pd.seq, size, record.value().length, key == null ? 0 : key.length, record.headerBytes(), block, topic, maxRecord));
                }
            }
            if (refused != null) {
                completeLocked(pd, null, refused);
                return pd.seq;
            }
            identity(pd);
            if (switching) {
                held.add(pd);
                return pd.seq;
            }
            try {
                assignLocked(pd);
            } catch (PctlException e) {
                completeLocked(pd, null, e);
            } catch (RuntimeException e) {
                // Never leave a record without a fate (close would wait for it forever).
                completeLocked(pd, null, new InternalException("record " + pd.seq + " could not be sent: " + e, e));
            }
        } finally {
            lock.unlock();
        }
        return pd.seq;
    }

    private static long line(String name, int valueLength) {
        return name.length() + 4 + valueLength;
    }

    /**
     * The largest message the topic's partition streams take (their max_msg_size: every partition
     * stream of a topic has the same), else the server's max payload.
     */
    private static long maxRecord(PctlClient client, String topic) {
        long mp = client.connection().getMaxPayload();
        long m = 0;
        try {
            Map<String, Object> info = JsApi.request(client, "$JS.API.STREAM.INFO.PCTL_" + topic + "_0", null, new byte[0],
                    client.options().requestTimeout());
            m = JsApi.num(JsApi.obj(info.get("config")).get("max_msg_size"));
        } catch (PctlException | JsApi.JsError e) {
            m = 0;
        }
        if (m <= 0) {
            return mp;
        }
        return mp > 0 ? Math.min(m, mp) : m;
    }

    /** Partitions a record under the current epoch and queues it on its partition's sink (lock held). */
    private void assignLocked(Pending pd) {
        TopicDescriptor.Epoch cur = desc.current();
        int p;
        if (pd.rec.key() == null) {
            p = (int) Long.remainderUnsigned(rr++, cur.partitions());
        } else {
            p = part.partition(pd.rec.key(), cur.partitions());
        }
        pd.epoch = cur.number();
        pd.partition = p;
        refreshTTL(pd);
        Sink s = sinks.get(p);
        if (s == null) {
            s = new Sink(cur.number(), p);
            sinks.put(p, s);
            allSinks.add(s);
            s.thread.start();
        }
        s.push(pd);
    }

    private List<Sink> sinksNow() {
        lock.lock();
        try {
            return new ArrayList<>(sinks.values());
        } finally {
            lock.unlock();
        }
    }

    /**
     * Gives a record its identity, fixed for all its sends (spec/protocol.md §5.1 step 3): the
     * header block is built here as bytes, so header values are sent as the UTF-8 they are (jnats'
     * own header type takes ASCII only).
     */
    private void identity(Pending pd) {
        if (pd.rec.key() != null) {
            pd.keyHeader = "b64:" + Base64.getEncoder().encodeToString(pd.rec.key());
        }
        pd.msgId = id + "-" + pd.seq + "-" + newToken();
        pd.block = headerBlock(pd);
    }

    /**
     * Gives a tombstone of a compacted topic the Nats-TTL of the descriptor it is (re-)sent under
     * (spec/protocol.md §10.2, lock held): one made under an earlier descriptor (handed back by a
     * fenced partition, or held during the switch) gets the hold of the new epoch's backfill, not
     * its first delete retention, which could expire before the backfill reaches its key. The
     * block is made again with the same identity (producer, sequence, deduplication id, key; the
     * duplicate check does not compare Nats-TTL), as a new array: no sink holds the record now.
     */
    private void refreshTTL(Pending pd) {
        if (pd.rec.isTombstone() && compacted && pd.blockRetentionMs != deleteRetentionMs) {
            pd.block = headerBlock(pd);
        }
    }

    /**
     * Test hook (ReadBackTest): a record with the identity send gives it (sequence, deduplication
     * id, header block), neither queued nor sent. headerBlockForTest is what it is sent with.
     */
    Object recordForTest(ProducerRecord rec) {
        lock.lock();
        try {
            Pending pd = new Pending(++seq, rec, null);
            pd.ts = System.currentTimeMillis();
            identity(pd);
            return pd;
        } finally {
            lock.unlock();
        }
    }

    /** Test hook: the header block a record of recordForTest is sent with. */
    static byte[] headerBlockForTest(Object pd) {
        return ((Pending) pd).block;
    }

    /**
     * Test hook (ReadBackTest): reads a partition's stream back as confirm does after a leader
     * change, for a batch of the one record pd (of recordForTest) first sent above floor, where
     * the stream info named last sequence known. The stream sequence the read found pd at, or -1.
     */
    long readBackForTest(int epoch, int partition, long floor, long known, Object pd) {
        Sink s = new Sink(epoch, partition);
        s.floor = floor;
        s.floorKnown = true;
        s.verify = true;
        ((Pending) pd).floors.put(s.stream, floor);
        s.b = new Batch("b1");
        s.b.recs.add((Pending) pd);
        Long at = s.readBack(known).found().get(0);
        return at == null ? -1 : at;
    }

    /** Test hook (ProducerBrokerTest, silent EOBs): recordForTest with the callback told of the record's fate. */
    Object recordForTest(ProducerRecord rec, Callback callback) {
        lock.lock();
        try {
            Pending pd = new Pending(++seq, rec, callback);
            pd.ts = System.currentTimeMillis();
            identity(pd);
            buffered++;
            return pd;
        } finally {
            lock.unlock();
        }
    }

    /** Test hook (ProducerBrokerTest, silent EOBs): what settleForTest saw. */
    record SettledForTest(boolean finished, Throwable error, boolean fenced, List<Object> queue) {}

    /**
     * Test hook (ProducerBrokerTest, silent EOBs): settles a batch of the records pds (of recordForTest), each sent
     * once above floor to the partition's stream, whose EOBs go to eobSubject, as the sink does
     * after the anomaly. Gives settle bound to finish; if it does not, the sink is aborted.
     * The queue is what the sink would send again, in order.
     */
    SettledForTest settleForTest(int epoch, int partition, long floor, String eobSubject, List<Object> pds, Duration bound)
            throws InterruptedException {
        Sink s = sinkForTest(new Sink(epoch, partition, eobSubject), floor, "b1", pds, 1);
        s.b.commit = pds.size() + 1;
        s.b.anomaly = "no reply within " + ackTimeoutNanos / 1_000_000 + "ms";
        batches.put(s.b.id, s);
        return settleForTest(s, pds, bound);
    }

    /**
     * Test hook (ProducerBrokerTest, duplicate PubAck): a one-record batch of pd (of recordForTest),
     * its re-send above floor, gets its flow ack (the duplicate counts as persisted, so the record is
     * acknowledged), then a PubAck that names stream sequence streamSeq and says "duplicate" (an
     * anomaly), and the sink settles it as it does after the anomaly. As settleForTest otherwise.
     */
    SettledForTest settleDuplicatePubAckForTest(int epoch, int partition, long floor, Object o, long streamSeq, Duration bound)
            throws InterruptedException {
        Sink s = sinkForTest(new Sink(epoch, partition), floor, "b2", List.of(o), 2);
        batches.put(s.b.id, s);
        s.ackUpTo(1); // the re-send's flow ack
        Reply r = new Reply();
        r.batch = s.b.id;
        r.seq = 1;
        r.op = OP_COMMIT;
        r.kind = Kind.PUB_ACK;
        r.streamSeq = streamSeq;
        r.count = 1;
        r.ackBatch = s.b.id;
        r.duplicate = true;
        s.b.pubAck = r;
        s.b.anomaly = "PubAck of 1 records (batch \"" + s.b.id + "\", duplicate true)";
        return settleForTest(s, List.of(o), bound);
    }

    /** Sink s, its floor known, with an open batch (id batch) of the records pds (of recordForTest), each sent sends times above floor. */
    private Sink sinkForTest(Sink s, long floor, String batch, List<Object> pds, int sends) {
        s.floor = floor;
        s.floorKnown = true;
        s.b = new Batch(batch);
        for (Object o : pds) {
            Pending pd = (Pending) o;
            pd.floors.put(s.stream, floor);
            pd.sends = sends;
            pd.epoch = s.epoch;
            pd.partition = s.partition;
            s.b.recs.add(pd);
        }
        return s;
    }

    /** Test hook: records sent whose fate is not yet known. */
    int bufferedForTest() {
        lock.lock();
        try {
            return buffered;
        } finally {
            lock.unlock();
        }
    }

    private SettledForTest settleForTest(Sink s, List<Object> pds, Duration bound) throws InterruptedException {
        String batch = s.b.id;
        TopicDescriptor[] fenced = new TopicDescriptor[1];
        Throwable[] err = new Throwable[1];
        Thread t = new Thread(() -> {
            try {
                fenced[0] = s.settle(null);
            } catch (Throwable e) {
                err[0] = e;
            }
        }, "pctl-settle-for-test");
        t.setDaemon(true);
        t.start();
        t.join(bound.toMillis());
        boolean finished = !t.isAlive();
        if (!finished) {
            s.abort(new UnavailableException("settleForTest: settle did not finish within " + bound));
            t.join(bound.toMillis());
        }
        batches.remove(batch);
        List<Object> queue;
        synchronized (s) {
            queue = new ArrayList<>(s.queue);
        }
        for (Object o : pds) { // never sent again here: their fate is known
            complete((Pending) o, null, new UnavailableException("settleForTest: not sent again"));
        }
        return new SettledForTest(finished, err[0], fenced[0] != null, queue);
    }

    /** Test hook: whether records sent from now on are held, as while a repartition switches epochs. */
    void switchingForTest(boolean on) {
        lock.lock();
        try {
            switching = on;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Test hook: places the held records as a repartition does once it has installed a descriptor
     * whose tombstone retention (delete_retention_ms) is deleteRetentionMs.
     */
    void placeHeldForTest(long deleteRetentionMs) {
        this.deleteRetentionMs = deleteRetentionMs;
        lock.lock();
        try {
            switching = false;
            for (Pending pd : held) {
                assignLocked(pd);
            }
            held.clear();
        } finally {
            lock.unlock();
        }
    }

    private byte[] headerBlock(Pending pd) {
        long retention = deleteRetentionMs;
        pd.blockRetentionMs = retention;
        StringBuilder b = new StringBuilder(160).append("NATS/1.0\r\n");
        if (pd.keyHeader != null) {
            b.append("Pctl-Key: ").append(pd.keyHeader).append("\r\n");
        }
        b.append("Pctl-Producer: ").append(id).append("\r\nPctl-Seq: ").append(pd.seq).append("\r\nNats-Msg-Id: ").append(pd.msgId)
                .append("\r\nPctl-Time: ").append(pd.ts).append("\r\n");
        if (pd.rec.isTombstone()) {
            // A tombstone (spec/protocol.md §10.2); on a compacted topic it expires after the
            // topic's delete retention.
            b.append(Compaction.HEADER_TOMBSTONE).append(": true\r\n");
            if (compacted) {
                b.append(Compaction.HEADER_TTL).append(": ").append(Compaction.tombstoneTTL(retention)).append("\r\n");
            }
        }
        for (String[] kv : pd.rec.headers()) {
            b.append(kv[0]).append(": ").append(kv[1]).append("\r\n");
        }
        return b.append("\r\n").toString().getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Gives a record that is provably not stored a new deduplication id (a fresh token; the
     * producer id and sequence stay): the server may still count its old id as being stored. The
     * new id's 10158 answers are counted afresh (§5.1.5 counts per message id): a hole is re-sent
     * under it, stuck old id or not.
     */
    private void renew(Pending pd) {
        pd.msgId = id + "-" + pd.seq + "-" + newToken();
        pd.inProcess.renewed();
        pd.block = headerBlock(pd);
        pd.floors.clear();
    }

    /** 32 lowercase hex digits from a cryptographically secure source (spec/protocol.md §5.1.4). */
    static String newToken() {
        byte[] t = new byte[16];
        TOKENS.nextBytes(t);
        return java.util.HexFormat.of().formatHex(t);
    }

    /** Reports a record's fate (lock held): frees its buffer slot and queues its callback. */
    private void completeLocked(Pending pd, RecordMetadata md, PctlException err) {
        if (pd.done) {
            return;
        }
        pd.done = true;
        if (err != null) {
            boolean placed = pd.partition >= 0;
            md = new RecordMetadata(pd.seq, placed ? pd.partition : -1, placed ? pd.epoch : -1, -1, false);
        }
        RecordMetadata result = md;
        buffered--;
        callbacksPending++;
        changed.signalAll();
        Callback cb = pd.callback;
        Runnable task = () -> {
            try {
                if (cb != null) {
                    cb.onCompletion(result, err);
                }
            } catch (RuntimeException e) {
                System.getLogger("dev.pctl").log(System.Logger.Level.WARNING, "producer " + id + ": a callback threw", e);
            } finally {
                lock.lock();
                try {
                    callbacksPending--;
                    changed.signalAll();
                } finally {
                    lock.unlock();
                }
            }
        };
        try {
            callbacks.execute(task);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            task.run(); // closed: nothing else runs callbacks any more
        }
    }

    private void complete(Pending pd, RecordMetadata md, PctlException err) {
        lock.lock();
        try {
            completeLocked(pd, md, err);
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits until every record sent so far has its fate (and its callback has run).
     *
     * @throws PctlException if the producer failed for good (the failure)
     * @throws UnavailableException if interrupted
     */
    public void flush() {
        flushNanos(Long.MAX_VALUE / 4);
    }

    /**
     * Waits up to {@code timeout} until every record sent so far has its fate (and its callback
     * has run); returns false if some had not by then.
     *
     * @throws PctlException if the producer failed for good (the failure)
     */
    public boolean flush(Duration timeout) {
        long nanos;
        try {
            nanos = Math.min(timeout.toNanos(), Long.MAX_VALUE / 4);
        } catch (ArithmeticException e) {
            nanos = Long.MAX_VALUE / 4;
        }
        return flushNanos(nanos);
    }

    private boolean flushNanos(long nanos) {
        long deadline = System.nanoTime() + nanos;
        lock.lock();
        try {
            while (buffered > 0 || callbacksPending > 0) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return false;
                }
                try {
                    changed.awaitNanos(left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new UnavailableException("interrupted while flushing (" + buffered + " records unacknowledged)", e);
                }
            }
            if (fatal != null) {
                throw fatal;
            }
            return true;
        } finally {
            lock.unlock();
        }
    }

    /** Flushes, then stops the producer. The client stays open. Idempotent. */
    @Override
    public void close() {
        PctlException err = null;
        try {
            flush();
        } catch (PctlException e) {
            err = e;
        }
        List<Sink> all;
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            all = new ArrayList<>(allSinks);
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        stopped = true;
        stopListening.run();
        stopDisconnects.run();
        control.add(STOP);
        PctlException gone = new UnavailableException("producer " + id + " closed before the record was acknowledged");
        for (Sink s : all) {
            s.abort(gone);
            s.thread.interrupt();
        }
        try {
            for (Sink s : all) {
                s.thread.join(5000);
            }
            controlThread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        raw.unsubscribe(replySid);
        raw.unsubscribe(eventSid);
        callbacks.shutdown();
        try {
            callbacks.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (err != null) {
            throw err;
        }
    }

    /** Makes the producer unusable and fails every record whose fate is not yet known. */
    private void fail(PctlException err) {
        List<Sink> all;
        lock.lock();
        try {
            if (fatal == null) {
                fatal = err;
                System.getLogger("dev.pctl").log(System.Logger.Level.WARNING, "producer " + id + ": " + err.getMessage());
            }
            for (Pending pd : held) {
                completeLocked(pd, null, err);
            }
            held.clear();
            all = new ArrayList<>(sinks.values());
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        for (Sink s : all) {
            s.abort(err);
        }
    }

    private void logf(String format, Object... args) {
        System.getLogger("dev.pctl").log(System.Logger.Level.DEBUG, () -> "producer " + id + ": " + String.format(format, args));
    }

    // ---- replies -----------------------------------------------------------------------------

    /**
     * Routes a fast-batch reply (on the raw connection's reader thread: never blocks) to the sink
     * whose batch it names. Replies to batches no longer open are dropped (settled already).
     */
    private void onReply(RawConn.Msg m) {
        String subject = m.subject();
        if (!subject.startsWith(inbox) || !subject.endsWith(".$FI")) {
            return;
        }
        String[] t = subject.substring(inbox.length() + 1, subject.length() - 4).split("\\.");
        if (t.length != 5 || !t[2].equals("fail")) {
            return;
        }
        Sink s = batches.get(t[0]);
        if (s == null) {
            return;
        }
        long seq;
        int op;
        try {
            seq = Long.parseLong(t[3]);
            op = Integer.parseInt(t[4]);
        } catch (NumberFormatException e) {
            return;
        }
        s.mailbox.add(Reply.parse(m, t[0], seq, op));
    }

    private enum Kind {
        FLOW_ACK("flow ack"), GAP("gap"), FLOW_ERR("error"), PUB_ACK("PubAck"), REFUSAL("refusal"), NO_RESPONDERS("no responders"), GARBAGE("unparsable reply");

        final String what;

        Kind(String what) {
            this.what = what;
        }
    }

    /** One server reply about a message of a fast batch (spec/protocol.md §5.1.1). */
    private static final class Reply {
        String batch; // from the subject
        long seq; // batch seq of the message the reply is about, from the subject
        int op;
        Kind kind = Kind.GARBAGE;
        long ackSeq; // flow ack: persisted up to here
        long gapExpected;
        long gapGot; // gap or error: the batch seq it got
        int errCode;
        String errText = "";
        long streamSeq; // PubAck: stream sequence of the last message the batch stored
        long count; // PubAck: batch seqs 1..count persisted
        String ackBatch = ""; // PubAck: the batch id the server names
        boolean duplicate;

        static Reply parse(RawConn.Msg m, String batch, long seq, int op) {
            Reply r = new Reply();
            r.batch = batch;
            r.seq = seq;
            r.op = op;
            if (m.data().length == 0 && m.status() == 503) {
                r.kind = Kind.NO_RESPONDERS;
                return r;
            }
            Map<String, Object> body;
            try {
                Object v = Json.parse(new String(m.data(), StandardCharsets.UTF_8));
                if (!(v instanceof Map)) {
                    r.errText = "a reply that is not a JSON object";
                    return r;
                }
                body = JsApi.obj(v);
            } catch (Json.JsonException | RuntimeException e) {
                r.errText = "unparsable reply: " + e.getMessage();
                return r;
            }
            Object type = body.get("type");
            Map<String, Object> err = body.get("error") instanceof Map ? JsApi.obj(body.get("error")) : null;
            if ("ack".equals(type)) {
                r.kind = Kind.FLOW_ACK;
                r.ackSeq = JsApi.num(body.get("seq"));
            } else if ("gap".equals(type)) {
                r.kind = Kind.GAP;
                r.gapExpected = JsApi.num(body.get("last_seq"));
                r.gapGot = JsApi.num(body.get("seq"));
            } else if ("err".equals(type)) {
                r.kind = Kind.FLOW_ERR;
                if (err != null) {
                    r.errCode = (int) JsApi.num(err.get("err_code"));
                    r.errText = String.valueOf(err.get("description"));
                }
                r.gapGot = JsApi.num(body.get("seq"));
            } else if (type != null) {
                r.errText = "unknown reply type " + Json.quote(String.valueOf(type));
            } else if (err != null) {
                r.kind = Kind.REFUSAL;
                r.errCode = (int) JsApi.num(err.get("err_code"));
                r.errText = String.valueOf(err.get("description"));
            } else if (body.get("stream") instanceof String && !((String) body.get("stream")).isEmpty()) {
                r.kind = Kind.PUB_ACK;
                r.streamSeq = JsApi.num(body.get("seq"));
                r.count = JsApi.num(body.get("count"));
                r.ackBatch = body.get("batch") instanceof String ? (String) body.get("batch") : "";
                r.duplicate = Boolean.TRUE.equals(body.get("duplicate"));
            } else {
                r.errText = "reply without type, error or stream";
            }
            return r;
        }
    }

    private static String replySubject(String inbox, String batch, int flow, long seq, int op) {
        return inbox + "." + batch + "." + flow + ".fail." + seq + "." + op + ".$FI";
    }

    // ---- stored messages -----------------------------------------------------------------------

    /** A stored message as the stream leader returned it. */
    private record Stored(long seq, byte[] headers, byte[] data) {}

    /**
     * Whether a stored message is this record: producer, sequence, deduplication id and key header
     * for header, value byte for byte (spec/protocol.md §5.1.2); never a fence marker.
     */
    private static boolean sameRecord(Stored m, Pending pd) {
        if (m == null) {
            return false;
        }
        String producer = null;
        String seq = null;
        String msgId = null;
        String key = null;
        int keys = 0;
        for (String[] kv : RecordHeaders.parse(m.headers())) {
            switch (kv[0]) {
                case "Pctl-Fence":
                    return false;
                case "Pctl-Producer":
                    producer = producer == null ? kv[1] : producer;
                    break;
                case "Pctl-Seq":
                    seq = seq == null ? kv[1] : seq;
                    break;
                case "Nats-Msg-Id":
                    msgId = msgId == null ? kv[1] : msgId;
                    break;
                case "Pctl-Key":
                    keys++;
                    key = key == null ? kv[1] : key;
                    break;
                default:
                    break;
            }
        }
        if (!pd.producerId().equals(producer) || !Long.toString(pd.seq).equals(seq) || !pd.msgId.equals(msgId)) {
            return false;
        }
        if (keys != (pd.keyHeader == null ? 0 : 1) || (pd.keyHeader != null && !pd.keyHeader.equals(key))) {
            return false;
        }
        return Arrays.equals(m.data(), pd.rec.value());
    }

    private static String msgIdOf(Stored m) {
        return RecordHeaders.first(m.headers(), "Nats-Msg-Id");
    }

    /** Not found (10037). */
    private static final Stored NONE = new Stored(0, null, null);

    /**
     * Asks the stream leader for message seq ($JS.API.STREAM.MSG.GET: a direct get may be
     * answered by a replica that lags). Completes with the message, NONE when there is none, or
     * exceptionally.
     */
    private CompletableFuture<Stored> getAsync(String stream, long seq) {
        return leaderAsync(stream, "message " + seq, "{\"seq\":" + seq + "}");
    }

    /**
     * The stream's last message as the stream leader answers STREAM.MSG.GET with
     * {"last_by_subj": ">"}: NONE when the stream is empty or its last message is gone (deleted,
     * expired). The end of a read-back (spec/protocol.md §5.1.2, "the read-back's end").
     */
    private CompletableFuture<Stored> lastAsync(String stream) {
        return leaderAsync(stream, "the last message", "{\"last_by_subj\":\">\"}");
    }

    /**
     * The stream's first message at or after sequence from, from the stream leader (STREAM.MSG.GET
     * with {"seq": from, "next_by_subj": ">"}): NONE when there is none.
     */
    private CompletableFuture<Stored> nextAsync(String stream, long from) {
        return leaderAsync(stream, "the first message from " + from, "{\"seq\":" + from + ",\"next_by_subj\":\">\"}");
    }

    /** One STREAM.MSG.GET request (body) and the message it returns; what names it in errors. */
    private CompletableFuture<Stored> leaderAsync(String stream, String what, String body) {
        String subject = "$JS.API.STREAM.MSG.GET." + stream;
        return client.connection().requestWithTimeout(subject, body.getBytes(StandardCharsets.UTF_8), ackTimeout)
                .thenApply(m -> decodeGet(m, stream, what));
    }

    private static Stored decodeGet(Message m, String stream, String what) {
        if (m.isStatusMessage()) {
            throw new UnavailableException(what + " of " + stream + ": status " + m.getStatus().getMessageWithCode());
        }
        Map<String, Object> r = JsApi.parseObject(m.getData(), what + " of " + stream);
        if (r.get("error") instanceof Map) {
            Map<String, Object> e = JsApi.obj(r.get("error"));
            long code = JsApi.num(e.get("err_code"));
            if (code == JsApi.NO_MESSAGE) {
                return NONE;
            }
            if (code == JsApi.STREAM_NOT_FOUND) {
                throw new NotFoundException("partition stream " + stream + " is gone");
            }
            throw new UnavailableException(what + " of " + stream + ": " + e.get("description") + " (" + code + ")");
        }
        Map<String, Object> msg = JsApi.obj(r.get("message"));
        if (msg.isEmpty()) {
            throw new UnavailableException(what + " of " + stream + ": empty answer");
        }
        Base64.Decoder d = Base64.getDecoder();
        byte[] h = msg.get("hdrs") instanceof String ? d.decode((String) msg.get("hdrs")) : null;
        byte[] data = msg.get("data") instanceof String ? d.decode((String) msg.get("data")) : new byte[0];
        return new Stored(JsApi.num(msg.get("seq")), h, data);
    }

    // ---- the control loop: fences -----------------------------------------------------------

    private TopicDescriptor fetch() {
        long deadline = System.nanoTime() + client.options().requestTimeout().toNanos();
        while (true) {
            TopicDescriptor d;
            try {
                d = client.topic(topic);
            } catch (UnavailableException e) {
                if (e.topicCreating() && System.nanoTime() < deadline) {
                    sleepOrThrow(50);
                    continue;
                }
                throw e;
            }
            if (d.creating() && System.nanoTime() < deadline) {
                sleepOrThrow(50);
                continue;
            }
            if (d.creating() || d.deleting()) {
                throw new UnavailableException("topic " + topic + " is being " + (d.creating() ? "created" : "deleted") + "; retry later");
            }
            String original;
            lock.lock();
            try {
                original = desc == null ? null : desc.id();
            } finally {
                lock.unlock();
            }
            if (original != null && !original.isEmpty() && !d.id().equals(original)) {
                throw new NotFoundException(String.format(
                        "topic %s was deleted (and created again as a new topic, id %s, not %s): records not yet acknowledged were not stored; make a new producer",
                        topic, d.id(), original));
            }
            return d;
        }
    }

    private static void sleepOrThrow(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted", e);
        }
    }

    /** Makes d the current layout: its current epoch's partitioner, and no sinks yet. */
    private void install(TopicDescriptor d) {
        Partitioner p = client.partitioner(d.current().partitioner());
        // The tombstone TTL follows the descriptor: held while a backfill runs (spec/protocol.md §10.2).
        deleteRetentionMs = d.deleteRetentionMs;
        lock.lock();
        try {
            desc = d;
            part = p;
            sinks = new HashMap<>();
        } finally {
            lock.unlock();
        }
    }

    /** Asks the control loop to re-read the descriptor (coalesced). */
    private void requestCheck() {
        if (checkQueued.compareAndSet(false, true)) {
            control.add(CHECK);
        }
    }

    /** What a sink tells the control loop (see {@link Sink}). */
    private record Event(Sink sink, List<Pending> left, TopicDescriptor fenced, boolean fin) {}

    /**
     * Re-reads the descriptor when asked (a topic event, a stall, no responders) and repartitions
     * when the epoch moved on (or a sink found it fenced). Runs alone.
     */
    private void controlLoop() {
        while (true) {
            Object o;
            try {
                o = control.take();
            } catch (InterruptedException e) {
                return;
            }
            try {
                if (o == STOP) {
                    return;
                }
                if (o == CHECK) {
                    checkQueued.set(false);
                    TopicDescriptor d;
                    try {
                        d = fetch();
                    } catch (NotFoundException | PermissionDeniedException e) {
                        fail(e);
                        continue;
                    } catch (PctlException e) {
                        continue; // broker unreachable: the sinks' own timeouts settle their batches
                    }
                    if (d.current().number() > epoch()) {
                        logf("epoch %d of topic %s is current: settling the partitions of epoch %d", d.current().number(), topic, epoch());
                        if (!repartition(d)) {
                            return;
                        }
                    }
                } else if (o instanceof Event ev) {
                    if (!ev.fin() && ev.fenced() != null && ev.fenced().current().number() > epoch()) {
                        if (!repartition(ev.fenced())) {
                            return;
                        }
                    }
                }
            } catch (RuntimeException e) {
                PctlException err = e instanceof PctlException ? (PctlException) e : new InternalException("producer " + id + ": " + e, e);
                fail(err);
            }
        }
    }

    /**
     * Moves every unacknowledged record to the new epoch, in the original send order. Every old
     * sink settles its open batch first (so nothing it sent can still be stored), then hands back
     * its records. Returns false when the producer stopped meanwhile.
     */
    private boolean repartition(TopicDescriptor d) {
        List<Sink> old;
        lock.lock();
        try {
            switching = true;
            old = new ArrayList<>(sinks.values());
        } finally {
            lock.unlock();
        }
        for (Sink s : old) {
            s.fence(d);
        }
        List<Pending> left = new ArrayList<>();
        Set<Sink> waiting = new HashSet<>(old);
        boolean checkAgain = false;
        while (!waiting.isEmpty()) {
            Object o;
            try {
                o = control.take();
            } catch (InterruptedException e) {
                o = STOP;
            }
            if (o == STOP) {
                control.add(STOP);
                failAll(left, new UnavailableException("producer " + id + " closed before the record was acknowledged"));
                return false;
            }
            if (o == CHECK) {
                checkQueued.set(false);
                checkAgain = true;
                continue;
            }
            Event ev = (Event) o;
            if (ev.fin() && waiting.remove(ev.sink())) {
                left.addAll(ev.left());
                if (ev.fenced() != null && ev.fenced().current().number() > d.current().number()) {
                    d = ev.fenced();
                }
            } else if (ev.fin()) {
                left.addAll(ev.left()); // cannot happen (every sink is an old one); never drop a record
            }
        }
        try {
            install(d);
        } catch (PctlException e) {
            fail(e);
            failAll(left, e);
            lock.lock();
            try {
                switching = false;
            } finally {
                lock.unlock();
            }
            return true;
        }
        lock.lock();
        try {
            left.addAll(held);
            held.clear();
            long[] seqs = new long[left.size()];
            for (int i = 0; i < seqs.length; i++) {
                seqs[i] = left.get(i).seq;
            }
            List<Pending> ordered = new ArrayList<>(left.size());
            for (int i : Rules.resendOrder(seqs)) { // spec/protocol.md §5.1.2 step 4
                ordered.add(left.get(i));
            }
            left.clear();
            left.addAll(ordered);
            int n = 0;
            for (Pending pd : left) {
                if (pd.done) {
                    continue;
                }
                if (fatal != null) {
                    completeLocked(pd, null, fatal);
                    continue;
                }
                try {
                    assignLocked(pd);
                    n++;
                } catch (PctlException e) {
                    completeLocked(pd, null, e);
                }
            }
            switching = false;
            resent.addAndGet(n);
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        if (checkAgain) {
            requestCheck();
        }
        return true;
    }

    private void failAll(List<Pending> l, PctlException err) {
        lock.lock();
        try {
            for (Pending pd : l) {
                completeLocked(pd, null, err);
            }
        } finally {
            lock.unlock();
        }
    }

    // ---- one partition's sink ---------------------------------------------------------------

    /** An unacknowledged record. */
    private final class Pending {
        final long seq;
        final ProducerRecord rec;
        final Callback callback;
        int epoch = -1;
        int partition = -1;
        long ts; // Pctl-Time
        String keyHeader; // Pctl-Key, null for a keyless record
        String msgId; // Nats-Msg-Id
        byte[] block; // the header block: the record's identity, the same for every send but a tombstone's Nats-TTL
        long blockRetentionMs; // the tombstone retention block was made with
        int sends; // publishes so far, in any partition
        /** Stream -> the sink's floor at the record's first send there: a stored copy is above it. */
        final Map<String, Long> floors = new HashMap<>(2);
        PctlException failed; // the server refused the record for good
        final InProcess inProcess = new InProcess(); // its message id's 10158 answers (spec/protocol.md §5.1.5)
        boolean done; // guarded by the producer's lock

        Pending(long seq, ProducerRecord rec, Callback callback) {
            this.seq = seq;
            this.rec = rec;
            this.callback = callback;
        }

        String producerId() {
            return id;
        }
    }

    /** The open fast batch: recs.get(i) was sent with batch seq i+1. */
    private static final class Batch {
        final String id;
        final List<Pending> recs = new ArrayList<>();
        final Set<String> keys = new HashSet<>(); // keys in the batch (only kept when one batch may not hold a key twice)
        int acked; // records 1..acked are persisted and finished
        int flowed; // records 1..flowed are persisted says a flow ack (the window's base)
        long commit; // batch seq of the commit message once sent (n for op 2, n+1 for an EOB)
        String anomaly; // why the batch must be settled; null while clean
        boolean ended; // the server ended the batch (gap or error): a PubAck is on its way
        boolean unknown; // the server no longer knows the batch (refusal 10208)
        boolean never; // the first message was refused: nothing of the batch is stored
        boolean noResp; // no responders: no stream on the subject (fenced?)
        Reply pubAck;
        long progress; // last reply (nanoTime)
        long checked; // last stall check
        boolean transientErr; // the anomaly calls for a pause before re-sending

        Batch(String id) {
            this.id = id;
        }
    }

    /** The producer stopped (closed): a sink thread unwinds. */
    private static final class Stopped extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Stopped() {
            super("stopped", null, false, false);
        }
    }

    /** How many records a batch may hold; what the server may pass between flow acks. */
    private int flow() {
        return Math.max(1, opts.maxInFlight() / 4);
    }

    /**
     * Sends one partition's records of one epoch as a series of fast batches (spec/protocol.md
     * §5.1.2), on its own thread: one batch open at a time, many records in flight inside it,
     * committed when the queue runs empty or the batch is full. After an anomaly it stops
     * sending, settles the open batch and re-sends the rest in a new batch; when its epoch was
     * fenced it hands the rest back to the control loop.
     *
     * <p>The thread owns everything but the fields guarded by the sink's monitor (queue and
     * control flags), which other threads set.
     */
    private final class Sink {
        final int epoch;
        final int partition;
        final String subject;
        final String stream;
        final Thread thread;
        final LinkedBlockingQueue<Object> mailbox = new LinkedBlockingQueue<>(); // replies and WAKE
        private final AtomicBoolean woken = new AtomicBoolean();

        // Guarded by this:
        private final ArrayDeque<Pending> queue = new ArrayDeque<>();
        private TopicDescriptor fenceDesc; // the control loop says this descriptor ended the sink's epoch
        private PctlException aborted;
        private boolean connLost; // a disconnect happened since the run loop last looked

        // The sink's thread only:
        private TopicDescriptor fencedSelf; // found its epoch fenced; waits to be stopped
        private long floor; // every record this sink stores is above this stream sequence
        private boolean floorKnown;
        /**
         * The stream is on a cluster: records finish only when their batch is confirmed (nats-server
         * 2.15.2 counts, in flow acks and PubAcks, batch messages whose raft proposals a leader's term
         * change dropped).
         */
        private boolean verify;
        private String leader = "";
        private String leaderSince = "";
        private long leaderSinceNanos; // leaderSince on this machine's monotonic clock (approximately)
        private long replicas;
        private Batch b;
        private long backoff;

        Sink(int epoch, int partition) {
            this(epoch, partition, Compaction.batchEndSubject(topic, epoch, partition, keySubjects));
        }

        /** A sink whose EOBs (and a plain topic's records) go to subject. */
        Sink(int epoch, int partition, String subject) {
            this.epoch = epoch;
            this.partition = partition;
            this.subject = subject;
            this.stream = "PCTL_" + topic + "_" + partition;
            this.thread = new Thread(this::run, "pctl-producer-" + id + "-e" + epoch + "p" + partition);
            thread.setDaemon(true);
        }

        void signal() {
            if (woken.compareAndSet(false, true)) {
                mailbox.add(WAKE);
            }
        }

        synchronized void pushLocked(Pending pd) {
            queue.addLast(pd);
        }

        void push(Pending pd) {
            pushLocked(pd);
            signal();
        }

        void fence(TopicDescriptor d) {
            synchronized (this) {
                fenceDesc = d;
            }
            signal();
        }

        void abort(PctlException err) {
            synchronized (this) {
                if (aborted == null) {
                    aborted = err;
                }
            }
            signal();
        }

        void connLost() {
            synchronized (this) {
                connLost = true;
            }
            signal();
        }

        private void log(String format, Object... args) {
            logf("partition %d of epoch %d: " + format, prepend(partition, epoch, args));
        }

        private Object[] prepend(Object a, Object b2, Object[] rest) {
            Object[] all = new Object[rest.length + 2];
            all[0] = a;
            all[1] = b2;
            System.arraycopy(rest, 0, all, 2, rest.length);
            return all;
        }

        private void finish(Pending pd, long streamSeq, boolean dup) {
            complete(pd, new RecordMetadata(pd.seq, partition, epoch, streamSeq, dup), null);
        }

        private void finishErr(Pending pd, PctlException err) {
            complete(pd, null, err);
        }

        private void checkStopped() {
            if (stopped && aborted() != null) {
                throw new Stopped();
            }
        }

        private synchronized PctlException aborted() {
            return aborted;
        }

        private void sleep(long ms) {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                throw new Stopped();
            }
            checkStopped();
        }

        /** The back-off before retry number attempt: 50 ms doubling up to 1 s. */
        private long pause(int attempt) {
            long d = 50;
            for (int i = 0; i < attempt && d < 1000; i++) {
                d *= 2;
            }
            return Math.min(d, 1000);
        }

        void run() {
            try {
                loop();
            } catch (Stopped e) {
                failAll(takeQueue(), abortedOr());
                exit(new Event(this, List.of(), null, true));
            } catch (RuntimeException e) {
                // A bug: never leave records without a fate.
                PctlException err = e instanceof PctlException ? (PctlException) e : new InternalException("producer " + id + ": partition " + partition + ": " + e, e);
                fail(err);
                failAll(takeQueue(), err);
                exit(new Event(this, List.of(), null, true));
            }
        }

        private PctlException abortedOr() {
            PctlException a = aborted();
            return a != null ? a : new UnavailableException("producer " + id + " closed before the record was acknowledged");
        }

        private void loop() {
            while (true) {
                PctlException abortedNow;
                TopicDescriptor fenceNow;
                boolean lost;
                synchronized (this) {
                    abortedNow = aborted;
                    fenceNow = fenceDesc;
                    lost = connLost;
                    connLost = false;
                }
                if (abortedNow != null) {
                    failAll(takeQueue(), abortedNow);
                    exit(new Event(this, List.of(), null, true));
                    return;
                }
                if (fencedSelf != null && fenceNow == null) {
                    waitWake(); // fenced: wait for the control loop to stop the sink (it was asked)
                    continue;
                }
                if (b != null) {
                    if (lost && b.anomaly == null && (b.recs.size() > b.acked || b.commit > 0)) {
                        b.anomaly = "the connection was lost with records in flight";
                    }
                    if (fenceNow != null && b.anomaly == null) {
                        b.anomaly = "epoch " + fenceNow.current().number() + " is current";
                    }
                    if (b.anomaly != null) {
                        TopicDescriptor fenced;
                        try {
                            fenced = settle(fenceNow);
                        } catch (PctlException e) {
                            if (aborted() == null) {
                                fail(e);
                            }
                            continue; // aborted now: the top of the loop fails the records
                        }
                        if (fenced != null && fenceNow == null) {
                            fencedSelf = fenced;
                            control.add(new Event(this, List.of(), fenced, false));
                        }
                        continue;
                    }
                } else if (fenceNow != null) {
                    exit(new Event(this, takeQueue(), fenceNow, true));
                    return;
                }
                if (b == null && !floorKnown && queued() > 0) {
                    try {
                        readFloor();
                    } catch (PctlException e) {
                        if (aborted() == null) {
                            fail(e);
                        }
                        continue;
                    }
                }
                fill();
                await();
            }
        }

        private void exit(Event ev) {
            if (b != null) {
                batches.remove(b.id);
                b = null;
            }
            control.add(ev);
            if (stopped) {
                failAll(ev.left(), abortedOr());
            }
        }

        private synchronized int queued() {
            return queue.size();
        }

        /** Every record not acknowledged, the open batch's first, in order. */
        private List<Pending> takeQueue() {
            List<Pending> left = new ArrayList<>();
            if (b != null) {
                left.addAll(b.recs.subList(b.acked, b.recs.size()));
                batches.remove(b.id);
                b = null;
            }
            synchronized (this) {
                left.addAll(queue);
                queue.clear();
            }
            return left;
        }

        private void waitWake() {
            while (true) {
                Object o;
                try {
                    o = mailbox.take();
                } catch (InterruptedException e) {
                    throw new Stopped();
                }
                if (o == WAKE) {
                    woken.set(false);
                    return;
                }
                // a reply to a batch no longer open: dropped
            }
        }

        /** The stream's info (answered by its leader). */
        private Map<String, Object> streamInfo() {
            try {
                return JsApi.request(client, "$JS.API.STREAM.INFO." + stream, null, new byte[0], ackTimeout);
            } catch (JsApi.JsError e) {
                if (e.errCode == JsApi.STREAM_NOT_FOUND) {
                    fetch(); // a new topic id is the better error
                    throw new NotFoundException("partition stream " + stream + " of topic " + topic + " does not exist");
                }
                throw new UnavailableException("read the info of " + stream + ": " + e.getMessage());
            }
        }

        /**
         * Reads the stream's last sequence before the sink's first batch, and checks that the
         * stream takes fast batches (allow_batched, API level 4).
         */
        private void readFloor() {
            for (int attempt = 0; ; attempt++) {
                checkStopped();
                Map<String, Object> info;
                try {
                    info = streamInfo();
                } catch (NotFoundException | PermissionDeniedException e) {
                    throw e;
                } catch (PctlException e) {
                    if (attempt % 10 == 9) {
                        log("reading stream %s: %s; retrying", stream, e.getMessage());
                    }
                    sleep(pause(attempt));
                    continue;
                }
                Map<String, Object> config = JsApi.obj(info.get("config"));
                if (!Boolean.TRUE.equals(config.get("allow_batched"))) {
                    throw new UnavailableException("partition stream " + stream
                            + " does not allow fast batch publishing (allow_batched), which pctl's producer needs (spec/protocol.md §5.1); restart 'pctl serve' with this version: it updates the streams of existing topics");
                }
                Object level = JsApi.obj(config.get("metadata")).get("_nats.level");
                if (level instanceof String) {
                    int l;
                    try {
                        l = Integer.parseInt((String) level);
                    } catch (NumberFormatException e) {
                        l = 0;
                    }
                    if (l < 4) {
                        throw new UnavailableException("partition stream " + stream + " reports JetStream API level " + level
                                + "; fast batches need level 4 (nats-server 2.14 or later on every node, spec/protocol.md §5.1): upgrade the NATS servers");
                    }
                }
                floor = JsApi.num(JsApi.obj(info.get("state")).get("last_seq"));
                floorKnown = true;
                Map<String, Object> cluster = JsApi.obj(info.get("cluster"));
                verify = cluster.get("name") instanceof String && !((String) cluster.get("name")).isEmpty();
                noteLeader(info);
                return;
            }
        }

        /**
         * Notes the stream's leader, its election time and its replicas, and reports whether any
         * changed since the last note (or the election is recent: it may have dropped proposals).
         */
        private boolean noteLeader(Map<String, Object> info) {
            Map<String, Object> cluster = JsApi.obj(info.get("cluster"));
            String l = cluster.get("leader") instanceof String ? (String) cluster.get("leader") : "";
            String since = cluster.get("leader_since") instanceof String ? (String) cluster.get("leader_since") : "";
            long r = JsApi.num(JsApi.obj(info.get("config")).get("replicas"));
            boolean changed = l.isEmpty() || !l.equals(leader) || !since.equals(leaderSince) || r != replicas;
            if (!since.equals(leaderSince)) {
                long age = 0;
                try {
                    age = Duration.between(java.time.Instant.parse(since), java.time.Instant.now()).toNanos();
                } catch (RuntimeException e) {
                    age = 0; // unparsable: count it as new
                }
                leaderSinceNanos = System.nanoTime() - Math.max(0, age);
            }
            leader = l;
            leaderSince = since;
            replicas = r;
            return changed || System.nanoTime() - leaderSinceNanos <= LEADER_SETTLED_NANOS;
        }

        /**
         * The per-key rule (spec/protocol.md §5.1.2): on a cluster a batch never holds two records
         * of the same key, so that a record the server counted but dropped (a hole) is the only one
         * of its key in its batch, and its re-send goes first in the next batch, which starts only
         * after this one is confirmed. Every stream on a cluster, R1 included: a live replica
         * change gives an R1 stream a raft group, and the producer cannot know that before it sends.
         */
        private boolean oneRecordPerKey() {
            return verify;
        }

        /**
         * Opens a batch if there is none and records wait, sends records while the window allows,
         * and commits when the queue ran empty, the batch is full, or (on a replicated stream) the
         * next record's key is in the batch already.
         */
        private void fill() {
            if (b == null) {
                if (queued() > 0 && raw.isClosed()) {
                    fail(new UnavailableException("producer " + id + ": the client was closed with records not yet acknowledged"));
                    return;
                }
                if (queued() == 0 || !raw.connected()) {
                    return;
                }
                b = new Batch(newToken());
                b.progress = System.nanoTime();
                b.checked = b.progress;
                batches.put(b.id, this);
            }
            Batch bt = b;
            if (bt.anomaly != null || bt.commit > 0) {
                return;
            }
            int window = opts.maxInFlight();
            int size = opts.batchSize();
            int flow = flow();
            boolean perKey = oneRecordPerKey();
            boolean clash = false;
            while (bt.recs.size() - Math.max(bt.acked, bt.flowed) < window && bt.recs.size() < size) {
                Pending pd;
                boolean last;
                Pending next;
                synchronized (this) {
                    pd = queue.peekFirst();
                    if (pd == null) {
                        break;
                    }
                    if (!Rules.admits(perKey, pd.keyHeader == null, perKey && bt.keys.contains(pd.keyHeader))) {
                        clash = true;
                        break;
                    }
                    queue.pollFirst();
                    next = queue.peekFirst();
                    last = next == null;
                }
                long bseq = bt.recs.size() + 1;
                int op = OP_APPEND;
                if (bseq == 1) {
                    op = OP_START;
                    if (last || size == 1 || (perKey && pd.keyHeader != null && pd.keyHeader.equals(next.keyHeader))) {
                        op = OP_COMMIT; // a batch of one record: stored and committed by one message
                    }
                }
                try {
                    raw.publishDeferred(keySubjects ? Compaction.recordSubject(topic, epoch, partition, true, pd.rec.key()) : subject,
                            replySubject(inbox, bt.id, flow, bseq, op), pd.block, pd.rec.value());
                } catch (IOException e) {
                    // Not sent (not connected): put it back and settle.
                    synchronized (this) {
                        queue.addFirst(pd);
                    }
                    bt.anomaly = "publish failed: " + e.getMessage();
                    bt.transientErr = true;
                    return;
                }
                pd.sends++;
                pd.floors.putIfAbsent(stream, floor);
                bt.recs.add(pd);
                if (perKey && pd.keyHeader != null) {
                    bt.keys.add(pd.keyHeader);
                }
                if (op == OP_COMMIT) {
                    bt.commit = bseq;
                    return;
                }
            }
            if (!bt.recs.isEmpty() && (bt.recs.size() >= size || clash || queued() == 0)) {
                long bseq = bt.recs.size() + 1;
                try {
                    raw.publishDeferred(subject, replySubject(inbox, bt.id, flow, bseq, OP_EOB), null, new byte[0]);
                } catch (IOException e) {
                    bt.anomaly = "publish failed: " + e.getMessage();
                    bt.transientErr = true;
                    return;
                }
                bt.commit = bseq;
            }
        }

        /** Blocks until something happens: a reply, a new record or control flag, or a timer. */
        private void await() {
            Batch bt = b;
            if (bt == null || bt.anomaly != null) {
                if (bt == null) {
                    waitWake();
                }
                return; // settle next
            }
            // Something is in flight: wake for the stall check or the acknowledgement timeout.
            long now = System.nanoTime();
            long next = Math.min(bt.checked + opts.stallTimeout().toNanos(), bt.progress + ackTimeoutNanos);
            Object o;
            try {
                o = mailbox.poll(Math.max(TimeUnit.MILLISECONDS.toNanos(1), next - now), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                throw new Stopped();
            }
            if (o == WAKE) {
                woken.set(false);
                return;
            }
            if (o instanceof Reply r) {
                handle(r);
                // Take every reply already there before sending more.
                while (b != null && b.anomaly == null) {
                    Object m = mailbox.poll();
                    if (m == null) {
                        break;
                    }
                    if (m == WAKE) {
                        woken.set(false);
                        break;
                    }
                    handle((Reply) m);
                }
                return;
            }
            now = System.nanoTime();
            if (now - bt.progress >= ackTimeoutNanos) {
                bt.anomaly = "no reply within " + ackTimeout.toMillis() + " ms";
                return;
            }
            if (now - bt.checked >= opts.stallTimeout().toNanos()) {
                bt.checked = now;
                requestCheck(); // a fenced subject on a cluster may answer nothing
            }
        }

        /** Applies one reply to the open batch (replies to other batches are dropped). */
        private void handle(Reply r) {
            Batch bt = b;
            if (bt == null || !r.batch.equals(bt.id)) {
                return;
            }
            bt.progress = System.nanoTime();
            bt.checked = bt.progress;
            switch (r.kind) {
                case FLOW_ACK:
                    if (r.ackSeq > bt.recs.size()) {
                        bt.anomaly = "flow acknowledgement of batch seq " + r.ackSeq + ", only " + bt.recs.size() + " sent";
                        return;
                    }
                    bt.flowed = Math.max(bt.flowed, (int) r.ackSeq);
                    if (!verify) {
                        ackUpTo((int) r.ackSeq);
                    }
                    break;
                case GAP:
                    bt.ended = true;
                    if (bt.anomaly == null) {
                        bt.anomaly = "gap: the server expected batch seq " + r.gapExpected + ", got " + r.gapGot;
                    }
                    break;
                case FLOW_ERR:
                    bt.ended = true;
                    refused(r);
                    if (bt.anomaly == null) {
                        bt.anomaly = "batch seq " + r.gapGot + " refused: " + r.errText + " (" + r.errCode + ")";
                    }
                    break;
                case REFUSAL:
                    refused(r);
                    if (bt.anomaly == null) {
                        bt.anomaly = "batch seq " + r.seq + " refused: " + r.errText + " (" + r.errCode + ")";
                    }
                    break;
                case NO_RESPONDERS:
                    bt.noResp = true;
                    if (bt.anomaly == null) {
                        bt.anomaly = "no stream answers " + subject;
                    }
                    requestCheck();
                    break;
                case PUB_ACK:
                    bt.pubAck = r;
                    if (bt.anomaly == null && bt.commit > 0 && r.ackBatch.equals(bt.id) && !r.duplicate && r.count == bt.recs.size()) {
                        if (verify) {
                            Confirmed c;
                            try {
                                c = confirm(bt.recs.size(), r.streamSeq);
                            } catch (PctlException e) {
                                bt.anomaly = "cannot confirm the batch on the cluster: " + e.getMessage();
                                return; // settle takes it up (the PubAck is kept)
                            }
                            if (!c.trusted()) {
                                endConfirmed(c.found(), r.streamSeq);
                                return;
                            }
                        }
                        committed(r); // clean
                        return;
                    }
                    if (bt.anomaly == null) {
                        bt.anomaly = String.format("PubAck of %d records (batch %s, duplicate %b), %d sent, commit sent: %b", r.count, r.ackBatch, r.duplicate,
                                bt.recs.size(), bt.commit > 0);
                    }
                    break;
                default:
                    if (bt.anomaly == null) {
                        bt.anomaly = "unexpected reply: " + r.errText;
                    }
            }
        }

        /** Records what a refusal says about one message of the batch. */
        private void refused(Reply r) {
            Batch bt = b;
            long s = r.kind == Kind.FLOW_ERR ? r.gapGot : r.seq;
            if (s >= 1 && s <= bt.recs.size()) {
                Pending pd = bt.recs.get((int) s - 1);
                boolean was = pd.inProcess.stuck();
                if (pd.inProcess.note(r.errCode) && !was) {
                    // Stuck (spec/protocol.md §5.1.5): a fast batch has no expected-sequence guard
                    // to renew the id under, so settling fails the record unless it finds it stored.
                    log("record %d (id %s): JetStream answered 10158 %d times; failing it unless it is found stored", pd.seq, pd.msgId, pd.inProcess.count());
                }
            }
            switch (r.errCode) {
                case ERR_TOO_LARGE:
                    if (s >= 1 && s <= bt.recs.size()) {
                        Pending pd = bt.recs.get((int) s - 1);
                        pd.failed = new BadRequestException(String.format(
                                "record %d refused by partition %d of topic %s: %s (JetStream error %d); a record must fit the stream's maximum message size", pd.seq, partition,
                                topic, r.errText, r.errCode));
                    }
                    break;
                case ERR_UNKNOWN_BATCH:
                    bt.unknown = true;
                    break;
                case ERR_BATCH_DISABLED:
                case ERR_BAD_PATTERN:
                case ERR_BAD_BATCH_ID:
                    fail(new UnavailableException(String.format(
                            "partition stream %s refused a fast batch: %s (JetStream error %d); pctl's producer needs nats-server 2.14+ and streams with allow_batched (restart 'pctl serve' to update them)",
                            stream, r.errText, r.errCode)));
                    break;
                default: // 10211, 10071, 10158 (until the id is stuck, §5.1.5) and anything else: retried after a pause
                    bt.transientErr = true;
            }
            if (s == 1 && r.kind == Kind.REFUSAL && r.errCode != ERR_UNKNOWN_BATCH) {
                bt.never = true; // the batch was never started: nothing of it is stored
            }
        }

        /** Finishes the records of batch seqs acked+1..n: the server persisted them. */
        private void ackUpTo(int n) {
            Batch bt = b;
            for (; bt.acked < n; bt.acked++) {
                Pending pd = bt.recs.get(bt.acked);
                if (pd.failed == null) {
                    finish(pd, 0, false);
                }
            }
        }

        /** Finishes a batch whose PubAck was clean. */
        private void committed(Reply r) {
            Batch bt = b;
            int n = bt.recs.size();
            Pending last = bt.recs.get(n - 1);
            if (bt.acked < n - 1) {
                ackUpTo(n - 1);
            }
            if (bt.acked < n) {
                // Its first send, stored by this batch: the PubAck names its sequence.
                finish(last, last.sends == 1 && r.streamSeq > 0 ? r.streamSeq : 0, false);
                bt.acked = n;
            }
            endBatch(r.streamSeq);
            backoff = 0;
        }

        private void endBatch(long streamSeq) {
            if (streamSeq > floor) {
                floor = streamSeq;
            }
            batches.remove(b.id);
            b = null;
        }

        /**
         * Learns which prefix of the open batch is stored, finishes it, and queues the rest again
         * (in the same epoch) or returns the descriptor that fenced the partition (the rest stays
         * for takeQueue). The batch is closed when settle returns: nothing more of it can be stored.
         */
        private TopicDescriptor settle(TopicDescriptor fenceNow) {
            Batch bt = b;
            settles.incrementAndGet();
            log("settling batch %s (%d records sent, %d acknowledged): %s", bt.id, bt.recs.size(), bt.acked, bt.anomaly);
            TopicDescriptor[] d = {fenceNow};
            TopicDescriptor[] fenced = {fenceNow != null && fenceNow.current().number() > epoch ? fenceNow : null};
            int n = bt.acked; // records 1..n are persisted
            Map<Integer, Long> exact = new HashMap<>();
            if (!bt.never) {
                n = Math.max(n, learn(d, fenced, exact));
            }
            // Records 1..n are persisted (a prefix); the rest are not, and never will be. On a
            // cluster the server's word is checked first (confirm).
            Map<Integer, Long> stored = new HashMap<>();
            for (int i = bt.acked; i < n; i++) {
                stored.put(i, exact.getOrDefault(i, 0L));
            }
            if (verify && n > bt.acked) {
                for (int attempt = 0; ; attempt++) {
                    checkStopped();
                    long upTo = bt.pubAck != null ? bt.pubAck.streamSeq : 0;
                    try {
                        Confirmed c = confirm(n, upTo);
                        if (!c.trusted()) {
                            stored = c.found();
                        }
                        break;
                    } catch (NotFoundException | PermissionDeniedException e) {
                        throw e;
                    } catch (PctlException e) {
                        log("confirming batch %s: %s; retrying", bt.id, e.getMessage());
                        sleep(pause(attempt));
                    }
                }
            }
            List<Pending> rest = finishStored(stored);
            boolean trans = bt.transientErr;
            batches.remove(bt.id);
            b = null;
            log("batch %s: %d of %d records stored; %d to send again", bt.id, bt.recs.size() - rest.size(), bt.recs.size(), rest.size());
            requeueFirst(rest);
            if (fenced[0] != null) {
                return fenced[0];
            }
            if (trans) {
                backoff = Math.min(Math.max(2 * backoff, 50), 1000);
                sleep(backoff);
            }
            return null;
        }

        private void requeueFirst(List<Pending> rest) {
            synchronized (this) {
                for (int i = rest.size() - 1; i >= 0; i--) {
                    queue.addFirst(rest.get(i));
                }
            }
        }

        /**
         * How many records of the open batch are persisted (settle's core): from the batch's
         * PubAck, by closing the batch with an EOB, or by reading the partition back.
         */
        private int learn(TopicDescriptor[] d, TopicDescriptor[] fenced, Map<Integer, Long> exact) {
            Batch bt = b;
            boolean waited = false;
            boolean search = false;
            int silent = 0; // end-of-batch messages that got no answer
            for (int attempt = 0; ; attempt++) {
                checkStopped();
                PctlException ab;
                synchronized (this) {
                    if (fenceDesc != null && (d[0] == null || fenceDesc.current().number() > d[0].current().number())) {
                        d[0] = fenceDesc; // the control loop knows a newer descriptor
                    }
                    ab = aborted;
                }
                if (ab != null) {
                    throw ab;
                }
                if (bt.pubAck != null) {
                    Checked c = checkPubAck(bt.pubAck);
                    if (c.ok()) {
                        if (c.at() >= 0) {
                            exact.put(c.at(), bt.pubAck.streamSeq);
                        }
                        if (bt.pubAck.streamSeq > floor && c.k() > bt.acked) {
                            floor = bt.pubAck.streamSeq;
                        }
                        return c.k();
                    }
                    bt.pubAck = null; // not provably about these records: read the partition back
                    search = true;
                }
                if (bt.ended && !waited) {
                    // The server ended the batch (a gap or an error): its PubAck is on its way.
                    waited = true;
                    awaitSettling(() -> bt.pubAck != null);
                    continue;
                }
                if (search || bt.unknown) {
                    long[] found = search(fenced[0]);
                    int k = (int) found[0];
                    long at = found[1];
                    if (k > bt.acked && at > 0) {
                        exact.put(k - 1, at);
                        floor = Math.max(floor, at);
                    }
                    return k;
                }
                // Close the batch ourselves: an EOB above everything sent, on the stream's current
                // subject (after a fence the batch lives on under the stream's new subject).
                waitConnected();
                if (bt.noResp || attempt > 0) {
                    try {
                        d[0] = fetch();
                    } catch (NotFoundException | PermissionDeniedException e) {
                        throw e;
                    } catch (PctlException e) {
                        log("reading the descriptor: %s; closing the batch on %s", e.getMessage(), subject);
                    }
                }
                String subj = subject;
                TopicDescriptor cur = d[0];
                if (cur != null && cur.current().number() > epoch) {
                    fenced[0] = cur;
                    subj = Compaction.batchEndSubject(topic, cur.current().number(), partition, keySubjects);
                    if (partition >= cur.current().partitions()) {
                        // Shrunk away: the retired subject takes no publishes (not even an EOB),
                        // and nothing more of the batch can be stored: read the partition back.
                        search = true;
                        continue;
                    }
                } else if (cur != null && cur.changing() && bt.noResp) {
                    // Fenced but the new epoch is not active yet: wait for it before closing.
                    if (attempt % 20 == 0) {
                        log("epoch change of topic %s in progress; waiting for it", topic);
                    }
                    sleep(Math.min(pause(attempt), 50));
                    continue;
                }
                bt.noResp = false;
                long bseq = bt.recs.size() + 1;
                try {
                    raw.publishDeferred(subj, replySubject(inbox, bt.id, 1, bseq, OP_EOB), null, new byte[0]);
                } catch (IOException e) {
                    log("closing batch %s: %s", bt.id, e.getMessage());
                }
                // Awaited for the acknowledgement timeout but at least EOB_WAIT_NANOS (spec §5.1.2,
                // settle 1): with a timeout of a few milliseconds a late answer is not silence.
                awaitSettling(() -> bt.pubAck != null || bt.unknown || bt.noResp, Math.max(ackTimeoutNanos, EOB_WAIT_NANOS));
                if (bt.pubAck == null && !bt.unknown && !bt.noResp) {
                    // No answer at all to the EOB. nats-server 2.15.2 keeps a fast batch whose
                    // commit waits for proposals a replica or placement change dropped
                    // "committing" for good (its cleanup timer stops at the commit) and skips
                    // every later message of it without a reply, while the stream takes new
                    // batches: read the partition back (spec/protocol.md §5.1.2, settle 1)
                    // instead of closing it forever.
                    if (++silent >= SILENT_EOBS) {
                        log("batch %s: %d EOBs on %s had no answer within %d ms each; reading the partition back",
                                bt.id, silent, subj, Math.max(ackTimeoutNanos, EOB_WAIT_NANOS) / 1_000_000);
                        search = true;
                        continue;
                    }
                    // Otherwise back off. (No responders: the subject moved again, read the
                    // descriptor at once; waiting for an epoch change has its own pause.)
                    sleep(pause(silent - 1));
                }
            }
        }

        /** Handles replies while settling until cond holds or the acknowledgement timeout passes. */
        private void awaitSettling(java.util.function.BooleanSupplier cond) {
            awaitSettling(cond, ackTimeoutNanos);
        }

        private void awaitSettling(java.util.function.BooleanSupplier cond, long waitNanos) {
            long deadline = System.nanoTime() + waitNanos;
            while (!cond.getAsBoolean()) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                Object o;
                try {
                    o = mailbox.poll(left, TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    throw new Stopped();
                }
                if (o == null) {
                    return;
                }
                if (o == WAKE) {
                    woken.set(false);
                    if (aborted() != null) {
                        signal(); // the run loop sees it too
                        return;
                    }
                    continue;
                }
                handleSettling((Reply) o);
            }
        }

        /**
         * Applies a reply while the batch is being settled: flow acks still confirm persisted
         * records; a PubAck, refusal or no responders say how the batch ended.
         */
        private void handleSettling(Reply r) {
            Batch bt = b;
            if (bt == null || !r.batch.equals(bt.id)) {
                return;
            }
            switch (r.kind) {
                case FLOW_ACK:
                    if (r.ackSeq <= bt.recs.size() && !verify) {
                        ackUpTo((int) r.ackSeq);
                    }
                    break;
                case GAP:
                    bt.ended = true;
                    break;
                case FLOW_ERR:
                    refused(r);
                    bt.ended = true;
                    break;
                case REFUSAL:
                    refused(r);
                    break;
                case NO_RESPONDERS:
                    if (r.op == OP_EOB) {
                        bt.noResp = true; // only our EOB's: the records' own 503s are old news by now
                    }
                    break;
                case PUB_ACK:
                    bt.pubAck = r;
                    break;
                default:
                    break;
            }
        }

        private void waitConnected() {
            while (!raw.connected()) {
                if (raw.isClosed()) {
                    throw new UnavailableException("producer " + id + ": the client was closed with records not yet acknowledged");
                }
                sleep(20);
            }
        }

        private record Checked(int k, int at, boolean ok) {}

        /**
         * What a PubAck of a batch that had an anomaly proves. ok: records 1..k are persisted; at
         * is the index of the record found at the PubAck's stream sequence (-1: none). Not ok: the
         * PubAck is not provably about this producer's records (read the partition back).
         */
        private Checked checkPubAck(Reply r) {
            Batch bt = b;
            int n = bt.recs.size();
            if (!r.ackBatch.equals(bt.id) || r.count > n || r.count < bt.acked) {
                return new Checked(0, -1, false);
            }
            int k = (int) r.count;
            if (r.duplicate) {
                // A batch of one record whose id was stored already: it counts only if the stored
                // message is this record.
                if (n != 1 || k != 1) {
                    return new Checked(0, -1, false);
                }
                if (bt.acked == 1) {
                    // Its flow ack counted the duplicate as persisted and acknowledged the record
                    // already: the PubAck adds nothing, and must not acknowledge it twice.
                    return new Checked(1, -1, true);
                }
                Stored m = getMsg(r.streamSeq);
                Pending pd = bt.recs.get(0);
                if (sameRecord(m, pd)) {
                    finish(pd, r.streamSeq, true);
                    bt.acked = 1;
                    return new Checked(1, -1, true);
                }
                pd.failed = new ConflictException(String.format(
                        "record %d (id %s) was acknowledged as a duplicate of stream sequence %d of partition %d of topic %s, which holds a different record: it is NOT stored; another client published with this record's deduplication id",
                        pd.seq, pd.msgId, r.streamSeq, partition, topic));
                return new Checked(1, -1, true);
            }
            if (k == 0 || k == bt.acked) {
                return new Checked(k, -1, true);
            }
            if (r.streamSeq == 0) {
                return new Checked(0, -1, false); // stored nothing new: cannot be checked
            }
            Stored m = getMsg(r.streamSeq);
            for (int i = k - 1; i >= 0; i--) {
                if (sameRecord(m, bt.recs.get(i))) {
                    return new Checked(k, i, true);
                }
                if (verify) {
                    break; // on a cluster only the last counted record proves the count
                }
            }
            log("the PubAck of batch %s names stream sequence %d, which holds none of its records", bt.id, r.streamSeq);
            return new Checked(0, -1, false);
        }

        /** One stored message from the stream leader (null when there is none), retrying transient failures. */
        private Stored getMsg(long s) {
            return retryLeader(() -> getAsync(stream, s));
        }

        /**
         * Runs one STREAM.MSG.GET request (get) until it is answered: the message, or null when
         * there is none. A stream without a leader answers "cluster not available" and one that is
         * electing answers nothing; both are retried with the back-off.
         */
        private Stored retryLeader(java.util.function.Supplier<CompletableFuture<Stored>> get) {
            for (int attempt = 0; ; attempt++) {
                checkStopped();
                try {
                    Stored m = get.get().get();
                    return m == NONE ? null : m;
                } catch (InterruptedException e) {
                    throw new Stopped();
                } catch (java.util.concurrent.ExecutionException e) {
                    if (e.getCause() instanceof NotFoundException nf) {
                        throw nf;
                    }
                }
                sleep(pause(attempt));
            }
        }

        /** Messages lo..hi, 64 requests in flight at a time (null where there is none). */
        private Stored[] getRange(long lo, long hi) {
            int n = (int) (hi - lo + 1);
            Stored[] out = new Stored[n];
            List<CompletableFuture<Stored>> fs = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                fs.add(getAsync(stream, lo + i));
            }
            for (int i = 0; i < n; i++) {
                Stored m;
                try {
                    m = fs.get(i).get();
                } catch (InterruptedException e) {
                    throw new Stopped();
                } catch (java.util.concurrent.ExecutionException e) {
                    if (e.getCause() instanceof NotFoundException nf) {
                        throw nf;
                    }
                    m = NONE;
                    Stored again = getMsg(lo + i);
                    m = again == null ? NONE : again;
                }
                out[i] = m == NONE ? null : m;
            }
            return out;
        }

        /**
         * The lowest stream sequence above which a copy of any of the open batch's records from
         * index from on can be stored: the sink's floor, or lower for records sent to this stream
         * before.
         */
        private long lowFloor(int from) {
            List<Long> first = new ArrayList<>();
            for (Pending pd : b.recs.subList(from, b.recs.size())) {
                Long f = pd.floors.get(stream);
                if (f != null) {
                    first.add(f);
                }
            }
            return Rules.searchFloor(floor, first);
        }

        private record Confirmed(Map<Integer, Long> found, boolean trusted) {}

        /**
         * Checks, on a cluster, records acked..k-1 of the open batch that the server counted as
         * persisted. When the stream's leader is the one noted before the batch (and not newly
         * elected), the count is trusted. Otherwise the stream is read back (readBack) and each
         * record looked for (every record of the batch, counted or not). Records not found get a
         * new deduplication id before they are sent again. That gives up deduplication, which is
         * safe only because readBack reads up to the stream leader's end (spec/protocol.md §5.1.2,
         * "the read-back's end").
         */
        private Confirmed confirm(int k, long upTo) {
            Batch bt = b;
            Map<String, Object> info = streamInfo();
            if (!noteLeader(info)) {
                return new Confirmed(null, true);
            }
            ReadBack rb = readBack(Math.max(JsApi.num(JsApi.obj(info.get("state")).get("last_seq")), upTo));
            Map<Integer, Long> found = rb.found();
            for (int i = bt.acked; i < bt.recs.size(); i++) {
                if (!found.containsKey(i)) { // a hole: re-sent under a new token, stuck old id or not (§5.1.5)
                    renew(bt.recs.get(i));
                }
            }
            if (found.size() < k - bt.acked) {
                log("read back %d..%d after a leader change: %d of %d records of batch %s found (%d counted by the server)", rb.low() + 1, rb.top(), found.size(),
                        bt.recs.size() - bt.acked, bt.id, k - bt.acked);
            }
            return new Confirmed(found, false);
        }

        /** What readBack found (record index -> stream sequence) and the range it read, low+1..top. */
        private record ReadBack(Map<Integer, Long> found, long low, long top) {}

        /**
         * Reads the stream back from the stream leader, from the lowest floor of the open batch's
         * records not yet finished to the stream's end as the leader sees it, and looks for each
         * of those records. known is the highest sequence the caller knows of (the stream info's
         * last sequence, the PubAck's).
         *
         * <p>The stream info is no end: while the stream has no leader, every member answers
         * STREAM.INFO with its own state, and one that lags names a last sequence below records
         * already stored; a read that stopped there would not find them and confirm would give
         * them new ids: stored twice. The end is the leader's last message (STREAM.MSG.GET, which
         * only a stream leader answers; nats-server makes a node the leader only once it applied
         * every entry of earlier terms its log holds): every copy of the batch's records proposed
         * before that answer is at or below it. When the last message is gone (or the stream is
         * empty), the read goes on message by message (next_by_subj) until the leader says there
         * is none after it.
         */
        private ReadBack readBack(long known) {
            Batch bt = b;
            Map<String, Integer> want = new HashMap<>();
            for (int i = bt.acked; i < bt.recs.size(); i++) {
                want.put(bt.recs.get(i).msgId, i);
            }
            Map<Integer, Long> found = new HashMap<>();
            java.util.function.Consumer<Stored> look = m -> {
                Integer i = want.get(msgIdOf(m));
                if (i != null && sameRecord(m, bt.recs.get(i))) {
                    found.put(i, m.seq());
                }
            };
            Stored last = retryLeader(() -> lastAsync(stream));
            long top = last == null ? known : Math.max(known, last.seq());
            long low = lowFloor(bt.acked);
            for (long lo = low + 1; lo <= top; lo += 64) {
                for (Stored m : getRange(lo, Math.min(top, lo + 63))) {
                    if (m != null) {
                        look.accept(m);
                    }
                }
            }
            if (last == null) {
                for (long from = Math.max(top, low) + 1; ; ) {
                    long f = from;
                    Stored m = retryLeader(() -> nextAsync(stream, f));
                    if (m == null || m.seq() < from) {
                        break;
                    }
                    look.accept(m);
                    top = m.seq();
                    from = m.seq() + 1;
                }
            }
            if (compacted) {
                List<String> keys = new ArrayList<>(bt.recs.size());
                for (Pending pd : bt.recs) {
                    keys.add(pd.keyHeader);
                }
                Compaction.supersededInBatch(keys, bt.acked, found);
            }
            if (top > known) {
                int above = 0;
                for (long s : found.values()) {
                    if (s > known) {
                        above++;
                    }
                }
                if (above > 0) {
                    log("read back past the stream info's last sequence %d to the leader's end %d: %d records of batch %s are stored above %d (a read that stopped there would have sent them again under new ids)",
                            known, top, above, bt.id, known);
                }
            }
            return new ReadBack(found, low, top);
        }

        /**
         * Finishes the open batch's records not yet finished: those in stored (index -> stream
         * sequence, 0 if unknown) are acknowledged, refused ones fail, those whose id is stuck "in
         * process" fail (spec/protocol.md §5.1.5: not re-sent with the same id until the duplicate
         * window ends, nor under a new id without a guard), and the others are returned, in order,
         * to be sent again.
         */
        private List<Pending> finishStored(Map<Integer, Long> stored) {
            Batch bt = b;
            List<Pending> rest = new ArrayList<>();
            for (int i = bt.acked; i < bt.recs.size(); i++) {
                Pending pd = bt.recs.get(i);
                Long s = stored.get(i);
                if (pd.failed != null) {
                    finishErr(pd, pd.failed);
                } else if (s != null) {
                    finish(pd, s, false);
                } else if (pd.inProcess.stuck()) {
                    finishErr(pd, InProcess.error(pd.seq, pd.msgId, partition, pd.inProcess.count()));
                } else {
                    rest.add(pd);
                }
            }
            bt.acked = bt.recs.size();
            return rest;
        }

        /**
         * Ends a committed batch that confirm had to read back: records found are acknowledged,
         * the others (the server counted them but did not store them) go out again in a new batch,
         * after records sent later that it did store: their keys may be out of order.
         */
        private void endConfirmed(Map<Integer, Long> found, long streamSeq) {
            Batch bt = b;
            List<Pending> rest = finishStored(found);
            if (!rest.isEmpty()) {
                holes.addAndGet(rest.size());
                System.getLogger("dev.pctl").log(System.Logger.Level.WARNING, String.format(
                        "producer %s: partition %d of epoch %d: SERVER FAULT: batch %s was committed with %d records but %d of them are not stored (nats-server counted raft proposals a leader's term change dropped); sending them again after later records: per-key order may be broken for their keys",
                        id, partition, epoch, bt.id, bt.recs.size(), rest.size()));
            }
            endBatch(streamSeq);
            requeueFirst(rest);
        }

        /**
         * Reads the partition back from its top (the epoch's boundary when fenced) down to the
         * floor, and returns {how many records of the open batch are stored, the sequence of the
         * last}: the batch stores a prefix of what was sent, so the highest of its records found
         * says it.
         */
        private long[] search(TopicDescriptor fenced) {
            Batch bt = b;
            long top = 0;
            if (fenced != null) {
                TopicDescriptor.Epoch e = fenced.epoch(epoch);
                if (e != null && e.ended()) {
                    top = Rules.searchTop(true, Math.max(0, e.boundary(partition)))[0];
                }
            }
            if (top == 0) {
                for (int attempt = 0; ; attempt++) {
                    checkStopped();
                    try {
                        top = JsApi.num(JsApi.obj(streamInfo().get("state")).get("last_seq"));
                        break;
                    } catch (NotFoundException | PermissionDeniedException e) {
                        throw e;
                    } catch (PctlException e) {
                        sleep(pause(attempt));
                    }
                }
            }
            Map<String, Integer> want = new HashMap<>();
            for (int i = bt.acked; i < bt.recs.size(); i++) {
                want.put(bt.recs.get(i).msgId, i);
            }
            long low = lowFloor(bt.acked);
            for (long hi = top; hi > low; ) {
                long lo = hi - low > 64 ? hi - 63 : low + 1;
                Stored[] ms = getRange(lo, hi);
                for (int i = ms.length - 1; i >= 0; i--) {
                    Stored m = ms[i];
                    if (m == null) {
                        continue;
                    }
                    Integer j = want.get(msgIdOf(m));
                    if (j != null && sameRecord(m, bt.recs.get(j))) {
                        log("search: record %d of batch %s is stored at %d", j + 1, bt.id, lo + i);
                        return new long[] {j + 1, lo + i};
                    }
                }
                hi = lo - 1;
            }
            return new long[] {bt.acked, 0};
        }
    }
}
