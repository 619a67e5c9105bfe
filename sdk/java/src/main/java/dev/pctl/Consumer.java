package dev.pctl;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.ConcurrentModificationException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A member of a consumer group on one topic, with the whole group protocol of spec/protocol.md §6:
 * membership and assignment, leases and commits, fence markers, per-key gating across epochs with
 * the topic's own WebAssembly partitioners, retired partitions drained after a shrink, seeks
 * (group generations), misplaced records, and KIP-253's key-level callbacks.
 *
 * <pre>{@code
 * try (PctlClient client = PctlClient.connect();                       // consumer.nk
 *      Consumer consumer = client.consumer("orders", ConsumerOptions.builder("billing").build())) {
 *     while (running) {
 *         for (ConsumerRecord r : consumer.poll(Duration.ofMillis(500))) {
 *             process(r);
 *         }
 *     } // with auto-commit, the records of one poll are acknowledged by the next poll (or close)
 * }
 * }</pre>
 *
 * <p><b>Order.</b> Records with the same key are delivered in the order they were produced, across
 * epoch changes, by every member of the group: a record of a newer epoch waits until the group has
 * committed its key's partition of every older epoch not yet fully drained past that epoch's
 * boundary. Keyless records come in their stream's order, nothing more.
 *
 * <p><b>Acknowledgement.</b> With {@linkplain ConsumerOptions.Builder#autoCommit auto-commit} (the
 * default) the records a {@code poll} returned are acknowledged by the next {@code poll} (or by
 * {@link #close}); without it by {@link #commit()} or {@link #commit(ConsumerRecord)}. Positions are
 * written every commit interval and only cover records that are all acknowledged; the gates of
 * other partitions open on committed positions only, so a member that holds acknowledgements back
 * holds back its partitions' children.
 *
 * <p><b>Threads.</b> Like Kafka's {@code KafkaConsumer}, a {@code Consumer} is <em>not</em>
 * thread-safe: one thread at a time calls {@link #poll}, {@link #commit}, the seeks and {@link
 * #close} (another thread entering meanwhile gets a {@link ConcurrentModificationException}).
 * {@link #wakeup()} is the exception: any thread may call it to make a blocked (or the next) {@code
 * poll} throw {@link WakeupException}. Every callback ({@link RebalanceListener}, the misplaced-record
 * handler) runs on the polling thread, inside {@code poll} (or {@code close}, {@code seek...}),
 * between two records. Rebalances and seeks take effect while the application polls: a member that
 * stops polling keeps its partitions (its leases are renewed in the background) but delivers
 * nothing, and holds back the children of its partitions.
 *
 * <p>Inside, each owned partition has a thread that reads its stream (a pull consumer that recovers
 * from lost pulls, reconnects and deleted consumers, §6.7), checks placements, waits at the gates
 * and queues records for {@code poll}; a timer thread heartbeats, refreshes the descriptor and
 * commits; a watch of the group's state brings other members' positions, leases and seeks.
 */
public final class Consumer implements AutoCloseable {
    private static final String HEADER_KEY = "Pctl-Key";
    private static final String HEADER_PRODUCER = "Pctl-Producer";
    private static final String HEADER_SEQ = "Pctl-Seq";
    private static final String HEADER_TIME = "Pctl-Time";
    private static final String HEADER_FENCE = "Pctl-Fence";
    private static final String HEADER_TOMBSTONE = Compaction.HEADER_TOMBSTONE;
    private static final String HEADER_BACKFILL = Compaction.HEADER_BACKFILL;
    private static final long MAX_TIME = (1L << 53) - 1;
    private static final AtomicLong TOKENS = new AtomicLong();

    private final PctlClient c;
    private final String topic;
    private final String topicId;
    private final String group;
    private final String member;
    private final ConsumerOptions o;
    private final RebalanceListener listener;
    // State handovers (spec/protocol.md §6.9): every call runs on the polling thread, one at a time;
    // home (guarded by mu) maps every key this member holds (KeySet.id) to the partition it holds it for.
    private final StateHandler state;
    private final Map<String, Integer> home = new HashMap<>();
    private final boolean announce; // the listener wants keys-assigned (so records' previous partitions are computed)
    private final boolean wantsRevoked;
    private final GroupKv kv;
    private final String prefix; // <topic id>.<group>.
    private final String subjPrefix; // $KV.pctl-groups.<topic id>.<group>.
    private final long hbNanos;
    private final long sessionNanos;
    private final Duration opTimeout;
    private final String startedAt = JsApi.now();
    private final RawConn raw;
    private final ScheduledExecutorService timer;
    /** A compacted topic (fixed at creation): record subjects end with their key's token (§10.1). */
    private final boolean compacted;
    /** Key subjects (compacted, or a plain topic with backfill; fixed at creation): record subjects end with their key's token (§10.1). */
    private final boolean keySubjects;
    /** The group reads the current epoch alone from this epoch on (its g.start, §10.5); 0: it does not. */
    private volatile int startEpoch;

    private final ReentrantLock mu = new ReentrantLock();
    /** Positions, descriptors and state that gates and fetchers wait for. */
    private final Condition changed = mu.newCondition();
    /** Records ready, or something poll must handle (rebalance, reset, failure, wakeup, close). */
    private final Condition readyCond = mu.newCondition();
    /** Room in the poll queue, for fetchers waiting to hand records over. */
    private final Condition spaceCond = mu.newCondition();
    private int spaceWaiters;
    // Guarded by mu:
    private TopicDescriptor desc;
    private final Map<Integer, PState> pstate = new HashMap<>();
    private final Map<String, Long> members = new HashMap<>(); // member -> when its key was stored (unix ns)
    private int gen; // the group generation this member follows (§6.6)
    private long[] resetPositions = new long[0];
    private long resetRev;
    private Reset pendingReset; // seen, not applied
    private int drainedGen = -1;
    private int drainedEpoch;
    private final Set<List<Integer>> revokedDone = new HashSet<>(); // (partition, epoch) whose keys-revoked ran here
    private final Set<List<Integer>> assignedDone = new HashSet<>(); // (partition, epoch, parent) whose keys-assigned ran here
    private final Map<Integer, Part> parts = new HashMap<>();
    private final ArrayDeque<Item> ready = new ArrayDeque<>();
    private boolean rebalance = true;
    private PctlException fatal;
    private boolean closed;
    private boolean wakeup;
    private long delivered;
    private long gated;
    private long totalWait;
    private long maxWait;
    private long commits;
    private long lostCount;
    private long resets;
    private long misplacedCount;

    /** For the tests only: keep the drained-epochs cache across seeks (Pulsar's bug), so a test can show it breaks order. */
    boolean keepDrainedAcrossSeeksForTest;
    /** For the tests only: called with the rebalance's number and each parent-first group ([partition, position]) before it is acquired. */
    volatile java.util.function.BiConsumer<Integer, List<long[]>> takeHookForTest;
    private int takeRound; // the polling thread's
    /** For the tests only: called after each stored commit; true makes the member take it as unanswered (its answer and read-back lost). */
    volatile java.util.function.BooleanSupplier loseCommitAnswerForTest;
    /** Tests only: when it answers true, the read-back after a refused write fails (unknown). */
    volatile java.util.function.BooleanSupplier failReadBackForTest;
    private int keptDrained;

    private final AtomicReference<Thread> owner = new AtomicReference<>();
    private int depth; // re-entry of the owning thread (callbacks calling commit)
    private final AtomicInteger refreshing = new AtomicInteger(); // 0 idle, 1 refreshing, 2 one more wanted
    private StreamReader watch;
    private volatile boolean sticky; // the group's assignor is sticky (checkAssignor)
    private Map<String, Object> record; // sticky, polling thread: the last g.assignment read, and its revision
    private long recordRev;
    private List<String> lastView; // sticky, polling thread: the live members of the previous rebalance
    private final Map<String, int[]> samples = new java.util.concurrent.ConcurrentHashMap<>(); // sticky: the key sample's partitions
    private long assignments; // mu
    private Double moved; // mu
    private Double movedModulo; // mu
    private Thread watchThread;
    private final List<StreamReader> readers = Collections.synchronizedList(new ArrayList<>());
    private final AtomicLong retiredRecoveries = new AtomicLong();
    private final Map<String, int[]> subjects = new java.util.concurrent.ConcurrentHashMap<>();
    private Runnable stopViolations;
    private int events;

    /** Wakes every waiter (mu held): for the rare changes (state, failure, stop, rebalance). */
    private void wakeAllLocked() {
        changed.signalAll();
        readyCond.signalAll();
        spaceCond.signalAll();
    }

    // ---- state records ------------------------------------------------------------------------

    /** A partition key of the group state (§6). */
    private record PState(long rev, long position, int gen, String owner, long leaseEnd) {}

    /** A reset seen in g.reset (§6.6). */
    private record Reset(long rev, int gen, long[] positions) {}

    private enum Kind { RECORD, MARKER, MISPLACED_DELIVER, MISPLACED_SKIP, MISPLACED_STOP, COPY_SKIP }

    /** A queued record, fence marker or misplaced record of an owned partition. */
    private record Item(Part part, Kind kind, long seq, ConsumerRecord record, int parent, PctlException error) {}

    /** The fetcher must stop (revoked, lost, reset, closing). */
    private static final class Stop extends Exception {
        private static final long serialVersionUID = 1L;

        Stop() {
            super("stop", null, false, false);
        }
    }

    /** An owned partition (one ownership: a partition acquired again is a new Part). Guarded by mu. */
    private static final class Part {
        final int q;
        final long token = TOKENS.incrementAndGet();
        final long start;
        final int gen;
        long rev;
        long leaseUntil; // System.nanoTime(); measured from before the write that set it
        long handled; // every record and marker up to here is acknowledged
        long committed;
        long delivered; // the last item poll processed (record returned, or marker)
        long lastRecord; // the last record returned
        final TreeMap<Long, Long> marksAfter = new TreeMap<>(); // record seq -> marker seq right after it
        boolean lost;
        boolean stopped;
        boolean releasing;
        int queued;
        long nextBoundary; // the smallest boundary above `handled` whose keys-revoked step is owed (0: none)
        StreamReader reader;
        Thread thread;
        /** One compare-and-set on this partition's key at a time (each needs the revision the previous one wrote). */
        final ReentrantLock writeLock = new ReentrantLock();

        Part(int q, long rev, long position, int gen, long leaseUntil) {
            this.q = q;
            this.rev = rev;
            this.gen = gen;
            this.leaseUntil = leaseUntil;
            this.start = position;
            this.handled = position;
            this.committed = position;
            this.delivered = position;
            this.lastRecord = position;
        }
    }

    // ---- creation -----------------------------------------------------------------------------

    Consumer(PctlClient c, TopicDescriptor t, ConsumerOptions o) {
        // Before any group key is written: a server older than 2.11 ignores the condition that
        // proves a group absent (spec/protocol.md §6.1, "The server version a consumer needs").
        ServerVersion.require(c, "pctl's consumer", "a member proves a new group absent with a conditioned write, spec/protocol.md §6.1");
        this.c = c;
        this.topic = t.name();
        this.topicId = t.id();
        this.group = o.group();
        this.member = o.member();
        this.o = o;
        this.listener = o.listener();
        this.state = o.state();
        this.announce = overrides(listener, "onKeysAssigned");
        this.wantsRevoked = overrides(listener, "onKeysRevoked");
        this.desc = t;
        this.compacted = t.compacted;
        this.keySubjects = t.keySubjects();
        this.hbNanos = o.heartbeat().toNanos();
        this.sessionNanos = o.sessionTimeout().toNanos();
        // Group-state requests time out after the session timeout (at least 2 s), as the Go
        // member's do: one lost in a broker restart must not hold a heartbeat or a commit long.
        this.opTimeout = Duration.ofNanos(Math.max(TimeUnit.SECONDS.toNanos(2), sessionNanos));
        this.kv = new GroupKv(c, opTimeout);
        this.prefix = topicId + "." + group + ".";
        this.subjPrefix = GroupKv.PREFIX + prefix;
        this.raw = c.raw();
        this.timer = Executors.newScheduledThreadPool(2, r -> {
            Thread th = new Thread(r, "pctl-consumer-" + member + "-timer");
            th.setDaemon(true);
            return th;
        });
        try {
            start();
        } catch (RuntimeException e) {
            shutdownQuietly();
            throw e;
        }
    }

    private static boolean overrides(RebalanceListener l, String method) {
        try {
            return l.getClass().getMethod(method, KeyChange.class).getDeclaringClass() != RebalanceListener.class;
        } catch (NoSuchMethodException e) {
            return true;
        }
    }

    private void start() {
        String streamPrefix = "PCTL_" + topic + "_";
        stopViolations = c.onViolation(subject -> {
            // A refusal of one of this member's subjects (its group's state, its topic's readers)
            // is final: the credentials do not allow this topic or group (spec/protocol.md §8).
            if (subject.contains(GroupKv.BUCKET + "." + prefix) || subject.startsWith("$JS.API.CONSUMER.CREATE." + streamPrefix)
                    || subject.startsWith("$JS.API.CONSUMER.MSG.NEXT." + streamPrefix) || subject.startsWith("$JS.API.STREAM.INFO." + streamPrefix)
                    || subject.equals("$JS.API.STREAM.INFO." + GroupKv.STREAM)) {
                fail(new PermissionDeniedException(String.format(
                        "permission denied: these credentials may not use %s: consuming topic %s as group %s needs the consumer or admin role "
                                + "(connect with consumer.nk), or a consumer credential for this topic and group (pctl creds issue)",
                        subject, topic, group), subject, "consumer or admin", null));
            }
        });
        ensureGroup();
        GroupKeys gk = readGroupKeys(kv, prefix, group, JOIN_TIMEOUT);
        takeStart(gk.start());
        // The descriptor read after the group's keys exist (spec/protocol.md §10.4: a retirement
        // that does not show in it checked this group's positions after they were written).
        refresh();
        checkFatal();
        checkAssignor(gk.assignor());
        watch = new StreamReader(c, raw, GroupKv.STREAM, 1, subjPrefix + ">", false, true, 512, 1 << 20, o.heartbeat(), this::log);
        watchThread = new Thread(this::watchLoop, "pctl-consumer-" + member + "-watch");
        watchThread.setDaemon(true);
        watchThread.start();
        try {
            events = raw.subscribe("pctl.events.topic." + topic, m -> {
                // Events are hints: one refresh at a time (events meanwhile make one more), and
                // none for what JetStream relays (spec/protocol.md §8.4).
                if (m.reply() != null && m.reply().startsWith("$JS.")) {
                    return;
                }
                refreshSoon();
            });
        } catch (RuntimeException e) {
            events = 0; // best effort: the heartbeat refreshes the descriptor anyway
        }
        // The first assignment needs the group's members and positions.
        try {
            watch.awaitCaughtUp(Math.max(TimeUnit.SECONDS.toNanos(10), sessionNanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted while joining group " + group, e);
        }
        checkFatal();
        heartbeatOnce();
        checkFatal();
        timer.scheduleWithFixedDelay(this::heartbeatTick, hbNanos, hbNanos, TimeUnit.NANOSECONDS);
        long ci = o.commitInterval().toNanos();
        timer.scheduleWithFixedDelay(this::commitTick, ci, ci, TimeUnit.NANOSECONDS);
    }

    /**
     * §6.1: the first member creates a key for every existing partition stream (position 0, or the
     * stream's last sequence), then {@code g.created}. First writer wins each key. A get that finds
     * no {@code g.created} proves nothing (a lagging follower answers direct gets), so the create
     * path starts with a write that proves the group absent (§6.1, "Proving that the group does
     * not exist"): {@code g.assignor}, stored only while {@code g.created} has no message. Refused:
     * the group exists (or another member is creating it), and nothing is created. The descriptor
     * is read before that write: every stream in it predates the group.
     */
    private void ensureGroup() {
        TopicDescriptor d;
        mu.lock();
        try {
            d = desc;
        } finally {
            mu.unlock();
        }
        ensureGroup(c, kv, d, o, opTimeout, this::log);
    }

    /** {@link #ensureGroup()} of the member with options {@code o}, descriptor {@code d} read before it. */
    static void ensureGroup(PctlClient c, GroupKv kv, TopicDescriptor d, ConsumerOptions o, Duration opTimeout, java.util.function.Consumer<String> log) {
        String group = o.group();
        String topic = d.name();
        String prefix = d.id() + "." + group + ".";
        String marker = prefix + "g.created";
        if (kv.get(marker) != null) {
            return;
        }
        boolean absent;
        try {
            absent = kv.putIfAbsent(prefix + "g.assignor", GroupKv.utf8("{\"assignor\":\"" + (o.assignor() != null ? o.assignor() : "modulo") + "\"}"), marker);
        } catch (UnavailableException e) {
            throw new UnavailableException("consumer group " + group + ": could not learn whether it exists (its assignor written on the condition that it does not: "
                    + e.getMessage() + "): retry the join");
        }
        if (!absent) {
            return;
        }
        // Where it starts (§6.1, §10.5): the start option; else beginning with fromBeginning; on
        // a compacted topic current-epoch when no backfill runs (beginning while one does); else now.
        String from = o.start();
        if (from == null) {
            from = o.fromBeginning() ? "beginning" : d.compacted ? (d.backfilling > 0 ? "beginning" : "current-epoch") : "now";
        }
        if (from.equals("current-epoch")) {
            if (d.backfilling > 0) {
                log.accept(String.format("group %s starts at the current epoch %d while its backfill runs: keys not yet copied arrive as their copies do", group, d.backfilling));
            }
            try {
                kv.create(prefix + "g.start", GroupKv.utf8("{\"from\":\"current-epoch\",\"epoch\":" + d.current().number() + "}"));
            } catch (GroupKv.Conflict e) {
                // another member was first
            }
        }
        int n = d.maxPartitions();
        for (int q = 0; q < n; q++) {
            long start = from.equals("now") ? JsApi.lastSeq(c, "PCTL_" + topic + "_" + q, opTimeout)
                    : from.equals("current-epoch") ? d.currentEpochStart(q) : 0;
            try {
                kv.create(prefix + "p." + q, pstateJson("", 0, start, 0));
            } catch (GroupKv.Conflict e) {
                // another member was first
            }
        }
        try {
            kv.create(marker, GroupKv.utf8(JsApi.now()));
        } catch (GroupKv.Conflict e) {
            // another member was first
        }
    }

    /** How long a member waits, at join, for a state of its group that holds g.created. */
    static final Duration JOIN_TIMEOUT = Duration.ofSeconds(30);

    /** The group's g.start and g.assignor as read at join (null: the key does not exist). */
    record GroupKeys(GroupKv.Entry start, GroupKv.Entry assignor) {}

    /**
     * The group's g.start and g.assignor, read together with g.created from one server's state
     * (spec/protocol.md §6.1, "Reading the group's keys at join"): the initial values of a watch
     * of the group's g.* keys ({@code prefix} is {@code <topic id>.<group>.}). A direct get may be
     * answered by a follower that lags, and its "not found" proves nothing; the creator writes
     * g.created last, so a state that holds it holds the others if they exist. Without g.created
     * among the initial values it reads again (back-off 20 ms doubling to 500 ms), and throws
     * UnavailableException once {@code timeout} has passed.
     */
    static GroupKeys readGroupKeys(GroupKv kv, String prefix, String group, Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        long wait = 20;
        while (true) {
            Map<String, GroupKv.Entry> vals;
            try {
                vals = kv.initialValues(prefix + "g.*");
            } catch (PermissionDeniedException e) {
                throw e;
            } catch (RuntimeException e) {
                throw new UnavailableException("consumer group " + group + ": read its keys: " + e.getMessage(), e);
            }
            if (vals.containsKey(prefix + "g.created")) {
                return new GroupKeys(vals.get(prefix + "g.start"), vals.get(prefix + "g.assignor"));
            }
            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (left <= 0) {
                throw new UnavailableException("consumer group " + group + ": its g.created key exists but no server's state that was read holds it yet (waited "
                        + timeout.toMillis() + " ms)");
            }
            try {
                Thread.sleep(Math.min(wait, left));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new UnavailableException("interrupted while joining group " + group, e);
            }
            wait = Math.min(2 * wait, 500);
        }
    }

    /** The group's g.start (§10.5): the epoch it started reading the current epoch at ({@code e}: as read at join, null for none). */
    private void takeStart(GroupKv.Entry e) {
        if (e == null) {
            return;
        }
        long epoch = 0;
        try {
            Object v = ((Map<?, ?>) dev.pctl.internal.Json.parse(new String(e.value(), StandardCharsets.UTF_8))).get("epoch");
            epoch = v instanceof Long ? (Long) v : 0;
        } catch (RuntimeException | dev.pctl.internal.Json.JsonException x) {
            epoch = 0;
        }
        if (epoch < 1 || epoch > Integer.MAX_VALUE) {
            throw new InternalException("consumer group " + group + ": its start key holds " + goQuote(new String(e.value(), StandardCharsets.UTF_8)));
        }
        startEpoch = (int) epoch;
    }

    /**
     * §10.4: a backfilled copy is skipped unless the group cannot have delivered its origin (it
     * started at the current epoch after the origin's epoch, or that epoch is retired).
     */
    private boolean skipsCopy(ConsumerRecord r) {
        int oe = r.backfill().epoch();
        if (startEpoch > 0 && oe < startEpoch) {
            return false;
        }
        mu.lock();
        try {
            return !desc.originRetired(oe);
        } finally {
            mu.unlock();
        }
    }

    /** §6.1: join only a group whose assignor this SDK implements (modulo, sticky; no key: modulo), and the one asked for, if any. */
    private void checkAssignor(GroupKv.Entry e) {
        Object a = "modulo";
        if (e != null) {
            try {
                a = ((Map<?, ?>) dev.pctl.internal.Json.parse(new String(e.value(), StandardCharsets.UTF_8))).get("assignor");
            } catch (RuntimeException | dev.pctl.internal.Json.JsonException x) {
                a = new String(e.value(), StandardCharsets.UTF_8);
            }
        }
        if (!"modulo".equals(a) && !"sticky".equals(a)) {
            throw new UnsupportedException("group " + group + " of topic " + topic + " uses the assignor " + a
                    + ", which this client does not implement (it knows modulo and sticky): use a client that implements it, or another group");
        }
        if (o.assignor() != null && !o.assignor().equals(a)) {
            throw new ConflictException("group " + group + " of topic " + topic + " uses the assignor " + a + ", not the " + o.assignor()
                    + " this consumer asked for: ask for " + a + ", or use another group");
        }
        sticky = "sticky".equals(a);
    }

    /**
     * §6.2.1: the partitions the group's sticky record gives this member; as the leader (first of
     * the live members, its view whole) it first writes the next record by compare-and-set when
     * the last one no longer matches. Network calls: no lock held. Throws BadRequestException for
     * a record over the bucket's limit (no retry mends it).
     */
    private Set<Integer> stickyWanted(List<String> ms, List<Integer> as, TopicDescriptor d) {
        String key = prefix + "g.assignment";
        Map<String, Object> rec = record;
        long rev = recordRev;
        boolean readOk = true;
        try {
            GroupKv.Entry e = kv.get(key);
            rec = null;
            rev = 0;
            if (e != null) {
                rev = e.revision();
                if (!e.deleted()) {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> m = (Map<String, Object>) dev.pctl.internal.Json.parse(new String(e.value(), StandardCharsets.UTF_8));
                    rec = m;
                }
            }
        } catch (PermissionDeniedException e) {
            throw e;
        } catch (RuntimeException | dev.pctl.internal.Json.JsonException e) {
            readOk = false;
            rec = record;
            rev = recordRev;
            log("member " + member + ": read the group's assignment: " + e.getMessage() + " (keeping the last one)");
        }
        int epoch = d.current().number();
        List<String> previousView = lastView;
        lastView = ms;
        // The view is whole once the group watch has delivered every member key (its snapshot).
        boolean complete = readOk && watch != null && watch.caughtUp();
        if (StickyAssignor.writes(rec, ms, as, epoch, member, complete, previousView)) {
            Map<String, Object> next = null;
            try {
                next = StickyAssignor.next(rec, ms, as, epoch, e -> samplePartitions(d, e), java.time.Instant.now().truncatedTo(java.time.temporal.ChronoUnit.SECONDS).toString());
            } catch (BadRequestException x) {
                throw x;
            } catch (RuntimeException x) {
                log("member " + member + ": compute the group's assignment: " + x.getMessage() + " (the next rebalance retries)");
            }
            if (next != null) {
                byte[] body = StickyAssignor.encode(next, group);
                try {
                    rev = rec != null ? kv.update(key, body, rev) : kv.create(key, body);
                    rec = next;
                    mu.lock();
                    try {
                        assignments++;
                        if (next.get("moved") instanceof Double mv) {
                            moved = mv;
                            movedModulo = (Double) next.get("moved_modulo");
                        }
                    } finally {
                        mu.unlock();
                    }
                    log("member " + member + ": wrote assignment round " + next.get("round") + " (epoch " + epoch + ", " + ms.size() + " members, "
                            + as.size() + " partitions, moved " + next.get("moved") + ", modulo would move " + next.get("moved_modulo") + ")");
                } catch (PermissionDeniedException x) {
                    throw x;
                } catch (GroupKv.Conflict | RuntimeException x) {
                    log("member " + member + ": write the group's assignment: " + x.getMessage() + " (the next rebalance reads the winner)");
                }
            }
        }
        record = rec;
        recordRev = rev;
        return new HashSet<>(StickyAssignor.wants(rec, member, as));
    }

    /** §6.2.1 step 1: the partitions of the sticky assignor's key sample under epoch e of d. */
    private int[] samplePartitions(TopicDescriptor d, int e) {
        TopicDescriptor.Epoch ep = d.epoch(e);
        if (ep == null) {
            throw new NotFoundException("topic " + topic + " has no epoch " + e);
        }
        String k = ep.partitioner().digest() + "/" + java.util.Arrays.toString(ep.partitioner().config()) + "/" + ep.partitions();
        return samples.computeIfAbsent(k, x -> c.partitioner(ep.partitioner()).partitionAll(StickyAssignor.SAMPLE, ep.partitions()));
    }

    // ---- public API ---------------------------------------------------------------------------

    /** The topic. */
    public String topic() {
        return topic;
    }

    /** The consumer group. */
    public String group() {
        return group;
    }

    /** This member's id. */
    public String member() {
        return member;
    }

    /** The partitions this member owns now. */
    public List<Integer> assignment() {
        mu.lock();
        try {
            List<Integer> out = new ArrayList<>();
            for (Part p : parts.values()) {
                if (!p.lost) {
                    out.add(p.q);
                }
            }
            Collections.sort(out);
            return out;
        } finally {
            mu.unlock();
        }
    }

    /** The group generation (number of seeks) this member follows. */
    public int generation() {
        mu.lock();
        try {
            return gen;
        } finally {
            mu.unlock();
        }
    }

    /** The newest epoch the group has fully drained (for tests). */
    int drainedThrough() {
        mu.lock();
        try {
            return drainedThroughLocked();
        } finally {
            mu.unlock();
        }
    }

    /** What the member did so far. */
    public ConsumerStats stats() {
        long rec = retiredRecoveries.get();
        synchronized (readers) {
            for (StreamReader r : readers) {
                rec += Math.max(0, r.stats.created - 1);
            }
        }
        mu.lock();
        try {
            return new ConsumerStats(delivered, gated, totalWait, maxWait, commits, lostCount, resets, misplacedCount, rec, assignments, moved, movedModulo);
        } finally {
            mu.unlock();
        }
    }

    /**
     * Makes a blocked {@link #poll} (or the next one) throw {@link WakeupException}. Safe to call
     * from any thread.
     */
    public void wakeup() {
        mu.lock();
        try {
            wakeup = true;
            wakeAllLocked();
        } finally {
            mu.unlock();
        }
    }

    /**
     * The next records, waiting up to {@code timeout} for one; an empty list when none came in
     * time. With auto-commit, acknowledges the records the previous poll returned. Rebalances,
     * seeks by other members and every callback happen in here.
     *
     * @throws WakeupException when {@link #wakeup()} was called
     * @throws MisplacedRecordException when a misplaced record stopped the member (policy STOP)
     * @throws PermissionDeniedException when the credentials may not consume this topic as this group
     * @throws NotFoundException when the topic was deleted
     * @throws IllegalStateException when the consumer is closed
     */
    public List<ConsumerRecord> poll(Duration timeout) {
        enter();
        try {
            if (o.autoCommit()) {
                ackDelivered();
            }
            return pollLoop(System.nanoTime() + Math.max(0, timeout.toNanos()));
        } finally {
            leave();
        }
    }

    /**
     * Acknowledges every record delivered so far and writes the positions at once. Partitions this
     * member no longer owns are left alone (their records are delivered again by their next owner).
     */
    public void commit() {
        enter();
        try {
            List<Part> ps;
            mu.lock();
            try {
                ps = new ArrayList<>(parts.values());
            } finally {
                mu.unlock();
            }
            for (Part p : ps) {
                long pos;
                mu.lock();
                try {
                    if (p.lost) {
                        continue;
                    }
                    pos = p.delivered;
                } finally {
                    mu.unlock();
                }
                advance(p, pos);
                commitPart(p);
            }
        } finally {
            leave();
        }
    }

    /**
     * Acknowledges {@code record} and every record of its partition delivered before it, and writes
     * the position at once.
     *
     * @throws CommitFailedException when the partition is no longer this member's (its next owner
     *     delivers the records not committed again)
     * @throws BadRequestException when the record was not delivered by this consumer yet
     */
    public void commit(ConsumerRecord record) {
        enter();
        try {
            Part p;
            long pos;
            mu.lock();
            try {
                p = parts.get(record.partition());
                if (p == null || p.lost || p.token != record.owner) {
                    throw commitFailed(record.partition());
                }
                if (record.sequence() > p.delivered) {
                    throw new BadRequestException("commit: record " + record.sequence() + " of partition " + record.partition() + " was not delivered yet");
                }
                Long mark = p.marksAfter.remove(record.sequence());
                pos = Math.max(record.sequence(), mark == null ? 0 : mark);
                p.marksAfter.headMap(record.sequence()).clear();
            } finally {
                mu.unlock();
            }
            advance(p, pos);
            commitPart(p);
            mu.lock();
            try {
                if (p.lost) {
                    throw commitFailed(p.q);
                }
            } finally {
                mu.unlock();
            }
        } finally {
            leave();
        }
    }

    /** {@link #seek(ResetTarget)} to the beginning. */
    public void seekToBeginning() {
        seek(ResetTarget.beginning());
    }

    /** {@link #seek(ResetTarget)} to the end. */
    public void seekToEnd() {
        seek(ResetTarget.end());
    }

    /** {@link #seek(ResetTarget)} to a time. */
    public void seek(java.time.Instant time) {
        seek(ResetTarget.time(time));
    }

    /**
     * Moves the whole group (spec/protocol.md §6.6) to the beginning, the end or a time, in every
     * partition stream of every epoch. Per-key order holds among the records delivered afterwards:
     * the gates close again and the key-level callbacks run again. Records this member read and
     * had not returned are dropped; the other members follow within a heartbeat.
     */
    public void seek(ResetTarget to) {
        enter();
        try {
            // Stop our own deliveries before writing (§6.6).
            stopAll();
            Reset r = resetGroup(c, topic, group, to, member);
            mu.lock();
            try {
                if (pendingReset == null || pendingReset.gen < r.gen) {
                    pendingReset = r;
                }
                wakeAllLocked();
            } finally {
                mu.unlock();
            }
            control();
        } finally {
            leave();
        }
    }

    /**
     * Leaves the group: with auto-commit the records of the last poll count as acknowledged; what
     * was acknowledged is committed, the partitions are handed back ({@link
     * RebalanceListener#onPartitionsRevoked} first) and the member key is deleted. Idempotent.
     */
    @Override
    public void close() {
        enter();
        try {
            mu.lock();
            try {
                if (closed) {
                    return;
                }
            } finally {
                mu.unlock();
            }
            if (o.autoCommit() && fatalNow() == null) {
                try {
                    ackDelivered();
                } catch (PctlException e) {
                    log("close: " + e.getMessage());
                }
            }
            List<Part> ps;
            mu.lock();
            try {
                closed = true;
                wakeAllLocked();
                ps = new ArrayList<>(parts.values());
            } finally {
                mu.unlock();
            }
            timer.shutdownNow();
            for (Part p : ps) {
                stopPart(p);
            }
            joinAll(ps);
            List<Integer> revoked = new ArrayList<>();
            for (Part p : ps) {
                if (!isLost(p)) {
                    revoked.add(p.q);
                }
            }
            Collections.sort(revoked);
            if (!revoked.isEmpty()) {
                callback(() -> listener.onPartitionsRevoked(Collections.unmodifiableList(revoked)));
            }
            Set<Integer> unflushed = new HashSet<>();
            for (int q : revoked) {
                try {
                    statePartition(q);
                } catch (PctlException e) {
                    log("member " + member + ": " + e.getMessage() + " (partition " + q + " not released: its lease expires)");
                    unflushed.add(q);
                }
            }
            List<CompletableFuture<Void>> fs = new ArrayList<>();
            for (Part p : ps) {
                if (!isLost(p) && !unflushed.contains(p.q)) {
                    fs.add(CompletableFuture.runAsync(() -> {
                        try {
                            release(p);
                        } catch (PctlException e) {
                            log("member " + member + ": release of partition " + p.q + ": " + e.getMessage());
                        }
                    }, StreamReader.BACKGROUND));
                }
            }
            try {
                CompletableFuture.allOf(fs.toArray(new CompletableFuture<?>[0])).get(sessionNanos, TimeUnit.NANOSECONDS);
            } catch (Exception e) {
                // the broker is away: the leases expire by themselves
            }
            mu.lock();
            try {
                parts.clear();
                ready.clear();
            } finally {
                mu.unlock();
            }
            try {
                kv.delete(prefix + "m." + member, Duration.ofSeconds(5));
            } catch (PctlException e) {
                // the member key expires by itself
            }
        } finally {
            shutdownQuietly();
            leave();
        }
    }

    private void shutdownQuietly() {
        mu.lock();
        try {
            closed = true;
            wakeAllLocked();
        } finally {
            mu.unlock();
        }
        timer.shutdownNow();
        if (watch != null) {
            watch.close();
        }
        if (watchThread != null) {
            try {
                watchThread.join(2000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (events != 0) {
            raw.unsubscribe(events);
            events = 0;
        }
        if (stopViolations != null) {
            stopViolations.run();
        }
    }

    private void enter() {
        Thread me = Thread.currentThread();
        if (owner.get() == me) {
            depth++;
            return;
        }
        if (!owner.compareAndSet(null, me)) {
            throw new ConcurrentModificationException("Consumer is not safe for use by several threads at once (member " + member
                    + " is in use by " + owner.get().getName() + "); only wakeup() may be called from another thread");
        }
        depth = 1;
    }

    private void leave() {
        if (--depth == 0) {
            owner.set(null);
        }
    }

    // ---- the poll loop ------------------------------------------------------------------------

    private List<ConsumerRecord> pollLoop(long deadline) {
        List<ConsumerRecord> out = new ArrayList<>();
        while (true) {
            Item item;
            mu.lock();
            try {
                if (closed) {
                    if (fatal != null) {
                        throw fatal;
                    }
                    throw new IllegalStateException("consumer " + member + " of group " + group + " is closed");
                }
                if (fatal != null) {
                    if (!out.isEmpty()) {
                        return out;
                    }
                    throw fatal;
                }
                if (wakeup) {
                    wakeup = false;
                    if (!out.isEmpty()) {
                        wakeup = true; // the next poll throws
                        return out;
                    }
                    throw new WakeupException();
                }
                item = null;
                boolean needControl = pendingReset != null || rebalance;
                if (!needControl) {
                    // The fast path: records ready to hand over, under one lock.
                    while ((item = ready.pollFirst()) != null) {
                        Part p = item.part;
                        p.queued--;
                        if (p.stopped || parts.get(p.q) != p) {
                            item = null;
                            continue;
                        }
                        if (item.kind == Kind.RECORD && item.parent < 0 && Rules.mayDeliver(p.leaseUntil, System.nanoTime(), sessionNanos)
                                && !needsLoadLocked(p, item.record)) {
                            p.delivered = item.seq;
                            p.lastRecord = item.seq;
                            delivered++;
                            out.add(item.record);
                            item = null;
                            if (out.size() >= o.maxPollRecords()) {
                                if (spaceWaiters > 0) {
                                    spaceCond.signalAll();
                                }
                                return out;
                            }
                            continue;
                        }
                        break; // needs work outside the lock
                    }
                    if (spaceWaiters > 0) {
                        spaceCond.signalAll(); // room in the fetchers' queues
                    }
                }
                if (!needControl && item == null) {
                    if (!out.isEmpty()) {
                        return out;
                    }
                    long now = System.nanoTime();
                    if (now >= deadline) {
                        return out;
                    }
                    try {
                        readyCond.awaitNanos(Math.min(deadline - now, hbNanos));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new WakeupException();
                    }
                    continue;
                }
            } finally {
                mu.unlock();
            }
            if (item == null) {
                control();
                continue;
            }
            ConsumerRecord r = handle(item);
            if (r != null) {
                out.add(r);
                if (out.size() >= o.maxPollRecords()) {
                    return out;
                }
            }
        }
    }

    /** An item that needs work outside the lock (markers, lease renewals, callbacks). */
    private ConsumerRecord handle(Item item) {
        Part p = item.part;
        mu.lock();
        try {
            if (p.stopped || parts.get(p.q) != p) {
                return null;
            }
        } finally {
            mu.unlock();
        }
        switch (item.kind) {
            case MARKER:
                if (item.parent > 1) {
                    // The marker says that epoch parent-1 ended here: make sure the descriptor knows
                    // it, so that the keys-revoked step runs before the position moves past the
                    // marker (children wait for that, see gate).
                    try {
                        endedEpoch(item.parent - 1, p);
                    } catch (Stop e) {
                        return null;
                    }
                    mu.lock();
                    try {
                        computeNextBoundary(p);
                    } finally {
                        mu.unlock();
                    }
                }
                passMarker(p, item.seq);
                return null;
            case COPY_SKIP:
                if (!holdLease(p)) {
                    return null;
                }
                passMarker(p, item.seq);
                return null;
            case MISPLACED_SKIP:
                misplacedSeen(item.record);
                if (!holdLease(p)) {
                    return null;
                }
                passMarker(p, item.seq);
                return null;
            case MISPLACED_STOP:
                misplacedSeen(item.record);
                fail(item.error);
                return null;
            case MISPLACED_DELIVER:
                misplacedSeen(item.record);
                break;
            default:
                break;
        }
        if (!holdLease(p)) {
            return null;
        }
        if (item.parent >= 0) {
            keysAssigned(p, item);
        }
        if (state != null && item.kind == Kind.RECORD && item.record.key() != null && !stateEnsure(p, item.record.key())) {
            return null;
        }
        mu.lock();
        try {
            if (p.stopped || parts.get(p.q) != p) {
                return null;
            }
            p.delivered = item.seq;
            p.lastRecord = item.seq;
            delivered++;
            return item.record;
        } finally {
            mu.unlock();
        }
    }

    private void misplacedSeen(ConsumerRecord r) {
        mu.lock();
        try {
            misplacedCount++;
        } finally {
            mu.unlock();
        }
        log("member " + member + ": partition " + r.partition() + ": misplaced record at " + r.sequence() + " (epoch " + r.epoch() + ", key "
                + ConsumerRecord.show(r.key()) + "): " + r.misplacement().reason());
        if (o.onMisplaced() != null) {
            callback(() -> o.onMisplaced().accept(r));
        }
    }

    // ---- acknowledgement, boundaries and commits ----------------------------------------------

    /** Auto-commit: everything delivered so far is acknowledged. */
    private void ackDelivered() {
        List<Part> ps;
        mu.lock();
        try {
            ps = new ArrayList<>(parts.values());
        } finally {
            mu.unlock();
        }
        for (Part p : ps) {
            long pos;
            mu.lock();
            try {
                if (p.lost || p.stopped || parts.get(p.q) != p || p.delivered <= p.handled) {
                    continue;
                }
                pos = p.delivered;
            } finally {
                mu.unlock();
            }
            advance(p, pos);
        }
    }

    private void passMarker(Part p, long seq) {
        boolean adv;
        mu.lock();
        try {
            p.delivered = seq;
            adv = p.handled >= p.lastRecord;
            if (!adv) {
                p.marksAfter.put(p.lastRecord, seq);
            }
        } finally {
            mu.unlock();
        }
        if (adv) {
            advance(p, seq);
        }
    }

    private void advance(Part p, long pos) {
        boolean owe;
        mu.lock();
        try {
            if (pos > p.handled) {
                p.handled = pos;
            }
            owe = p.nextBoundary > 0 && p.handled >= p.nextBoundary;
        } finally {
            mu.unlock();
        }
        if (owe) {
            passedBoundaries(p);
        }
    }

    /** The ended epochs of the descriptor, each with the next one (mu held). */
    private List<TopicDescriptor.Epoch[]> endedLocked() {
        List<TopicDescriptor.Epoch[]> out = new ArrayList<>();
        List<TopicDescriptor.Epoch> es = desc.epochs();
        for (int i = 0; i + 1 < es.size(); i++) {
            if (es.get(i).ended()) {
                out.add(new TopicDescriptor.Epoch[] {es.get(i), es.get(i + 1)});
            }
        }
        return out;
    }

    /**
     * The smallest boundary of this partition whose keys-revoked step is still owed (0: none; an
     * epoch in which the partition stayed empty owes none). mu held.
     */
    private void computeNextBoundary(Part p) {
        long nb = 0;
        for (TopicDescriptor.Epoch[] en : endedLocked()) {
            TopicDescriptor.Epoch e = en[0];
            if (p.q < e.boundaryCount()) {
                long b = e.boundary(p.q);
                if (b > 0 && !revokedDone.contains(List.of(p.q, e.number())) && (nb == 0 || b < nb)) {
                    nb = b;
                }
            }
        }
        p.nextBoundary = nb;
    }

    /**
     * Runs the keys-revoked step for every ended epoch whose boundary in this partition is now
     * acknowledged, then commits at once so that the children's gates open (§6.5).
     */
    private void passedBoundaries(Part p) {
        boolean ran = false;
        while (true) {
            TopicDescriptor.Epoch[] todo = null;
            mu.lock();
            try {
                List<Integer> rv = Rules.revokes(desc, p.q, p.handled, e -> revokedDone.contains(List.of(p.q, e)));
                if (!rv.isEmpty()) {
                    int e = rv.get(0);
                    revokedDone.add(List.of(p.q, e));
                    todo = new TopicDescriptor.Epoch[] {desc.epoch(e), desc.epoch(e + 1)};
                }
                if (todo == null) {
                    computeNextBoundary(p);
                    break;
                }
            } finally {
                mu.unlock();
            }
            ran = true;
            if (wantsRevoked) {
                KeyChange ch = keyChange(todo[0], todo[1], p.q, p.q, true);
                if (ch != null) {
                    callback(() -> listener.onKeysRevoked(ch));
                }
            }
            // After the application's keys-revoked callback (which may still write the state),
            // before the member commits past the boundary.
            if (state != null && !stateKeysRevoked(p, todo[0], todo[1])) {
                return;
            }
        }
        boolean go;
        mu.lock();
        try {
            go = ran && !p.lost && !p.stopped;
        } finally {
            mu.unlock();
        }
        if (go) {
            commitPart(p);
        }
    }

    // ---- state handover (spec/protocol.md §6.9) ------------------------------------------------

    /**
     * The fast path's check: whether a record's key must be loaded before it is delivered (then
     * handle() does it). A key held for another partition of this member is now held for p.
     */
    private boolean needsLoadLocked(Part p, ConsumerRecord r) {
        if (state == null || r.key() == null) {
            return false;
        }
        String id = KeySet.id(r.key());
        Integer h = home.get(id);
        if (h == null) {
            return true;
        }
        if (h != p.q) {
            home.put(id, p.q); // it moved here from a partition of ours
        }
        return false;
    }

    /** Loads a key's state before its record is delivered from p, unless held; false when the load failed. */
    private boolean stateEnsure(Part p, byte[] key) {
        String id = KeySet.id(key);
        mu.lock();
        try {
            Integer h = home.get(id);
            if (h != null) {
                if (h != p.q) {
                    home.put(id, p.q);
                }
                return true;
            }
        } finally {
            mu.unlock();
        }
        try {
            state.load(new KeySet(topic, StateReason.KEY_ARRIVES, p.q, List.of(id), -1, -1));
        } catch (Exception e) {
            fail(new InternalException("state load of key " + ConsumerRecord.show(key) + " (partition " + p.q + ") failed: " + e, e));
            return false;
        }
        mu.lock();
        try {
            home.put(id, p.q);
        } finally {
            mu.unlock();
        }
        return true;
    }

    /**
     * Keys revoked (q, e): the held keys of q that move to a partition this member does not own are
     * flushed; the others stay, held for their new partition. False when the flush failed.
     */
    private boolean stateKeysRevoked(Part p, TopicDescriptor.Epoch old, TopicDescriptor.Epoch nu) {
        int q = p.q;
        List<String> leave = new ArrayList<>();
        try {
            Partitioner fOld = c.partitioner(old.partitioner());
            Partitioner fNew = c.partitioner(nu.partitioner());
            mu.lock();
            try {
                for (Map.Entry<String, Integer> en : home.entrySet()) {
                    if (en.getValue() != q) {
                        continue;
                    }
                    byte[] k = en.getKey().getBytes(java.nio.charset.StandardCharsets.ISO_8859_1);
                    if (fOld.partition(k, old.partitions()) != q) {
                        continue;
                    }
                    int np = fNew.partition(k, nu.partitions());
                    if (np == q) {
                        continue;
                    }
                    if (parts.containsKey(np)) {
                        en.setValue(np);
                    } else {
                        leave.add(en.getKey());
                    }
                }
            } finally {
                mu.unlock();
            }
            if (leave.isEmpty()) {
                return true;
            }
            state.flush(new KeySet(topic, StateReason.KEYS_REVOKED, q, leave, old.number(), nu.number()));
        } catch (Exception e) {
            fail(new InternalException("state flush (keys revoked from partition " + q + ", epoch " + old.number() + ") failed: " + e, e));
            return false;
        }
        mu.lock();
        try {
            for (String k : leave) {
                if (Integer.valueOf(q).equals(home.get(k))) {
                    home.remove(k);
                }
            }
        } finally {
            mu.unlock();
        }
        return true;
    }

    /** Flushes the keys held for partition q (its reading has stopped); throws when the flush fails. */
    private void statePartition(int q) {
        if (state == null) {
            return;
        }
        List<String> keys = new ArrayList<>();
        mu.lock();
        try {
            for (Map.Entry<String, Integer> en : home.entrySet()) {
                if (en.getValue() == q) {
                    keys.add(en.getKey());
                }
            }
        } finally {
            mu.unlock();
        }
        if (keys.isEmpty()) {
            return;
        }
        try {
            state.flush(new KeySet(topic, StateReason.PARTITION_REVOKED, q, keys, -1, -1));
        } catch (Exception e) {
            throw new InternalException("state flush of partition " + q + " failed: " + e, e);
        }
        mu.lock();
        try {
            for (String k : keys) {
                if (Integer.valueOf(q).equals(home.get(k))) {
                    home.remove(k);
                }
            }
        } finally {
            mu.unlock();
        }
    }

    /** Stops holding the keys held for q without flushing them (q's lease was lost). */
    private void stateForget(int q) {
        mu.lock();
        try {
            home.values().removeIf(h -> h == q);
        } finally {
            mu.unlock();
        }
    }

    private KeyChange keyChange(TopicDescriptor.Epoch old, TopicDescriptor.Epoch nu, int partition, int parent, boolean revoked) {
        Partitioner fOld;
        Partitioner fNew;
        try {
            fOld = c.partitioner(old.partitioner());
            fNew = c.partitioner(nu.partitioner());
        } catch (PctlException e) {
            log("member " + member + ": key change of partition " + partition + ": " + e.getMessage());
            return null;
        }
        int nOld = old.partitions();
        int nNew = nu.partitions();
        if (revoked) {
            return new KeyChange(topic, old.number(), nu.number(), partition, parent,
                    k -> fOld.partition(k, nOld) == partition && fNew.partition(k, nNew) != partition);
        }
        return new KeyChange(topic, old.number(), nu.number(), partition, parent,
                k -> fOld.partition(k, nOld) == parent && fNew.partition(k, nNew) == partition);
    }

    private void keysAssigned(Part p, Item item) {
        ConsumerRecord rec = item.record;
        TopicDescriptor.Epoch old;
        TopicDescriptor.Epoch nu;
        mu.lock();
        try {
            if (!assignedDone.add(List.of(p.q, rec.epoch(), item.parent))) {
                return;
            }
            old = desc.epoch(rec.epoch() - 1);
            nu = desc.epoch(rec.epoch());
        } finally {
            mu.unlock();
        }
        if (!announce || old == null || nu == null) {
            return;
        }
        KeyChange ch = keyChange(old, nu, p.q, item.parent, false);
        if (ch != null) {
            callback(() -> listener.onKeysAssigned(ch));
        }
    }

    /** §6.3: no delivery with less than a quarter of the session left on the lease. */
    private boolean holdLease(Part p) {
        while (true) {
            mu.lock();
            try {
                if (p.lost || p.stopped || closed) {
                    return false;
                }
                if (Rules.mayDeliver(p.leaseUntil, System.nanoTime(), sessionNanos)) {
                    return true;
                }
            } finally {
                mu.unlock();
            }
            commitPart(p);
            mu.lock();
            try {
                if (p.lost || p.stopped) {
                    return false;
                }
                if (Rules.mayDeliver(p.leaseUntil, System.nanoTime(), sessionNanos)) {
                    return true;
                }
                changed.await(20, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            } finally {
                mu.unlock();
            }
        }
    }

    /**
     * The position that may be written now (mu held): what is acknowledged, but never past a
     * boundary whose keys-revoked step has not run yet (children's gates open at the boundary),
     * and never back.
     */
    private long committableLocked(Part p) {
        long pos = p.handled;
        if (p.nextBoundary > 0 && pos >= p.nextBoundary) {
            pos = p.nextBoundary - 1;
        }
        return Math.max(pos, p.committed);
    }

    /**
     * Writes the partition's acknowledged position (when it moved) and renews its lease (when a
     * third of it is used up), by compare-and-set on the last revision written; a lost
     * compare-and-set means the partition was taken. The partition's write lock serialises its
     * compare-and-sets (each needs the revision the previous one wrote); it guards no state.
     */
    private void commitPart(Part p) {
        p.writeLock.lock();
        try {
            long pos;
            long rev;
            mu.lock();
            try {
                if (p.lost || p.releasing || pendingReset != null || p.gen != gen) {
                    return; // nothing more under an older generation (§6.6)
                }
                pos = committableLocked(p);
                if (pos == p.committed && p.leaseUntil - System.nanoTime() > sessionNanos * 2 / 3) {
                    return;
                }
                rev = p.rev;
            } finally {
                mu.unlock();
            }
            long start = System.nanoTime();
            byte[] body = pstateJson(member, System.currentTimeMillis() + sessionNanos / 1_000_000, pos, p.gen);
            long nr;
            try {
                try {
                    nr = kv.update(prefix + "p." + p.q, body, rev);
                    java.util.function.BooleanSupplier lose = loseCommitAnswerForTest;
                    if (lose != null && lose.getAsBoolean()) {
                        // Stored, but as if its answer and the read-back were lost (a cut connection).
                        log("member " + member + ": commit of partition " + p.q + " failed (commit answer lost: test hook); retrying");
                        return;
                    }
                } catch (GroupKv.Conflict e) {
                    // Our own earlier write whose reply was lost moved the revision? Go on from it.
                    long own = adoptOwnWrite(p, pos, rev);
                    if (own == UNREAD) {
                        // The key could not be read back (the member is closing, or the server does
                        // not answer): ours or a takeover, we cannot tell yet (spec §6.3). Not lost:
                        // the next commit asks again; the lease still bounds delivery.
                        log("member " + member + ": commit of partition " + p.q + " refused, and the key could not be read back; retrying");
                        return;
                    }
                    if (own == 0) {
                        throw e;
                    }
                    nr = kv.update(prefix + "p." + p.q, body, own);
                }
            } catch (GroupKv.Conflict e) {
                lose(p, "compare-and-set lost");
                return;
            } catch (PermissionDeniedException e) {
                fail(e);
                return;
            } catch (PctlException e) {
                // The reply may be lost while the write was applied (a cut connection): then the
                // key holds exactly what we wrote, and its revision is ours to go on from;
                // otherwise the next compare-and-set would fail and this member would drop its own
                // partition and deliver again what it had committed.
                nr = adoptOwnWrite(p, pos, rev);
                if (nr <= 0) {
                    log("member " + member + ": commit of partition " + p.q + " failed (" + e.getMessage() + "); retrying");
                    return;
                }
            }
            mu.lock();
            try {
                p.rev = nr;
                if (pos > p.committed) {
                    p.committed = pos;
                }
                p.leaseUntil = start + sessionNanos;
                commits++;
                setPStateLocked(p.q, new PState(nr, pos, p.gen, member, 0));
            } finally {
                mu.unlock();
            }
        } finally {
            p.writeLock.unlock();
        }
    }

    /**
     * After a commit whose outcome is unknown, or a compare-and-set that lost: the key's revision
     * when its latest value is one of this member's own writes under this ownership (owner this
     * member, the same generation, a position it acknowledged) newer than {@code rev}, whose reply
     * was lost; 0 when it is not (a takeover); {@link #UNREAD} when the key could not be read (the
     * outcome is still unknown: never taken for a takeover). Only this member writes its id as
     * the owner, so such a value is ours.
     */
    private long adoptOwnWrite(Part p, long pos, long rev) {
        try {
            java.util.function.BooleanSupplier unread = failReadBackForTest;
            if (unread != null && unread.getAsBoolean()) {
                throw new UnavailableException("read of partition " + p.q + "'s key lost (test hook)");
            }
            GroupKv.Entry en = kv.get(prefix + "p." + p.q);
            if (en == null || en.deleted() || en.revision() <= rev) {
                return 0;
            }
            PState st = parsePState(en.revision(), en.value());
            if (st != null && st.owner.equals(member) && st.gen == p.gen && st.position <= pos) {
                long committed;
                mu.lock();
                try {
                    if (p.lost) {
                        return 0;
                    }
                    committed = p.committed;
                } finally {
                    mu.unlock();
                }
                if (st.position < committed) {
                    return 0;
                }
                log("member " + member + ": partition " + p.q + ": our write of position " + st.position + " was applied (its reply was lost)");
                return en.revision();
            }
        } catch (PctlException e) {
            // unknown still: the next commit tells
            return UNREAD;
        }
        return 0;
    }

    /** adoptOwnWrite's answer when the key could not be read: ours or a takeover is unknown. */
    static final long UNREAD = -1;

    /** §6.3 release: the final position, owner empty. */
    private void release(Part p) {
        p.writeLock.lock();
        try {
            long pos;
            long rev;
            mu.lock();
            try {
                if (p.lost) {
                    return;
                }
                p.releasing = true;
                pos = Math.max(p.handled, p.committed);
                rev = p.rev;
            } finally {
                mu.unlock();
            }
            long nr;
            byte[] body = pstateJson("", 0, pos, p.gen);
            try {
                try {
                    nr = kv.update(prefix + "p." + p.q, body, rev);
                } catch (GroupKv.Conflict e) {
                    // The last commit's answer was lost (§6.3): when the key holds that write of
                    // ours, the release goes on from its revision. Otherwise the partition stayed
                    // leased to this member until its lease expired, and the member it went to
                    // waited for that.
                    long own = adoptOwnWrite(p, pos, rev);
                    if (own == UNREAD) {
                        // Read once more: a commit interrupted by close() may have been the reader.
                        own = adoptOwnWrite(p, pos, rev);
                    }
                    if (own == UNREAD) {
                        log("member " + member + ": partition " + p.q + " not released: its key could not be read back (its lease expires)");
                        return;
                    }
                    if (own == 0) {
                        throw e;
                    }
                    log("member " + member + ": partition " + p.q + ": releasing from revision " + own + " (our commit whose answer was lost)");
                    nr = kv.update(prefix + "p." + p.q, body, own);
                }
            } catch (GroupKv.Conflict e) {
                mu.lock();
                try {
                    p.lost = true;
                } finally {
                    mu.unlock();
                }
                return;
            }
            mu.lock();
            try {
                p.committed = pos;
                setPStateLocked(p.q, new PState(nr, pos, p.gen, "", 0));
            } finally {
                mu.unlock();
            }
            log("member " + member + ": partition " + p.q + ": released at " + pos);
        } finally {
            p.writeLock.unlock();
        }
    }

    private void lose(Part p, String why) {
        StreamReader r;
        mu.lock();
        try {
            if (p.lost || p.releasing) {
                return;
            }
            log("member " + member + ": partition " + p.q + ": lost (" + why + "); acknowledged " + p.handled + ", committed " + p.committed);
            p.lost = true;
            lostCount++;
            r = stopPartLocked(p);
            rebalance = true;
            wakeAllLocked();
        } finally {
            mu.unlock();
        }
        if (r != null) {
            r.close();
        }
    }

    private boolean isLost(Part p) {
        mu.lock();
        try {
            return p.lost;
        } finally {
            mu.unlock();
        }
    }

    private CommitFailedException commitFailed(int q) {
        return new CommitFailedException("partition " + q + " of topic " + topic + " is no longer member " + member
                + "'s (taken over, revoked or reset): its records will be delivered again by its next owner");
    }

    private void commitTick() {
        List<Part> ps;
        mu.lock();
        try {
            if (closed) {
                return;
            }
            ps = new ArrayList<>(parts.values());
        } finally {
            mu.unlock();
        }
        for (Part p : ps) {
            try {
                commitPart(p);
            } catch (RuntimeException e) {
                log("member " + member + ": commit: " + e);
            }
        }
    }

    // ---- group state: positions, members, resets ----------------------------------------------

    private void setPStateLocked(int q, PState st) {
        PState cur = pstate.get(q);
        if (cur != null && cur.rev >= st.rev) {
            return;
        }
        pstate.put(q, st);
        changed.signalAll();
    }

    /** The effective position of partition q at the member's generation (§6.6); mu held. */
    private long positionLocked(int q) {
        PState st = pstate.get(q);
        if (st != null && st.gen == gen) {
            return st.position;
        }
        if (gen == 0) {
            return st == null ? 0 : st.position;
        }
        return q < resetPositions.length ? resetPositions[q] : 0;
    }

    private void watchLoop() {
        int plen = subjPrefix.length();
        try {
            while (true) {
                for (StreamReader.Raw raw : watch.nextBatch(hbNanos)) {
                    onGroupMsg(raw, plen);
                }
            }
        } catch (StreamReader.Closed e) {
            // closing
        } catch (NotFoundException | PermissionDeniedException e) {
            fail(e);
        } catch (RuntimeException e) {
            fail(new InternalException("member " + member + ": the watch of the group state failed: " + e, e));
        }
    }

    private void onGroupMsg(StreamReader.Raw raw, int plen) {
        if (raw.subject().length() <= plen) {
            return;
        }
        String name = raw.subject().substring(plen);
        int dot = name.indexOf('.');
        if (dot < 0) {
            return;
        }
        String kind = name.substring(0, dot);
        String rest = name.substring(dot + 1);
        String op = RecordHeaders.first(raw.headers(), "KV-Operation");
        op = op == null ? "" : op.trim();
        StreamReader r = null;
        mu.lock();
        try {
            switch (kind) {
                case "m":
                    if (op.equals("DEL") || op.equals("PURGE")) {
                        if (members.remove(rest) != null) {
                            rebalance = true;
                            wakeAllLocked();
                        }
                    } else if (members.put(rest, raw.timeNanos()) == null) {
                        rebalance = true;
                        wakeAllLocked();
                    }
                    return;
                case "p":
                    int q;
                    try {
                        q = Integer.parseInt(rest);
                    } catch (NumberFormatException e) {
                        return;
                    }
                    if (!op.isEmpty()) {
                        return;
                    }
                    PState st = parsePState(raw.seq(), raw.data());
                    if (st == null) {
                        return;
                    }
                    setPStateLocked(q, st);
                    Part p = parts.get(q);
                    if (p != null && !p.lost && !p.releasing && st.rev > p.rev && (!st.owner.equals(member) || st.gen != p.gen)) {
                        log("member " + member + ": partition " + q + ": lost (taken by " + (st.owner.isEmpty() ? "a seek" : st.owner) + ")");
                        p.lost = true;
                        lostCount++;
                        r = stopPartLocked(p);
                        rebalance = true;
                        wakeAllLocked();
                    }
                    return;
                case "g":
                    if (rest.equals("assignment") && sticky) {
                        rebalance = true; // the leader's new record
                        wakeAllLocked();
                        return;
                    }
                    if (rest.equals("reset") && op.isEmpty()) {
                        seeResetLocked(raw.seq(), raw.data());
                    }
                    return;
                default:
                    return;
            }
        } finally {
            mu.unlock();
            if (r != null) {
                r.close();
            }
        }
    }

    private void seeResetLocked(long rev, byte[] data) {
        Reset r = parseReset(rev, data);
        if (r == null) {
            return;
        }
        if (r.gen > gen && (pendingReset == null || r.gen > pendingReset.gen)) {
            pendingReset = r;
            // Drop what was read and not delivered, at once (§6.6).
            List<StreamReader> close = new ArrayList<>();
            for (Part p : parts.values()) {
                StreamReader sr = stopPartLocked(p);
                if (sr != null) {
                    close.add(sr);
                }
            }
            ready.clear();
            wakeAllLocked();
            for (StreamReader sr : close) {
                sr.close(); // takes only the reader's own lock
            }
        }
    }

    private static Reset parseReset(long rev, byte[] data) {
        try {
            Map<String, Object> d = JsApi.parseObject(data, "g.reset");
            int g = (int) JsApi.num(d.get("generation"));
            List<Object> ps = JsApi.list(d.get("positions"));
            long[] pos = new long[ps.size()];
            for (int i = 0; i < pos.length; i++) {
                pos[i] = JsApi.num(ps.get(i));
            }
            return new Reset(rev, g, pos);
        } catch (PctlException e) {
            return null;
        }
    }

    private void readReset() {
        GroupKv.Entry e = kv.get(prefix + "g.reset");
        if (e != null && !e.deleted()) {
            mu.lock();
            try {
                seeResetLocked(e.revision(), e.value());
            } finally {
                mu.unlock();
            }
        }
    }

    /** Applies a seek seen (§6.6, the members' side), on the polling thread. */
    private void applyReset() {
        Reset r;
        List<Part> ps;
        mu.lock();
        try {
            r = pendingReset;
            pendingReset = null;
            if (r == null || r.gen <= gen) {
                return;
            }
            ps = new ArrayList<>(parts.values());
        } finally {
            mu.unlock();
        }
        log("member " + member + ": group " + group + ": generation " + r.gen + " (seek)");
        for (Part p : ps) {
            stopPart(p);
        }
        joinAll(ps);
        List<Integer> owned = new ArrayList<>();
        mu.lock();
        try {
            resets++;
            ready.clear();
            for (Part p : ps) {
                if (!p.lost) {
                    owned.add(p.q);
                }
            }
        } finally {
            mu.unlock();
        }
        Collections.sort(owned);
        if (!owned.isEmpty()) {
            callback(() -> listener.onPartitionsRevoked(Collections.unmodifiableList(owned)));
        }
        Set<Integer> unflushed = new HashSet<>();
        for (int q : owned) {
            try {
                statePartition(q);
            } catch (PctlException e) {
                fail(e);
                unflushed.add(q);
            }
        }
        mu.lock();
        try {
            home.clear(); // lost partitions' keys too: every key is loaded again after a seek
            gen = r.gen;
            resetPositions = r.positions;
            resetRev = r.rev;
            drainedGen = -1;
            revokedDone.clear();
            assignedDone.clear();
        } finally {
            mu.unlock();
        }
        for (Part p : ps) {
            if (isLost(p) || unflushed.contains(p.q)) {
                continue;
            }
            long pos = p.q < r.positions.length ? r.positions[p.q] : 0;
            p.writeLock.lock();
            try {
                long nr = kv.update(prefix + "p." + p.q, pstateJson("", 0, pos, r.gen), p.rev);
                mu.lock();
                try {
                    setPStateLocked(p.q, new PState(nr, pos, r.gen, "", 0));
                } finally {
                    mu.unlock();
                }
            } catch (GroupKv.Conflict | PctlException e) {
                // the resetter or another member was first
            } finally {
                p.writeLock.unlock();
            }
        }
        mu.lock();
        try {
            for (Part p : ps) {
                if (parts.get(p.q) == p) {
                    parts.remove(p.q);
                }
            }
            rebalance = true;
            wakeAllLocked();
        } finally {
            mu.unlock();
        }
    }

    // ---- membership and rebalancing -----------------------------------------------------------

    private void heartbeatOnce() {
        long g;
        long w;
        mu.lock();
        try {
            g = gated;
            w = totalWait / 1_000_000;
        } finally {
            mu.unlock();
        }
        String body = "{\"id\":" + dev.pctl.internal.Json.quote(member) + ",\"started\":\"" + startedAt + "\",\"heartbeat\":\"" + JsApi.now()
                + "\",\"owns\":" + assignment() + ",\"gated\":" + g + ",\"gate_wait_ms\":" + w + "}";
        try {
            // Short: a heartbeat held up by a lost reply would make the others think us gone.
            kv.put(prefix + "m." + member, GroupKv.utf8(body.replace(" ", "")), Duration.ofNanos(Math.max(TimeUnit.SECONDS.toNanos(1), hbNanos)));
        } catch (PermissionDeniedException e) {
            fail(e);
        } catch (PctlException e) {
            // transient: the next heartbeat retries
        }
        mu.lock();
        try {
            members.put(member, System.currentTimeMillis() * 1_000_000L);
        } finally {
            mu.unlock();
        }
    }

    private void heartbeatTick() {
        try {
            heartbeatOnce();
            refresh();
            mu.lock();
            try {
                rebalance = true;
                wakeAllLocked();
            } finally {
                mu.unlock();
            }
        } catch (RuntimeException e) {
            log("member " + member + ": heartbeat: " + e);
        }
    }

    private void refreshSoon() {
        if (refreshing.getAndIncrement() > 0) {
            refreshing.set(2);
            return;
        }
        try {
            StreamReader.BACKGROUND.execute(() -> {
                while (true) {
                    refresh();
                    if (refreshing.compareAndSet(1, 0)) {
                        return;
                    }
                    refreshing.set(1);
                    if (isClosed()) {
                        refreshing.set(0);
                        return;
                    }
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            refreshing.set(0);
        }
    }

    private boolean isClosed() {
        mu.lock();
        try {
            return closed;
        } finally {
            mu.unlock();
        }
    }

    /** Reads the descriptor again. */
    private void refresh() {
        TopicDescriptor t;
        try {
            t = fetchTopic(c, topic, Duration.ofNanos(Math.max(TimeUnit.SECONDS.toNanos(1), 2 * hbNanos)));
        } catch (NotFoundException e) {
            fail(new NotFoundException("topic " + topic + " was deleted; member " + member + " of group " + group + " stops"));
            return;
        } catch (PctlException e) {
            return;
        }
        if (!t.id().equals(topicId)) {
            fail(new NotFoundException("topic " + topic + " was deleted and created again (id " + topicId + " is now " + t.id() + "); member "
                    + member + " stops: join the new topic's group with a new consumer"));
            return;
        }
        mu.lock();
        try {
            if (t.epochs().size() >= desc.epochs().size()) {
                boolean grew = t.epochs().size() != desc.epochs().size() || t.current().ended() != desc.current().ended();
                desc = t;
                if (grew) {
                    for (Part p : parts.values()) {
                        computeNextBoundary(p);
                    }
                }
                wakeAllLocked();
            }
        } finally {
            mu.unlock();
        }
    }

    private List<String> liveMembersLocked() {
        long now = System.currentTimeMillis() * 1_000_000L;
        TreeSet<String> live = new TreeSet<>();
        for (Map.Entry<String, Long> e : members.entrySet()) {
            if (now - e.getValue() < sessionNanos) {
                live.add(e.getKey());
            }
        }
        live.add(member);
        return new ArrayList<>(live);
    }

    private List<Integer> assignableLocked() {
        return Rules.assignable(desc, this::positionLocked);
    }

    private Set<Integer> wantedLocked() {
        List<String> ms = liveMembersLocked();
        int me = ms.indexOf(member);
        Set<Integer> want = new HashSet<>();
        List<Integer> as = assignableLocked();
        for (int i = 0; i < as.size(); i++) {
            if (i % ms.size() == me) {
                want.add(as.get(i));
            }
        }
        return want;
    }

    /** Seeks and rebalances, on the polling thread (between two records). */
    private void control() {
        boolean reset;
        mu.lock();
        try {
            reset = pendingReset != null;
        } finally {
            mu.unlock();
        }
        if (reset) {
            applyReset();
        }
        Set<Integer> want;
        List<Part> drop = new ArrayList<>();
        Set<Integer> stickyWant = null;
        if (sticky) {
            List<String> ms;
            List<Integer> as;
            TopicDescriptor d;
            mu.lock();
            try {
                if (!rebalance || closed) {
                    return;
                }
                rebalance = false;
                ms = liveMembersLocked();
                as = assignableLocked();
                d = desc;
            } finally {
                mu.unlock();
            }
            try {
                stickyWant = stickyWanted(ms, as, d);
            } catch (BadRequestException e) {
                fail(e);
                return;
            }
        }
        mu.lock();
        try {
            if (stickyWant == null && (!rebalance || closed)) {
                return;
            }
            rebalance = false;
            want = stickyWant != null ? stickyWant : wantedLocked();
            for (Part p : parts.values()) {
                if (p.lost || !want.contains(p.q)) {
                    drop.add(p);
                }
            }
        } finally {
            mu.unlock();
        }
        if (!drop.isEmpty()) {
            for (Part p : drop) {
                stopPart(p);
            }
            joinAll(drop);
            List<Integer> lostQs = new ArrayList<>();
            List<Integer> revokedQs = new ArrayList<>();
            for (Part p : drop) {
                (isLost(p) ? lostQs : revokedQs).add(p.q);
            }
            Collections.sort(lostQs);
            Collections.sort(revokedQs);
            for (int q : lostQs) {
                // Its new owner loads its keys itself: what this member holds of them may be
                // stale, and is loaded again if the partition comes back (§6.9).
                stateForget(q);
            }
            if (!lostQs.isEmpty()) {
                callback(() -> listener.onPartitionsLost(Collections.unmodifiableList(lostQs)));
            }
            if (!revokedQs.isEmpty()) {
                callback(() -> listener.onPartitionsRevoked(Collections.unmodifiableList(revokedQs)));
            }
            for (Part p : drop) {
                boolean flushed = true;
                if (!isLost(p)) {
                    try {
                        statePartition(p.q);
                    } catch (PctlException e) {
                        fail(e); // not released: its lease expires, the next owner loads what is durable
                        flushed = false;
                    }
                }
                if (flushed && !isLost(p)) {
                    try {
                        release(p);
                    } catch (PctlException e) {
                        log("member " + member + ": release of partition " + p.q + ": " + e.getMessage());
                    }
                }
                mu.lock();
                try {
                    if (parts.get(p.q) == p) {
                        parts.remove(p.q);
                    }
                } finally {
                    mu.unlock();
                }
            }
        }
        // Parents first (spec/protocol.md §6.7): the partitions whose next records are of the
        // oldest epoch, acquired together, then the next epoch's; their fetchers start in that order.
        List<List<Integer>> plan;
        mu.lock();
        try {
            List<Integer> todo = new ArrayList<>();
            for (int q : want) {
                if (!parts.containsKey(q)) {
                    todo.add(q);
                }
            }
            plan = ParentFirst.groups(desc, todo, this::positionLocked);
        } finally {
            mu.unlock();
        }
        takeRound++;
        List<Integer> gained = new ArrayList<>();
        boolean denied = false;
        for (List<Integer> group : plan) {
            List<long[]> seen = new ArrayList<>();
            mu.lock();
            try {
                if (closed) {
                    break;
                }
                if (pendingReset != null) {
                    rebalance = true;
                    break;
                }
                for (int q : group) {
                    seen.add(new long[] {q, positionLocked(q)});
                }
            } finally {
                mu.unlock();
            }
            java.util.function.BiConsumer<Integer, List<long[]>> hook = takeHookForTest;
            if (hook != null) {
                hook.accept(takeRound, seen);
            }
            List<Part> got = new ArrayList<>();
            List<Object> results = acquireAll(group);
            for (int i = 0; i < group.size(); i++) {
                Object r = results.get(i);
                if (r instanceof Part p) {
                    got.add(p);
                } else if (r instanceof PermissionDeniedException e) {
                    fail(e);
                    denied = true;
                } else if (r instanceof PctlException e) {
                    log("member " + member + ": acquire partition " + group.get(i) + ": " + e.getMessage());
                }
            }
            mu.lock();
            try {
                for (Part p : got) {
                    parts.put(p.q, p);
                }
            } finally {
                mu.unlock();
            }
            for (Part p : got) {
                // One at a time, on the polling thread: a partition acquired at a boundary may owe
                // its keys-revoked callback (§6.5).
                try {
                    acquired(p);
                } catch (PctlException e) {
                    log("member " + member + ": acquire partition " + p.q + ": " + e.getMessage());
                    mu.lock();
                    try {
                        parts.remove(p.q, p);
                    } finally {
                        mu.unlock();
                    }
                    continue;
                }
                startPart(p);
                gained.add(p.q);
            }
            if (denied) {
                break;
            }
        }
        Collections.sort(gained);
        if (!gained.isEmpty()) {
            callback(() -> listener.onPartitionsAssigned(Collections.unmodifiableList(gained)));
        }
    }

    /**
     * Acquires the partitions of one parent-first group at once (§6.7; only the group's bucket, so
     * several run side by side): for each, in order, its Part, null (not taken), or the
     * PctlException that stopped it.
     */
    private List<Object> acquireAll(List<Integer> group) {
        if (group.size() == 1) {
            return Collections.singletonList(acquireOne(group.get(0)));
        }
        java.util.concurrent.ExecutorService ex = Executors.newFixedThreadPool(Math.min(group.size(), 16), r -> {
            Thread th = new Thread(r, "pctl-consumer-" + member + "-acquire");
            th.setDaemon(true);
            return th;
        });
        try {
            List<CompletableFuture<Object>> fs = new ArrayList<>();
            for (int q : group) {
                fs.add(CompletableFuture.supplyAsync(() -> acquireOne(q), ex));
            }
            List<Object> out = new ArrayList<>();
            for (CompletableFuture<Object> f : fs) {
                try {
                    out.add(f.join());
                } catch (java.util.concurrent.CompletionException e) {
                    if (e.getCause() instanceof RuntimeException re) {
                        throw re; // a bug: as from acquire on this thread
                    }
                    throw e;
                }
            }
            return out;
        } finally {
            ex.shutdown();
        }
    }

    private Object acquireOne(int q) {
        try {
            return acquire(q);
        } catch (PctlException e) {
            return e;
        }
    }

    /**
     * §6.3 acquire, with §6.6's check for a seek: a key of a newer generation, or a newer g.reset,
     * is read (and applied) first.
     */
    private Part acquire(int q) {
        String key = prefix + "p." + q;
        GroupKv.Entry e = kv.get(key);
        GroupKv.Entry g = kv.get(prefix + "g.reset");
        mu.lock();
        try {
            if (g != null && !g.deleted() && g.revision() > resetRev) {
                seeResetLocked(g.revision(), g.value());
                if (pendingReset != null) {
                    rebalance = true;
                    return null;
                }
            }
        } finally {
            mu.unlock();
        }
        long nowMs = System.currentTimeMillis();
        long start = System.nanoTime();
        long leaseEnd = nowMs + sessionNanos / 1_000_000;
        long pos;
        int myGen;
        long rev;
        if (e == null || e.deleted()) {
            mu.lock();
            try {
                myGen = gen;
                pos = gen != 0 ? positionLocked(q) : 0;
            } finally {
                mu.unlock();
            }
            try {
                rev = kv.create(key, pstateJson(member, leaseEnd, pos, myGen));
            } catch (GroupKv.Conflict ex) {
                return null;
            }
        } else {
            PState st = parsePState(e.revision(), e.value());
            if (st == null) {
                log("member " + member + ": partition " + q + ": unreadable group state " + new String(e.value(), StandardCharsets.UTF_8));
                return null;
            }
            boolean newer;
            mu.lock();
            try {
                setPStateLocked(q, st);
                newer = st.gen > gen;
                myGen = gen;
                pos = st.gen == gen ? st.position : positionLocked(q);
            } finally {
                mu.unlock();
            }
            if (newer) {
                readReset();
                mu.lock();
                try {
                    rebalance = true;
                } finally {
                    mu.unlock();
                }
                return null;
            }
            if (!Rules.mayAcquire(member, st.owner, st.leaseEnd, nowMs, Rules.maxClockSkewMs(sessionNanos / 1_000_000))) {
                return null; // someone else's, still leased (§6.3, with the clock-skew bound)
            }
            if (!st.owner.isEmpty() && !st.owner.equals(member)) {
                log("member " + member + ": partition " + q + ": lease of " + st.owner + " expired; taking over at " + pos);
            }
            try {
                rev = kv.update(key, pstateJson(member, leaseEnd, pos, myGen), e.revision());
            } catch (GroupKv.Conflict ex) {
                return null;
            }
        }
        mu.lock();
        try {
            setPStateLocked(q, new PState(rev, pos, myGen, member, leaseEnd));
        } finally {
            mu.unlock();
        }
        return new Part(q, rev, pos, myGen, start + sessionNanos);
    }

    /** After acquire: the boundaries behind the partition's start position, on the polling thread. */
    private void acquired(Part p) {
        int q = p.q;
        long pos = p.start;
        boolean owe;
        mu.lock();
        try {
            // §6.5: a boundary behind the start position was passed by an earlier owner, which ran
            // its keys-revoked step before committing past it; one exactly at it may still owe the
            // step (the member that got there may have stopped before running it).
            for (TopicDescriptor.Epoch[] en : endedLocked()) {
                TopicDescriptor.Epoch ep = en[0];
                if (q < ep.boundaryCount() && ep.boundary(q) < pos) {
                    revokedDone.add(List.of(q, ep.number()));
                }
            }
            computeNextBoundary(p);
            owe = p.nextBoundary > 0 && pos >= p.nextBoundary;
        } finally {
            mu.unlock();
        }
        if (owe) {
            passedBoundaries(p);
        }
        log("member " + member + ": partition " + q + ": acquired at " + pos);
    }

    // ---- partition fetchers -------------------------------------------------------------------

    private void startPart(Part p) {
        StreamReader r = new StreamReader(c, raw, "PCTL_" + topic + "_" + p.q, p.start + 1, "pctl.data." + topic + ".>", true, false, 512,
                2048, o.heartbeat(), this::log);
        readers.add(r);
        Thread t = new Thread(() -> runPart(p), "pctl-consumer-" + member + "-p" + p.q);
        t.setDaemon(true);
        mu.lock();
        try {
            p.reader = r;
            p.thread = t;
        } finally {
            mu.unlock();
        }
        t.start();
    }

    /** Stops a partition's fetcher (mu held); returns its reader, which the caller closes after unlocking. */
    private StreamReader stopPartLocked(Part p) {
        if (p.stopped) {
            return null;
        }
        p.stopped = true;
        wakeAllLocked();
        return p.reader;
    }

    private void stopPart(Part p) {
        StreamReader r;
        mu.lock();
        try {
            r = stopPartLocked(p);
        } finally {
            mu.unlock();
        }
        if (r != null) {
            r.close();
        }
    }

    private void stopAll() {
        List<Part> ps;
        mu.lock();
        try {
            ps = new ArrayList<>(parts.values());
            ready.clear();
        } finally {
            mu.unlock();
        }
        for (Part p : ps) {
            stopPart(p);
        }
    }

    /** Waits (bounded) for stopped fetchers to end. */
    private void joinAll(List<Part> ps) {
        long deadline = System.nanoTime() + opTimeout.toNanos();
        for (Part p : ps) {
            Thread t;
            mu.lock();
            try {
                t = p.thread;
            } finally {
                mu.unlock();
            }
            if (t == null || t == Thread.currentThread()) {
                continue;
            }
            long left = deadline - System.nanoTime();
            if (left > 0) {
                try {
                    t.join(Math.max(1, left / 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
            StreamReader r;
            mu.lock();
            try {
                r = p.reader;
            } finally {
                mu.unlock();
            }
            if (r != null && readers.remove(r)) {
                retiredRecoveries.addAndGet(Math.max(0, r.stats.created - 1));
            }
        }
    }

    private void runPart(Part p) {
        StreamReader reader;
        mu.lock();
        try {
            reader = p.reader;
        } finally {
            mu.unlock();
        }
        List<Item> pending = new ArrayList<>();
        try {
            while (true) {
                mu.lock();
                try {
                    if (p.stopped) {
                        return;
                    }
                } finally {
                    mu.unlock();
                }
                List<StreamReader.Raw> batch = reader.nextBatch(hbNanos);
                if (batch.isEmpty()) {
                    continue;
                }
                List<Object> items = new ArrayList<>(batch.size());
                for (StreamReader.Raw raw : batch) {
                    items.add(parse(raw, p));
                }
                place(items, p);
                List<Map<Integer, Integer>> parents = o.gating() || announce ? parents(items, p) : null;
                for (int i = 0; i < items.size(); i++) {
                    Object it = items.get(i);
                    Item item;
                    if (it instanceof long[]) {
                        long[] mk = (long[]) it; // a fence marker: {seq, epoch it starts}
                        item = new Item(p, Kind.MARKER, mk[0], null, (int) mk[1], null);
                    } else {
                        ConsumerRecord rec = (ConsumerRecord) it;
                        if (rec.misplacement() == null && rec.backfill() != null && skipsCopy(rec)) {
                            item = new Item(p, Kind.COPY_SKIP, rec.sequence(), rec, -1, null); // passed like a fence marker
                        } else if (rec.misplacement() != null) {
                            switch (o.misplaced()) {
                                case DELIVER:
                                    item = new Item(p, Kind.MISPLACED_DELIVER, rec.sequence(), rec, -1, null);
                                    break;
                                case SKIP:
                                    item = new Item(p, Kind.MISPLACED_SKIP, rec.sequence(), rec, -1, null);
                                    break;
                                default:
                                    item = new Item(p, Kind.MISPLACED_STOP, rec.sequence(), rec, -1, new MisplacedRecordException(topic, p.q,
                                            rec.sequence(), rec.epoch(), rec.key(), rec.misplacement()));
                            }
                        } else {
                            int parent = -1;
                            if (parents != null && rec.key() != null && parents.get(i) != null) {
                                parent = gate(p, rec, parents.get(i), () -> flush(p, pending));
                            }
                            item = new Item(p, Kind.RECORD, rec.sequence(), rec, parent, null);
                        }
                    }
                    pending.add(item);
                    if (item.kind == Kind.MISPLACED_STOP) {
                        flush(p, pending);
                        return; // nothing after it here
                    }
                }
                flush(p, pending);
            }
        } catch (StreamReader.Closed | Stop e) {
            // stopping
        } catch (NotFoundException | PermissionDeniedException e) {
            fail(e);
        } catch (PctlException e) {
            fail(e);
        } catch (RuntimeException e) {
            // A bug: fail the member loudly rather than stall.
            fail(new InternalException("member " + member + ": partition " + p.q + ": " + e, e));
        }
    }

    /** Hands the fetcher's items to poll, in order, waiting for room. */
    private void flush(Part p, List<Item> pending) {
        if (pending.isEmpty()) {
            return;
        }
        mu.lock();
        try {
            for (Item it : pending) {
                while (p.queued >= o.maxBuffered() && !p.stopped) {
                    spaceWaiters++;
                    readyCond.signalAll(); // what is queued so far
                    try {
                        spaceCond.await(100, TimeUnit.MILLISECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return;
                    } finally {
                        spaceWaiters--;
                    }
                }
                if (p.stopped) {
                    return;
                }
                p.queued++;
                ready.addLast(it);
            }
            readyCond.signalAll();
        } finally {
            pending.clear();
            mu.unlock();
        }
    }

    /**
     * A record from a stream message, or {seq, epoch it starts} for a fence marker. A keyed record
     * whose key header or subject is unusable comes out marked misplaced (§6.8).
     */
    private Object parse(StreamReader.Raw raw, Part p) {
        String keyHdr = null;
        boolean hasKey = false;
        String producer = "";
        long pseq = 0;
        long ts = -1;
        boolean tomb = false;
        String origin = null;
        Map<String, List<String>> app = Collections.emptyMap();
        if (raw.headers() != null) {
            boolean seenProducer = false;
            boolean seenSeq = false;
            boolean seenTime = false;
            for (String[] kv : RecordHeaders.parse(raw.headers())) {
                String n = kv[0];
                String v = kv[1];
                switch (n) {
                    case HEADER_FENCE:
                        if (v.isEmpty()) {
                            break; // as Go's member: only a non-empty Pctl-Fence marks a fence marker
                        }
                        return new long[] {raw.seq(), digits(v) ? parseLongOr(v, 0) : 0};
                    case HEADER_KEY:
                        if (!hasKey) {
                            hasKey = true;
                            keyHdr = v;
                        }
                        continue;
                    case HEADER_PRODUCER:
                        if (!seenProducer) {
                            seenProducer = true;
                            producer = v;
                        }
                        continue;
                    case HEADER_SEQ:
                        if (!seenSeq) {
                            seenSeq = true;
                            pseq = digits(v) ? parseLongOr(v, 0) : 0;
                        }
                        continue;
                    case HEADER_TIME:
                        if (!seenTime) {
                            seenTime = true;
                            ts = parseTime(v);
                        }
                        continue;
                    case HEADER_TOMBSTONE:
                        tomb |= !v.isEmpty();
                        continue;
                    case HEADER_BACKFILL:
                        if (origin == null) {
                            origin = v;
                        }
                        continue;
                    default:
                        break;
                }
                if (n.regionMatches(true, 0, "pctl-", 0, 5) || n.regionMatches(true, 0, "nats-", 0, 5)) {
                    continue; // a protocol header: not the application's
                }
                if (n.chars().anyMatch(Character::isWhitespace)) {
                    continue;
                }
                if (app.isEmpty()) {
                    app = new LinkedHashMap<>();
                }
                app.computeIfAbsent(n, x -> new ArrayList<>(1)).add(v);
            }
            if (!app.isEmpty()) {
                for (Map.Entry<String, List<String>> e : app.entrySet()) {
                    e.setValue(Collections.unmodifiableList(e.getValue()));
                }
                app = Collections.unmodifiableMap(app);
            }
        }
        int[] sub = subject(raw.subject());
        boolean subjOk = sub != null;
        int epoch = subjOk ? sub[0] : 0;
        int subjPartition = subjOk ? sub[1] : -1;
        if (ts < 0) {
            ts = raw.timeNanos() / 1_000_000;
        }
        byte[] key = null;
        Misplacement mp = null;
        if (hasKey) {
            key = decodeKey(keyHdr);
            if (key == null) {
                mp = new Misplacement(-1, "its " + HEADER_KEY + " header " + goQuote(keyHdr.length() > 40 ? keyHdr.substring(0, 40) : keyHdr)
                        + " is not b64:<standard base64>");
            } else if (!subjOk) {
                mp = new Misplacement(-1, "its subject " + goQuote(raw.subject()) + " is not an epoch's record subject");
            } else if (subjPartition != p.q) {
                mp = new Misplacement(-1, "its subject " + goQuote(raw.subject()) + " names partition " + subjPartition);
            } else {
                String token = sub.length == 3 ? raw.subject().substring(raw.subject().lastIndexOf('.') + 1) : "";
                String shown = raw.subject().length() > 80 ? raw.subject().substring(0, 80) : raw.subject();
                if (keySubjects && !token.equals(Compaction.keyToken(key))) {
                    mp = new Misplacement(-1, "its subject " + goQuote(shown)
                            + " does not end with its key's token (a compacted or backfilled topic's record subject names its key, spec/protocol.md §10.1)");
                } else if (!keySubjects && !token.isEmpty()) {
                    mp = new Misplacement(-1, "its subject " + goQuote(shown) + " has a key token, but the topic has no key subjects (neither compacted nor backfilled)");
                }
            }
        }
        ConsumerRecord r = new ConsumerRecord(topic, p.q, epoch, raw.seq(), key, raw.data(), app, ts, raw.timeNanos(), producer, pseq, p.token);
        r.tombstone = tomb;
        if (mp != null) {
            r.misplaced(mp);
        } else if (origin != null) {
            long[] o3 = Compaction.parseOrigin(origin);
            if (o3 != null && o3[0] < epoch) {
                r.backfill = new ConsumerRecord.Origin((int) o3[0], (int) o3[1], o3[2]);
            }
        }
        return r;
    }

    private static final int[] NOT_A_RECORD_SUBJECT = new int[0];

    /**
     * (epoch, partition) of a record subject pctl.data.T.e.q (Go's strconv.Atoi on e and q), or
     * (epoch, partition, 1) of pctl.data.T.e.q.kt (a key token: compacted topics), or null. Few
     * distinct five-token ones: cached; six-token ones (one per key) are not.
     */
    private int[] subject(String s) {
        int[] r = subjects.get(s);
        if (r == null) {
            r = NOT_A_RECORD_SUBJECT;
            String[] ts = s.split("\\.", -1);
            if ((ts.length == 5 || (ts.length == 6 && !ts[5].isEmpty())) && ts[0].equals("pctl") && ts[1].equals("data")) {
                try {
                    r = ts.length == 5 ? new int[] {Integer.parseInt(ts[3]), Integer.parseInt(ts[4])}
                            : new int[] {Integer.parseInt(ts[3]), Integer.parseInt(ts[4]), 1};
                } catch (NumberFormatException e) {
                    r = NOT_A_RECORD_SUBJECT;
                }
            }
            if (ts.length == 6) {
                return r.length == 0 ? null : r;
            }
            if (subjects.size() > 4096) {
                subjects.clear();
            }
            subjects.put(s, r);
        }
        return r.length == 0 ? null : r;
    }

    private static boolean digits(String s) {
        if (s.isEmpty()) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            if (ch < '0' || ch > '9') {
                return false;
            }
        }
        return true;
    }

    private static long parseLongOr(String s, long def) {
        try {
            return Long.parseLong(s);
        } catch (NumberFormatException e) {
            return def;
        }
    }

    /** A Pctl-Time value, or -1 when malformed (then the store time is the timestamp). */
    static long parseTime(String v) {
        if (!digits(v) || (v.length() > 1 && v.charAt(0) == '0') || v.length() > 16) {
            return -1;
        }
        long t = Long.parseLong(v);
        return t <= MAX_TIME ? t : -1;
    }

    /** A Pctl-Key header's key, or null when it is not b64:<standard base64> (padded, as Go's StdEncoding). */
    static byte[] decodeKey(String v) {
        if (v == null || !v.startsWith("b64:")) {
            return null;
        }
        String b = v.substring(4);
        if (b.length() % 4 != 0) {
            return null;
        }
        for (int i = 0; i < b.length(); i++) {
            char ch = b.charAt(i);
            boolean ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '+' || ch == '/'
                    || (ch == '=' && i >= b.length() - 2 && (i == b.length() - 1 || b.charAt(b.length() - 1) == '='));
            if (!ok) {
                return null;
            }
        }
        try {
            return Base64.getDecoder().decode(b);
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    /** Go's %q of a string (printable characters as they are). */
    static String goQuote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"':
                case '\\':
                    sb.append('\\').append(ch);
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                default:
                    if (ch < 0x20 || ch == 0x7f) {
                        sb.append(String.format("\\x%02x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
            }
        }
        return sb.append('"').toString();
    }

    /**
     * §6.8: marks every keyed record that is not in its key's partition for its own epoch (one
     * batch call into each epoch's module), or that has no usable key or epoch.
     */
    private void place(List<Object> items, Part p) throws Stop {
        Map<Integer, List<ConsumerRecord>> byEpoch = new TreeMap<>();
        for (Object it : items) {
            if (it instanceof ConsumerRecord) {
                ConsumerRecord r = (ConsumerRecord) it;
                if (r.misplacement() == null && r.key() != null) {
                    byEpoch.computeIfAbsent(r.epoch(), k -> new ArrayList<>()).add(r);
                }
            }
        }
        for (Map.Entry<Integer, List<ConsumerRecord>> en : byEpoch.entrySet()) {
            int e = en.getKey();
            List<ConsumerRecord> recs = en.getValue();
            TopicDescriptor.Epoch ep = knownEpoch(e, p);
            if (ep == null) {
                for (ConsumerRecord r : recs) {
                    r.misplaced(new Misplacement(-1, "the topic has no epoch " + e));
                }
                continue;
            }
            Partitioner f = c.partitioner(ep.partitioner());
            List<byte[]> keys = new ArrayList<>(recs.size());
            for (ConsumerRecord r : recs) {
                keys.add(r.key());
            }
            int[] want = f.partitionAll(keys, ep.partitions());
            for (int i = 0; i < want.length; i++) {
                if (want[i] != p.q) {
                    recs.get(i).misplaced(new Misplacement(want[i], "epoch " + e + "'s partitioner (" + ep.partitions()
                            + " partitions) puts the key in partition " + want[i]));
                }
            }
        }
    }

    /**
     * Epoch e of the descriptor; a record of an epoch newer than the descriptor waits for it (its
     * streams are bound before it is active). Null: the topic has no such epoch.
     */
    private TopicDescriptor.Epoch knownEpoch(int e, Part p) throws Stop {
        while (true) {
            mu.lock();
            try {
                TopicDescriptor.Epoch ep = desc.epoch(e);
                if (ep != null) {
                    return ep;
                }
                if (e <= desc.current().number()) {
                    return null;
                }
            } finally {
                mu.unlock();
            }
            refresh();
            pauseOrStop(p);
        }
    }

    /** Epoch e with its boundaries: a record of a newer epoch exists, so it has ended; the descriptor is read again until it says so. */
    private TopicDescriptor.Epoch endedEpoch(int e, Part p) throws Stop {
        while (true) {
            mu.lock();
            try {
                TopicDescriptor.Epoch ep = desc.epoch(e);
                if (ep != null && ep.ended() && ep.boundaryCount() == ep.partitions() && desc.epoch(e + 1) != null) {
                    return ep;
                }
            } finally {
                mu.unlock();
            }
            refresh();
            mu.lock();
            try {
                TopicDescriptor.Epoch ep = desc.epoch(e);
                if (ep != null && ep.ended() && desc.epoch(e + 1) != null) {
                    return ep;
                }
            } finally {
                mu.unlock();
            }
            pauseOrStop(p);
        }
    }

    private void pauseOrStop(Part p) throws Stop {
        mu.lock();
        try {
            if (p.stopped || fatal != null || closed) {
                throw new Stop();
            }
            changed.await(50, TimeUnit.MILLISECONDS);
            if (p.stopped || fatal != null || closed) {
                throw new Stop();
            }
        } catch (InterruptedException ex) {
            Thread.currentThread().interrupt();
            throw new Stop();
        } finally {
            mu.unlock();
        }
    }

    /**
     * For the keyed records of a batch: their partitions in the older epochs that matter, {epoch:
     * partition}, one batch call into each epoch's module (null for a record that needs none).
     * Those are the epochs the group has not fully drained (for the gate) and, when the listener
     * wants keys-assigned, the previous epoch (to know where the key came from).
     */
    private List<Map<Integer, Integer>> parents(List<Object> items, Part p) throws Stop {
        int first;
        int drained;
        mu.lock();
        try {
            first = desc.epochs().get(0).number();
            drained = o.gating() ? drainedThroughLocked() : Integer.MAX_VALUE - 1;
        } finally {
            mu.unlock();
        }
        List<Map<Integer, Integer>> out = new ArrayList<>(Collections.nCopies(items.size(), null));
        Map<Integer, List<Integer>> need = new TreeMap<>();
        for (int i = 0; i < items.size(); i++) {
            if (!(items.get(i) instanceof ConsumerRecord)) {
                continue;
            }
            ConsumerRecord r = (ConsumerRecord) items.get(i);
            if (r.key() == null || r.misplacement() != null || r.epoch() <= first) {
                continue;
            }
            int lo = Math.max(drained + 1, first);
            if (announce) {
                lo = Math.min(lo, r.epoch() - 1);
            }
            if (lo >= r.epoch()) {
                continue;
            }
            out.set(i, new HashMap<>());
            for (int e = lo; e < r.epoch(); e++) {
                need.computeIfAbsent(e, k -> new ArrayList<>()).add(i);
            }
        }
        for (Map.Entry<Integer, List<Integer>> en : need.entrySet()) {
            TopicDescriptor.Epoch ep = endedEpoch(en.getKey(), p);
            Partitioner f = c.partitioner(ep.partitioner());
            List<byte[]> keys = new ArrayList<>();
            for (int i : en.getValue()) {
                keys.add(((ConsumerRecord) items.get(i)).key());
            }
            int[] qs = f.partitionAll(keys, ep.partitions());
            int j = 0;
            for (int i : en.getValue()) {
                out.get(i).put(en.getKey(), qs[j++]);
            }
        }
        return out;
    }

    /**
     * §6.5: waits until, for every older epoch the group has not fully drained, the key's partition
     * there is committed past the epoch's boundary. Returns the key's partition in the previous
     * epoch when the key moved here from another partition (for keys-assigned), else -1. {@code
     * beforeWait} runs once, before the first wait (it hands the records before this one over).
     */
    private int gate(Part p, ConsumerRecord rec, Map<Integer, Integer> parents, Runnable beforeWait) throws Stop {
        long started = 0;
        boolean waited = false;
        if (!announce) {
            mu.lock();
            try {
                if (o.gating() && Math.max(drainedThroughLocked(), Collections.min(parents.keySet()) - 1) >= rec.epoch() - 1) {
                    // Every older epoch is drained (since parents() ran): nothing to wait for, and no
                    // keys-assigned step to run. Once a replay's parents drained, this is all it costs.
                    return -1;
                }
            } finally {
                mu.unlock();
            }
        }
        endedEpoch(rec.epoch() - 1, p); // the descriptor shows epoch x-1 ended (and so every older one)
        Rules.Gate g;
        mu.lock();
        try {
            // Epochs below those computed in parents() were drained then (positions only grow).
            int drained = o.gating() ? Math.max(drainedThroughLocked(), Collections.min(parents.keySet()) - 1) : rec.epoch() - 1;
            g = Rules.gateRecord(desc, drained, rec.epoch(), p.q, ep -> parents.get(ep.number()), this::positionLocked);
        } finally {
            mu.unlock();
        }
        int prev = g.parent();
        for (Rules.Wait w : g.waits()) {
            int e = w.epoch();
            int qe = w.partition();
            long boundary = w.boundary();
            long lastFetch = System.nanoTime();
            boolean logged = false;
            while (true) {
                mu.lock();
                try {
                    if (p.stopped || p.gen != gen || closed) {
                        throw new Stop();
                    }
                    if (positionLocked(qe) >= boundary) {
                        break;
                    }
                } finally {
                    mu.unlock();
                }
                if (!waited) {
                    waited = true;
                    started = System.nanoTime();
                    beforeWait.run();
                }
                mu.lock();
                try {
                    if (positionLocked(qe) < boundary && !p.stopped) {
                        changed.await(hbNanos, TimeUnit.NANOSECONDS);
                    }
                } catch (InterruptedException ex) {
                    Thread.currentThread().interrupt();
                    throw new Stop();
                } finally {
                    mu.unlock();
                }
                long now = System.nanoTime();
                if (now - lastFetch >= hbNanos) {
                    // The watch brings positions as they are committed; in case it lags, read the
                    // parent's key directly once a heartbeat while waiting.
                    lastFetch = now;
                    fetchPState(qe);
                }
                if (!logged && now - started > 3 * sessionNanos) {
                    logged = true;
                    long at;
                    mu.lock();
                    try {
                        at = positionLocked(qe);
                    } finally {
                        mu.unlock();
                    }
                    log("member " + member + ": partition " + p.q + ": record " + rec.sequence() + " (epoch " + rec.epoch()
                            + ") still waits for partition " + qe + " to reach " + boundary + " (epoch " + e + " boundary); the group is at " + at
                            + (o.autoCommit() ? "" : "; with auto-commit off, gates open only when the parents' records are committed"));
                }
            }
        }
        boolean first;
        mu.lock();
        try {
            first = g.assigned() != null && !assignedDone.contains(List.of(p.q, rec.epoch(), prev));
        } finally {
            mu.unlock();
        }
        if (announce && first) {
            // KIP-253's handover (§6.5): keys-assigned runs once the group's position of the
            // parent is past its boundary (its owner ran keys-revoked before committing past it),
            // or at it while no live lease holds the parent and no one will read it again (shrunk
            // away and drained: its owner stopped at the boundary).
            long b = g.assigned().boundary();
            long lastFetch = System.nanoTime();
            mu.lock();
            try {
                while (!pastBoundaryLocked(prev, b)) {
                    if (p.stopped || p.gen != gen || closed) {
                        throw new Stop();
                    }
                    if (!waited) {
                        waited = true;
                        started = System.nanoTime();
                        mu.unlock();
                        try {
                            beforeWait.run();
                        } finally {
                            mu.lock();
                        }
                        continue;
                    }
                    changed.await(hbNanos, TimeUnit.NANOSECONDS);
                    if (System.nanoTime() - lastFetch >= hbNanos && !pastBoundaryLocked(prev, b)) {
                        lastFetch = System.nanoTime();
                        mu.unlock();
                        try {
                            fetchPState(prev);
                        } finally {
                            mu.lock();
                        }
                    }
                }
            } catch (InterruptedException ex) {
                Thread.currentThread().interrupt();
                throw new Stop();
            } finally {
                mu.unlock();
            }
        }
        if (waited) {
            long d = System.nanoTime() - started;
            mu.lock();
            try {
                gated++;
                totalWait += d;
                maxWait = Math.max(maxWait, d);
            } finally {
                mu.unlock();
            }
        }
        return g.assigned() != null ? prev : -1;
    }

    /** Whether partition q's group position is past boundary b in the sense of §6.5's keys-assigned (mu held). */
    private boolean pastBoundaryLocked(int q, long b) {
        PState st = pstate.get(q);
        boolean leased = st != null && Rules.leaseLive(st.owner, st.leaseEnd, System.currentTimeMillis(), Rules.maxClockSkewMs(sessionNanos / 1_000_000));
        return Rules.pastBoundary(desc, q, b, this::positionLocked, leased);
    }

    /** Reads partition q's key directly (when the watch may lag). */
    private void fetchPState(int q) {
        try {
            GroupKv.Entry en = kv.get(prefix + "p." + q);
            if (en != null && !en.deleted()) {
                PState st = parsePState(en.revision(), en.value());
                if (st != null) {
                    mu.lock();
                    try {
                        setPStateLocked(q, st);
                    } finally {
                        mu.unlock();
                    }
                }
            }
        } catch (PctlException ex) {
            // the next try
        }
    }

    /**
     * The newest ended epoch e such that every partition of every epoch up to e has an effective
     * position at or past its boundary; cached per generation (positions only grow within one).
     * mu held.
     */
    private int drainedThroughLocked() {
        List<TopicDescriptor.Epoch> es = desc.epochs();
        int d = Rules.drainedThrough(desc, drainedGen == gen ? drainedEpoch : es.get(0).number() - 1, this::positionLocked);
        if (keepDrainedAcrossSeeksForTest) {
            d = Math.max(d, keptDrained);
            keptDrained = d;
        }
        drainedGen = gen;
        drainedEpoch = d;
        return d;
    }

    // ---- errors, callbacks, logs --------------------------------------------------------------

    private void fail(PctlException e) {
        mu.lock();
        try {
            if (fatal == null) {
                fatal = e;
            }
            wakeAllLocked();
        } finally {
            mu.unlock();
        }
    }

    private PctlException fatalNow() {
        mu.lock();
        try {
            return fatal;
        } finally {
            mu.unlock();
        }
    }

    private void checkFatal() {
        PctlException f = fatalNow();
        if (f != null) {
            throw f;
        }
    }

    /** Runs an application callback; what it throws is the application's and reaches poll's caller. */
    private static void callback(Runnable r) {
        r.run();
    }

    private void log(String s) {
        java.util.function.Consumer<String> l = o.logger();
        if (l != null) {
            l.accept(s);
        }
    }

    // ---- JSON of the group state --------------------------------------------------------------

    static byte[] pstateJson(String owner, long leaseEnd, long position, int gen) {
        StringBuilder sb = new StringBuilder("{");
        if (!owner.isEmpty()) {
            sb.append("\"owner\":").append(dev.pctl.internal.Json.quote(owner)).append(',');
        }
        if (leaseEnd != 0) {
            sb.append("\"lease_end\":").append(leaseEnd).append(',');
        }
        sb.append("\"position\":").append(position);
        if (gen != 0) {
            sb.append(",\"generation\":").append(gen);
        }
        return GroupKv.utf8(sb.append('}').toString());
    }

    private static PState parsePState(long rev, byte[] data) {
        try {
            Map<String, Object> d = JsApi.parseObject(data, "partition state");
            Object ow = d.get("owner");
            return new PState(rev, JsApi.num(d.get("position")), (int) JsApi.num(d.get("generation")), ow instanceof String ? (String) ow : "",
                    JsApi.num(d.get("lease_end")));
        } catch (PctlException e) {
            return null;
        }
    }

    // ---- topics and resets (also for tools) ---------------------------------------------------

    /** The descriptor, waiting while the topic is being created. */
    static TopicDescriptor fetchTopic(PctlClient c, String topic, Duration timeout) {
        long deadline = System.nanoTime() + c.options().requestTimeout().toNanos();
        while (true) {
            TopicDescriptor t;
            try {
                t = c.topic(topic, timeout);
            } catch (UnavailableException e) {
                if (e.topicCreating() && System.nanoTime() < deadline) {
                    sleep(50);
                    continue;
                }
                throw e;
            }
            if (t.creating() && System.nanoTime() < deadline) {
                sleep(50);
                continue;
            }
            return t;
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

    /**
     * A seek's target in partition stream q (§6.6): 0, the last sequence, or one below the first
     * message stored at or after the time. For a time, a reader created to start there tells: the
     * server reports it as delivered up to the sequence before its start (this needs only what a
     * consumer credential scoped to the topic may do, §8.2).
     */
    private static long target(PctlClient c, String topic, int q, ResetTarget to, Duration timeout) {
        String stream = "PCTL_" + topic + "_" + q;
        if (to.kind().equals("beginning")) {
            return 0;
        }
        long last = JsApi.lastSeq(c, stream, timeout);
        if (to.kind().equals("end") || last == 0) {
            return last;
        }
        byte[] rnd = new byte[8];
        new java.security.SecureRandom().nextBytes(rnd);
        String name = "pctl_seek_" + java.util.HexFormat.of().formatHex(rnd);
        String filt = "pctl.data." + topic + ".>";
        Map<String, Object> deliver = new LinkedHashMap<>();
        deliver.put("deliver_policy", "by_start_time");
        deliver.put("opt_start_time", java.time.Instant.ofEpochMilli(to.timeMillis()).toString());
        Map<String, Object> r;
        try {
            r = JsApi.createEphemeral(c, stream, name, filt, deliver, 10_000_000_000L, timeout);
        } catch (JsApi.JsError e) {
            if (e.errCode == JsApi.STREAM_NOT_FOUND) {
                return 0;
            }
            throw new UnavailableException("seek " + stream + " to " + to + ": " + e.getMessage());
        }
        try {
            JsApi.request(c, "$JS.API.CONSUMER.DELETE." + stream + "." + name, null, new byte[0], timeout);
        } catch (PctlException | JsApi.JsError e) {
            // removed by its inactive threshold anyway
        }
        return Math.min(last, JsApi.num(JsApi.obj(r.get("delivered")).get("stream_seq")));
    }

    /**
     * Resets a group (§6.6, the resetter's side): writes {@code g.reset} with the next generation
     * (the commit point), then every partition key. Members follow by themselves.
     */
    static Reset resetGroup(PctlClient c, String topic, String group, ResetTarget to, String by) {
        if (group == null || !ConsumerOptions.NAME.matcher(group).matches()) {
            throw new BadRequestException("consumer group \"" + group + "\": 1 to 64 characters of A-Z a-z 0-9 _ -");
        }
        // A reset writes group keys (and creates a missing group): the members' server (§6.1, §6.6).
        ServerVersion.require(c, "pctl's group reset", "it writes the group's keys that members read, spec/protocol.md §6.1, §6.6");
        Duration timeout = Duration.ofSeconds(10);
        GroupKv kv = new GroupKv(c, timeout);
        long rev;
        int g;
        long[] positions;
        String prefix;
        int m;
        while (true) {
            TopicDescriptor desc = fetchTopic(c, topic, c.options().requestTimeout());
            prefix = desc.id() + "." + group + ".";
            GroupKv.Entry e = kv.get(prefix + "g.reset");
            g = 0;
            rev = 0;
            if (e != null && !e.deleted()) {
                rev = e.revision();
                Reset cur = parseReset(rev, e.value());
                g = cur == null ? 0 : cur.gen;
            }
            m = desc.maxPartitions();
            positions = new long[m];
            List<CompletableFuture<Long>> fs = new ArrayList<>();
            for (int q = 0; q < m; q++) {
                int qq = q;
                fs.add(CompletableFuture.supplyAsync(() -> target(c, topic, qq, to, timeout), StreamReader.BACKGROUND));
            }
            for (int q = 0; q < m; q++) {
                try {
                    positions[q] = fs.get(q).join();
                } catch (java.util.concurrent.CompletionException ex) {
                    if (ex.getCause() instanceof PctlException) {
                        throw (PctlException) ex.getCause();
                    }
                    throw ex;
                }
            }
            StringBuilder body = new StringBuilder("{\"generation\":").append(g + 1).append(",\"to\":\"").append(to.kind()).append('"');
            if (to.kind().equals("time")) {
                body.append(",\"time\":").append(to.timeMillis());
            }
            body.append(",\"positions\":[");
            for (int q = 0; q < m; q++) {
                body.append(q > 0 ? "," : "").append(positions[q]);
            }
            body.append("],\"by\":").append(dev.pctl.internal.Json.quote(by)).append(",\"at\":\"").append(JsApi.now()).append("\"}");
            try {
                rev = rev != 0 ? kv.update(prefix + "g.reset", GroupKv.utf8(body.toString()), rev)
                        : kv.create(prefix + "g.reset", GroupKv.utf8(body.toString()));
            } catch (GroupKv.Conflict ex) {
                continue; // another reset won: go on top of it
            }
            break;
        }
        g++;
        for (int q = 0; q < m; q++) {
            String key = prefix + "p." + q;
            while (true) {
                GroupKv.Entry e = kv.get(key);
                byte[] b = pstateJson("", 0, positions[q], g);
                try {
                    if (e == null || e.deleted()) {
                        kv.create(key, b);
                    } else {
                        PState st = parsePState(e.revision(), e.value());
                        if (st != null && st.gen >= g) {
                            break;
                        }
                        kv.update(key, b, e.revision());
                    }
                } catch (GroupKv.Conflict ex) {
                    continue;
                }
                break;
            }
        }
        try {
            kv.create(prefix + "g.created", GroupKv.utf8(JsApi.now()));
        } catch (GroupKv.Conflict ex) {
            // exists
        }
        return new Reset(rev, g, positions);
    }

    /** Used by {@link PctlClient#resetGroup}: the generation the reset made. */
    static int reset(PctlClient c, String topic, String group, ResetTarget to, String by) {
        return resetGroup(c, topic, group, to, by).gen;
    }
}
