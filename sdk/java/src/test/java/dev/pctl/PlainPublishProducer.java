package dev.pctl;

import io.nats.client.JetStreamApiException;
import io.nats.client.Message;
import io.nats.client.api.PublishAck;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The Java SDK's producer as it was before fast batches (a copy of main's Producer.java at the
 * commit before it was replaced, renamed, test-only): every record a JetStream request/reply
 * publish through jnats, pipelined per partition (spec/protocol.md §5.1.3). Kept as the baseline
 * of ProducerBench and as the producer ProducerCutTest is shown to fail on
 * ({@code -Dpctl.producer=plain}). Not maintained.
 *
 * <p>Its original documentation follows.
 *
 * Produces records to one topic, partitioning them on the client with the topic's WebAssembly
 * module, exactly as spec/protocol.md §5.1 says: each record is published as a JetStream message
 * to {@code pctl.data.<topic>.<epoch>.<partition>} with headers {@code Pctl-Key} (keyed records
 * only), {@code Pctl-Producer}, {@code Pctl-Seq} and {@code Nats-Msg-Id: <id>-<seq>-<token>} (32
 * random hex digits drawn for this record alone, §5.1.4: an id reused within JetStream's 2-minute
 * deduplication window, or learnt from a stored record, can never make a new record count as a
 * duplicate), and is
 * acknowledged when JetStream acknowledges it.
 *
 * <pre>{@code
 * Producer producer = client.producer("orders");
 * producer.send(ProducerRecord.keyed("user-1", "created"))
 *         .thenAccept(md -> System.out.println("stored in partition " + md.partition()));
 * producer.close(); // waits for every record's fate
 * }</pre>
 *
 * <p><b>Order.</b> Records with the same key are stored, and delivered to every consumer group,
 * in the order {@code send} was called, across epoch changes. Publishes are pipelined (up to
 * {@link ProducerOptions#maxInFlight()} per partition). When a publish finds no stream (its epoch
 * was fenced by an epoch change), the producer re-reads the descriptor: under a newer epoch it
 * waits for every publish in flight, then re-partitions and re-sends every unacknowledged record,
 * in the original order, before any record sent later; under the same epoch (a stream briefly
 * unavailable, or a change between fencing and activation) it retries the same records, in order,
 * with the same deduplication ids. A publish whose acknowledgement timed out is retried with the
 * same id; if its epoch was fenced meanwhile, the producer first looks for it in the old partition
 * (up to the epoch's boundary), so a retry never stores a record twice. Keyless records go round
 * robin and have no order.
 *
 * <p><b>Results.</b> Each record's fate is reported once: its future completes (or its callback
 * runs) with a {@link RecordMetadata}, or with a {@link PctlException}: {@link
 * BadRequestException} for a record that can never be stored (over the broker's record size),
 * {@link PluginFailedException} if the partitioner failed for its key, {@link
 * PermissionDeniedException} if the credentials may not produce (the producer then fails every
 * record), {@link NotFoundException} if the topic was deleted. Callbacks and futures complete on
 * one producer thread, in the order the fates became known (per partition: send order). Do not
 * block in a callback, and never call {@link #flush} or {@link #close} from one.
 *
 * <p>Thread-safe: records sent from several threads are ordered by the order their {@code send}
 * calls took effect. {@code send} blocks while {@link ProducerOptions#maxBuffered()} records are
 * unacknowledged.
 */
final class PlainPublishProducer implements AutoCloseable {
    /**
     * Receives a record's fate. {@code error} is null when the record was acknowledged. On
     * failure {@code metadata} still names the record ({@link RecordMetadata#producerSeq()}) and
     * the partition and epoch of its last attempt (-1 if it never got one), with sequence -1.
     */
    @FunctionalInterface
    public interface Callback {
        void onCompletion(RecordMetadata metadata, PctlException error);
    }

    private static final Event STOP = new Event(null, List.of(), null, true);
    private static final java.security.SecureRandom TOKENS = new java.security.SecureRandom();

    private final PctlClient client;
    private final String topic;
    private final String id;
    private final ProducerOptions opts;
    private final long ackTimeoutMillis;
    private final long maxRecord; // the partition streams' max_msg_size (spec/protocol.md §5.3), or the server's max payload

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    // Guarded by lock:
    private TopicDescriptor desc;
    private Partitioner part;
    private Map<Integer, Sink> sinks = new HashMap<>();
    private final List<Pending> held = new ArrayList<>(); // records sent while repartitioning
    private boolean switching;
    private long seq;
    private int buffered; // sent, fate not yet known
    private long callbacksPending; // fates known, callbacks not yet run
    private long rr;
    private PctlException fatal;
    private boolean closed;

    private final LinkedBlockingQueue<Event> events = new LinkedBlockingQueue<>();
    private final Thread control;
    private final ExecutorService callbacks;
    private final Runnable stopListening;
    private final AtomicLong resent = new AtomicLong();
    private final AtomicLong found = new AtomicLong(); // ambiguous records found stored in a fenced partition
    private final AtomicLong acks = new AtomicLong(); // acknowledgements so far (progress, for the retry backoff)

    PlainPublishProducer(PctlClient client, String topic, ProducerOptions opts) {
        this.client = client;
        this.topic = topic;
        this.opts = opts;
        this.id = opts.id();
        this.ackTimeoutMillis = client.options().ackTimeout().toMillis();
        this.maxRecord = maxRecord(client, topic);
        TopicDescriptor d = fetch();
        install(d);
        this.callbacks = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "pctl-producer-" + id + "-callbacks");
            t.setDaemon(true);
            return t;
        });
        String prefix = "pctl.data." + topic + ".";
        this.stopListening = client.onViolation(subject -> {
            if (subject.startsWith(prefix)) {
                fail(PermissionDeniedException.forSubject("publish to", subject));
            }
        });
        this.control = new Thread(this::controlLoop, "pctl-producer-" + id);
        control.setDaemon(true);
        control.start();
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

    /** How many ambiguous records were found stored in a fenced partition (for tests). */
    long foundAfterFence() {
        return found.get();
    }

    /** How many records were re-sent under a new epoch after a fence. */
    public long resent() {
        return resent.get();
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
            java.util.Map<String, Object> info = JsApi.request(client, "$JS.API.STREAM.INFO.PCTL_" + topic + "_0", null, new byte[0],
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

    /** Partitions a record under the current epoch and queues it on its partition's sink. */
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
        pd.msg = message(pd);
        Sink s = sinks.get(p);
        if (s == null) {
            s = new Sink(cur.number(), p);
            sinks.put(p, s);
        }
        s.queue.add(pd);
        service(s);
    }

    private Message message(Pending pd) {
        Headers h = new Headers();
        if (pd.rec.key() != null) {
            h.put("Pctl-Key", "b64:" + Base64.getEncoder().encodeToString(pd.rec.key()));
        }
        String n = Long.toString(pd.seq);
        h.put("Pctl-Producer", id);
        h.put("Pctl-Seq", n);
        if (pd.msgId == null) {
            byte[] t = new byte[16];
            TOKENS.nextBytes(t);
            pd.msgId = id + "-" + n + "-" + java.util.HexFormat.of().formatHex(t);
        }
        h.put("Nats-Msg-Id", pd.msgId); // the same for every re-send of the record
        h.put("Pctl-Time", Long.toString(pd.ts));
        for (String[] kv : pd.rec.headers()) {
            h.add(kv[0], kv[1]);
        }
        return NatsMessage.builder()
                .subject("pctl.data." + topic + "." + pd.epoch + "." + pd.partition)
                .headers(h)
                .data(pd.rec.value())
                .build();
    }

    /** Reports a record's fate (lock held): frees its buffer slot and queues its callback. */
    private void completeLocked(Pending pd, RecordMetadata md, PctlException err) {
        if (pd.done) {
            return;
        }
        pd.done = true;
        if (err != null) {
            boolean placed = pd.msg != null;
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

    /** Flushes, then stops the producer. The client stays open. */
    @Override
    public void close() {
        PctlException err = null;
        try {
            flush();
        } catch (PctlException e) {
            err = e;
        }
        lock.lock();
        try {
            closed = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        stopListening.run();
        events.add(STOP);
        try {
            control.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
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
        lock.lock();
        try {
            if (fatal == null) {
                fatal = err;
            }
            for (Pending pd : held) {
                completeLocked(pd, null, err);
            }
            held.clear();
            for (Sink s : sinks.values()) {
                s.abort(err);
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    // ---- one partition's publishes -----------------------------------------------------------

    /** An unacknowledged record. */
    private static final class Pending {
        final long seq;
        final ProducerRecord rec;
        final Callback callback;
        int epoch;
        int partition;
        Message msg;
        long ts; // Pctl-Time
        String msgId; // Nats-Msg-Id, fixed at the first attempt
        boolean ambiguous; // an attempt under the current placement may be stored (its acknowledgement was lost)
        long floor; // when ambiguous: a stored copy can only be after this stream sequence
        boolean done;

        Pending(long seq, ProducerRecord rec, Callback callback) {
            this.seq = seq;
            this.rec = rec;
            this.callback = callback;
        }
    }

    private record Flight(Pending pd, CompletableFuture<PublishAck> future) {}

    /** What a sink hands to the control loop: records not acknowledged, in send order. */
    private record Event(Sink sink, List<Pending> left, Throwable cause, boolean fin) {}

    /**
     * Publishes one partition's records of one epoch, in order, with up to maxInFlight
     * unacknowledged. Event-driven: {@link #service} runs (lock held) whenever something
     * happens — a record queued, an acknowledgement, a stop — and does what can be done.
     */
    private final class Sink {
        final int epoch;
        final int partition;
        final ArrayDeque<Pending> queue = new ArrayDeque<>();
        final ArrayDeque<Flight> inflight = new ArrayDeque<>();
        final List<Pending> failed = new ArrayList<>();
        Throwable cause; // why the sink is failing, until it has settled and reported
        boolean paused; // reported a failure; waits for the control loop to resume or stop it
        boolean stopping; // asked to stop for a repartition
        boolean finished; // sent its final event
        PctlException aborted;
        long lastAcked;
        boolean servicing;
        boolean again;

        Sink(int epoch, int partition) {
            this.epoch = epoch;
            this.partition = partition;
        }

        void abort(PctlException err) {
            if (aborted == null) {
                aborted = err;
            }
            for (Flight f : inflight) {
                completeLocked(f.pd(), null, err);
            }
            inflight.clear();
            for (Pending pd : failed) {
                completeLocked(pd, null, err);
            }
            failed.clear();
            for (Pending pd : queue) {
                completeLocked(pd, null, err);
            }
            queue.clear();
            if (!finished) {
                // A repartition may be waiting for this sink's final event.
                finished = true;
                events.add(new Event(this, List.of(), err, true));
            }
        }
    }

    /** Does what a sink can do now (lock held; reentrant calls are folded into the running one). */
    private void service(Sink s) {
        if (s.servicing) {
            s.again = true;
            return;
        }
        s.servicing = true;
        try {
            do {
                s.again = false;
                serviceOnce(s);
            } while (s.again);
        } finally {
            s.servicing = false;
        }
    }

    private void serviceOnce(Sink s) {
        // Acknowledgements, in publish order: a record's fate is decided only after every earlier
        // record of the partition has its own.
        while (!s.inflight.isEmpty() && s.inflight.peekFirst().future().isDone()) {
            Flight h = s.inflight.pollFirst();
            if (s.aborted != null) {
                completeLocked(h.pd(), null, s.aborted);
                continue;
            }
            try {
                PublishAck ack = h.future().join();
                s.lastAcked = ack.getSeqno();
                acks.incrementAndGet();
                completeLocked(h.pd(), new RecordMetadata(h.pd().seq, s.partition, s.epoch, ack.getSeqno(), ack.isDuplicate()), null);
            } catch (CompletionException | CancellationException e) {
                Throwable c = unwrap(e);
                if (permanent(c)) {
                    completeLocked(h.pd(), null, new BadRequestException(String.format(
                            "record %d refused by partition %d of topic %s: %s", h.pd().seq, s.partition, topic, describe(c)), c));
                    continue;
                }
                // After a failure, a later record that still got stored is acknowledged normally;
                // for a fence this does not happen (every later publish is refused too).
                if (isTimeout(c) && !h.pd().ambiguous) {
                    // Once ambiguous, a record stays so until it is found or re-placed: a later
                    // attempt refused by a fence does not undo an earlier one that may be stored.
                    // Every record before it in this partition has its fate, so its stored copy,
                    // if any, lies after the last acknowledgement seen so far; acknowledgements of
                    // later records (which can arrive after this timeout) lie after it, so this
                    // is the floor, not the last acknowledged sequence at the time of the fence.
                    h.pd().ambiguous = true;
                    h.pd().floor = s.lastAcked;
                }
                s.failed.add(h.pd());
                if (s.cause == null) {
                    s.cause = c;
                }
            }
        }
        if (s.aborted != null) {
            s.abort(s.aborted);
            return;
        }
        while (s.cause == null && !s.paused && !s.stopping && s.inflight.size() < opts.maxInFlight() && !s.queue.isEmpty()) {
            Pending pd = s.queue.pollFirst();
            CompletableFuture<PublishAck> f;
            try {
                f = client.jetStream().publishAsync(pd.msg);
            } catch (RuntimeException e) {
                if (permanent(e)) {
                    completeLocked(pd, null, new BadRequestException(String.format(
                            "record %d cannot be published to partition %d of topic %s: %s", pd.seq, s.partition, topic, describe(e)), e));
                    continue;
                }
                // Could not even hand it to the connection (closed, ...): a failure of this record
                // and every later one.
                s.failed.add(pd);
                s.cause = e;
                break;
            }
            f = f.orTimeout(ackTimeoutMillis, TimeUnit.MILLISECONDS);
            s.inflight.addLast(new Flight(pd, f));
            f.whenComplete((a, t) -> {
                lock.lock();
                try {
                    service(s);
                } finally {
                    lock.unlock();
                }
            });
        }
        if (s.inflight.isEmpty() && !s.finished && (s.cause != null || s.stopping)) {
            // Settled: hand everything unacknowledged to the control loop, in order.
            List<Pending> left = new ArrayList<>(s.failed);
            left.addAll(s.queue);
            s.failed.clear();
            s.queue.clear();
            Throwable cause = s.cause;
            s.cause = null;
            if (s.stopping) {
                s.finished = true;
                events.add(new Event(s, left, cause, true));
            } else {
                s.paused = true;
                events.add(new Event(s, left, cause, false));
            }
        }
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || (t instanceof RuntimeException && t.getClass() == RuntimeException.class)) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    private static boolean isTimeout(Throwable t) {
        return t instanceof TimeoutException || t instanceof CancellationException;
    }

    /** A publish error that no retry can fix: the stream refused the message itself. */
    private static boolean permanent(Throwable t) {
        if (t instanceof JetStreamApiException) {
            JetStreamApiException e = (JetStreamApiException) t;
            String d = String.valueOf(e.getErrorDescription()).toLowerCase(java.util.Locale.ROOT);
            return e.getApiErrorCode() == 10054 || d.contains("maximum message size") || d.contains("exceeds");
        }
        if (t instanceof IllegalArgumentException) {
            return String.valueOf(t.getMessage()).toLowerCase(java.util.Locale.ROOT).contains("payload");
        }
        return false;
    }

    private static String describe(Throwable t) {
        if (t instanceof JetStreamApiException) {
            JetStreamApiException e = (JetStreamApiException) t;
            return e.getErrorDescription() + " (JetStream error " + e.getApiErrorCode() + ")";
        }
        return String.valueOf(t.getMessage());
    }

    // ---- the control loop: fences and retries --------------------------------------------------

    private TopicDescriptor fetch() {
        long deadline = System.nanoTime() + client.options().requestTimeout().toNanos();
        while (true) {
            TopicDescriptor d;
            try {
                d = client.topic(topic);
            } catch (UnavailableException e) {
                if (e.topicCreating() && System.nanoTime() < deadline) {
                    sleep(50);
                    continue;
                }
                throw e;
            }
            if (d.creating() && System.nanoTime() < deadline) {
                sleep(50);
                continue;
            }
            if (d.creating() || d.deleting()) {
                throw new UnavailableException("topic " + topic + " is being " + (d.creating() ? "created" : "deleted") + "; retry later");
            }
            return d;
        }
    }

    private static void sleep(long ms) {
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
        lock.lock();
        try {
            desc = d;
            part = p;
            sinks = new HashMap<>();
        } finally {
            lock.unlock();
        }
    }

    private void controlLoop() {
        long backoff = 50;
        long acksSeen = 0;
        while (true) {
            Event ev;
            try {
                ev = events.take();
            } catch (InterruptedException e) {
                return;
            }
            if (ev == STOP) {
                return;
            }
            if (ev.fin() || ev.cause() == null) {
                continue;
            }
            try {
                PctlException dead = deadLocked(ev);
                if (dead != null) {
                    failAll(ev.left(), dead);
                    continue;
                }
                TopicDescriptor d;
                try {
                    d = fetch();
                } catch (NotFoundException | PermissionDeniedException e) {
                    fail(e);
                    failAll(ev.left(), e);
                    continue;
                } catch (PctlException e) {
                    d = null; // broker unreachable: retry in place
                }
                if (client.connection().getStatus() == io.nats.client.Connection.Status.CLOSED) {
                    PctlException e = new UnavailableException("producer " + id + ": the client's connection is closed");
                    fail(e);
                    failAll(ev.left(), e);
                    continue;
                }
                String originalId = currentId();
                if (d != null && !d.id().equals(originalId)) {
                    // Deleted and created again: a new topic that happens to have the same name.
                    PctlException e = new NotFoundException(String.format(
                            "topic %s was deleted (and created again as a new topic, id %s, not %s): records not yet acknowledged were not stored; make a new producer",
                            topic, d.id(), originalId));
                    fail(e);
                    failAll(ev.left(), e);
                    continue;
                }
                if (d != null && d.current().number() > ev.sink().epoch) {
                    repartition(ev, d);
                    backoff = 50;
                    continue;
                }
                // Same epoch: the stream is unavailable for a moment (or an epoch change is between
                // fencing and activation), or an acknowledgement timed out. Retry the same records,
                // in order, on the same subject, with the same deduplication ids; back off while
                // nothing gets through.
                long a = acks.get();
                if (a != acksSeen) {
                    acksSeen = a;
                    backoff = 50;
                }
                Thread.sleep(backoff);
                backoff = Math.min(backoff * 2, 1000);
                lock.lock();
                try {
                    Sink s = ev.sink();
                    if (s.aborted != null) {
                        failAllLocked(ev.left(), s.aborted);
                        continue;
                    }
                    for (int i = ev.left().size() - 1; i >= 0; i--) {
                        s.queue.addFirst(ev.left().get(i));
                    }
                    s.paused = false;
                    service(s);
                } finally {
                    lock.unlock();
                }
            } catch (InterruptedException e) {
                return;
            } catch (RuntimeException e) {
                PctlException err = e instanceof PctlException ? (PctlException) e : new InternalException("producer " + id + ": " + e, e);
                fail(err);
                failAll(ev.left(), err);
            }
        }
    }

    private String currentId() {
        lock.lock();
        try {
            return desc.id();
        } finally {
            lock.unlock();
        }
    }

    private PctlException deadLocked(Event ev) {
        lock.lock();
        try {
            return ev.sink().aborted != null ? ev.sink().aborted : fatal;
        } finally {
            lock.unlock();
        }
    }

    private void failAll(List<Pending> l, PctlException err) {
        lock.lock();
        try {
            failAllLocked(l, err);
        } finally {
            lock.unlock();
        }
    }

    private void failAllLocked(List<Pending> l, PctlException err) {
        for (Pending pd : l) {
            completeLocked(pd, null, err);
        }
    }

    /** Moves every unacknowledged record to the new epoch, in the original order. */
    private void repartition(Event first, TopicDescriptor d) throws InterruptedException {
        List<Sink> old;
        lock.lock();
        try {
            switching = true;
            old = new ArrayList<>(sinks.values());
            // Every old sink, the failed one included (records may have reached its queue after
            // its failure event), stops and hands back everything unacknowledged.
            for (Sink s : old) {
                s.stopping = true;
                service(s);
            }
        } finally {
            lock.unlock();
        }
        List<Pending> left = new ArrayList<>(first.left());
        Set<Sink> waiting = new HashSet<>(old);
        while (!waiting.isEmpty()) {
            Event ev = events.take();
            if (ev == STOP) {
                events.add(STOP);
                failAll(left, new BadRequestException("producer " + id + " is closed"));
                return;
            }
            if (waiting.contains(ev.sink())) {
                left.addAll(ev.left());
                if (ev.fin()) {
                    waiting.remove(ev.sink());
                }
            } else {
                left.addAll(ev.left()); // cannot happen (every sink is an old one); never drop a record
            }
        }
        // Records whose acknowledgement was lost may be stored in the fenced partition: look for
        // them between their floor and the partition's boundary.
        left = resolveAmbiguous(d, left);
        try {
            install(d);
        } catch (PctlException e) {
            fail(e);
            failAll(left, e);
            return;
        }
        lock.lock();
        try {
            left.addAll(held);
            held.clear();
            left.sort(Comparator.comparingLong(pd -> pd.seq));
            int n = 0;
            for (Pending pd : left) {
                if (pd.done) {
                    continue;
                }
                if (fatal != null) {
                    completeLocked(pd, null, fatal);
                    continue;
                }
                pd.ambiguous = false;
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
    }

    private List<Pending> resolveAmbiguous(TopicDescriptor d, List<Pending> left) {
        List<Pending> out = new ArrayList<>();
        for (Pending pd : left) {
            if (!pd.ambiguous) {
                out.add(pd);
                continue;
            }
            long found = findStored(d, pd, pd.floor);
            if (found > 0) {
                this.found.incrementAndGet();
                complete(pd, new RecordMetadata(pd.seq, pd.partition, pd.epoch, found, true), null);
                continue;
            }
            out.add(pd);
        }
        return out;
    }

    /** The stream sequence of pd's message in its fenced partition, or 0 if it is not there. */
    private long findStored(TopicDescriptor d, Pending pd, long floor) {
        TopicDescriptor.Epoch e = d.epoch(pd.epoch);
        long boundary = e == null ? -1 : e.boundary(pd.partition);
        String msgId = pd.msgId;
        String subject = "$JS.API.DIRECT.GET.PCTL_" + topic + "_" + pd.partition;
        for (long s = floor + 1; s <= boundary; s++) {
            for (int attempt = 0; ; attempt++) {
                try {
                    Message m = client.connection().request(subject, ("{\"seq\":" + s + "}").getBytes(StandardCharsets.UTF_8), client.options().requestTimeout());
                    if (m == null) {
                        throw new IllegalStateException("no answer");
                    }
                    if (!m.isStatusMessage() && m.getHeaders() != null && msgId.equals(m.getHeaders().getFirst("Nats-Msg-Id"))) {
                        return s;
                    }
                    break; // another record, or none at this sequence (404)
                } catch (InterruptedException ex) {
                    Thread.currentThread().interrupt();
                    return 0;
                } catch (RuntimeException ex) {
                    if (attempt >= 2) {
                        // Unreadable: count it as absent. The record is then re-sent, and may be
                        // stored twice (never lost).
                        System.getLogger("dev.pctl").log(System.Logger.Level.WARNING,
                                "producer {0}: cannot read sequence {1} of {2} to resolve record {3}: {4}", id, s, subject, pd.seq, ex.toString());
                        break;
                    }
                }
            }
        }
        return 0;
    }
}
