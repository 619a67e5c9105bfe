package dev.pctl;

import java.security.SecureRandom;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Objects;
import java.util.regex.Pattern;

/**
 * How a {@link Consumer} (a consumer-group member) behaves. Immutable; build one with {@link
 * #builder(String)}. Every setting documents its default.
 *
 * <pre>{@code
 * ConsumerOptions o = ConsumerOptions.builder("billing")
 *         .fromBeginning(true)
 *         .listener(new RebalanceListener() {
 *             public void onKeysRevoked(KeyChange ch) { state.handOver(ch); }
 *         })
 *         .build();
 * }</pre>
 */
public final class ConsumerOptions {
    static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]{1,64}");
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final RebalanceListener NONE = new RebalanceListener() {};

    private final String group;
    private final String member;
    private final boolean fromBeginning;
    private final String start;
    private final boolean autoCommit;
    private final Duration heartbeat;
    private final Duration sessionTimeout;
    private final Duration commitInterval;
    private final boolean gating;
    private final int maxBuffered;
    private final int maxPollRecords;
    private final RebalanceListener listener;
    private final StateHandler state;
    private final MisplacedPolicy misplaced;
    private final String assignor;
    private final java.util.function.Consumer<ConsumerRecord> onMisplaced;
    private final java.util.function.Consumer<String> logger;

    private ConsumerOptions(Builder b) {
        this.group = b.group;
        this.member = b.member != null ? b.member : "java-" + randomHex();
        this.fromBeginning = b.fromBeginning;
        this.start = b.start;
        this.autoCommit = b.autoCommit;
        this.heartbeat = b.heartbeat;
        this.sessionTimeout = b.sessionTimeout;
        this.commitInterval = b.commitInterval;
        this.gating = b.gating;
        this.maxBuffered = b.maxBuffered;
        this.maxPollRecords = b.maxPollRecords;
        this.listener = b.listener;
        this.state = b.state;
        this.misplaced = b.misplaced;
        this.assignor = b.assignor;
        this.onMisplaced = b.onMisplaced;
        this.logger = b.logger;
    }

    private static String randomHex() {
        byte[] b = new byte[8];
        RANDOM.nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    /** A builder for a member of {@code group} with every other setting at its default. */
    public static Builder builder(String group) {
        return new Builder(group);
    }

    /** The consumer group. */
    public String group() {
        return group;
    }

    /** This member's id in the group. */
    public String member() {
        return member;
    }

    /** Where a group that does not exist yet starts: "now", "beginning", "current-epoch", or null (the default rule of {@link Builder#start}). */
    public String start() {
        return start;
    }

    /** Whether a group that does not exist yet starts at the first record of every partition. */
    public boolean fromBeginning() {
        return fromBeginning;
    }

    /** Whether records are acknowledged by the next {@code poll} (else by {@link Consumer#commit()}). */
    public boolean autoCommit() {
        return autoCommit;
    }

    /** How often the member announces itself and rebalances. */
    public Duration heartbeat() {
        return heartbeat;
    }

    /** How long a silent member keeps its place and its leases. */
    public Duration sessionTimeout() {
        return sessionTimeout;
    }

    /** How often acknowledged positions are written. */
    public Duration commitInterval() {
        return commitInterval;
    }

    /** Whether new-epoch records wait for their keys' older partitions (spec/protocol.md §6.5). */
    public boolean gating() {
        return gating;
    }

    /** Most records read ahead and not yet returned, per partition. */
    public int maxBuffered() {
        return maxBuffered;
    }

    /** Most records one {@code poll} returns. */
    public int maxPollRecords() {
        return maxPollRecords;
    }

    /** The rebalance listener (one that does nothing by default). */
    public RebalanceListener listener() {
        return listener;
    }

    /** The state handler (spec/protocol.md §6.9), or null. */
    public StateHandler state() {
        return state;
    }

    /** What to do with a misplaced record. */
    public MisplacedPolicy misplaced() {
        return misplaced;
    }

    /** The assignor asked for ("modulo" or "sticky"), or null: a new group's, checked against an existing group's (§6.1). */
    public String assignor() {
        return assignor;
    }

    /** Called with every misplaced record read, or null. */
    public java.util.function.Consumer<ConsumerRecord> onMisplaced() {
        return onMisplaced;
    }

    /** Receives the member's decisions (acquire, release, lease lost, reader recoveries), or null. */
    public java.util.function.Consumer<String> logger() {
        return logger;
    }

    /** Builds {@link ConsumerOptions}. */
    public static final class Builder {
        private final String group;
        private String member;
        private boolean fromBeginning;
        private String start;
        private boolean autoCommit = true;
        private Duration heartbeat = Duration.ofSeconds(1);
        private Duration sessionTimeout = Duration.ofSeconds(6);
        private Duration commitInterval = Duration.ofMillis(200);
        private boolean gating = true;
        private int maxBuffered = 512;
        private int maxPollRecords = 500;
        private RebalanceListener listener = NONE;
        private StateHandler state;
        private MisplacedPolicy misplaced = MisplacedPolicy.STOP;
        private String assignor;
        private java.util.function.Consumer<ConsumerRecord> onMisplaced;
        private java.util.function.Consumer<String> logger;

        private Builder(String group) {
            if (group == null || !NAME.matcher(group).matches()) {
                throw new BadRequestException("consumer group \"" + group + "\": 1 to 64 characters of A-Z a-z 0-9 _ -");
            }
            this.group = group;
        }

        /** This member's id: 1 to 64 of {@code A-Z a-z 0-9 _ -}. Default: {@code java-} and 16 random hex digits. */
        public Builder member(String id) {
            if (id != null && !NAME.matcher(id).matches()) {
                throw new BadRequestException("member id \"" + id + "\": 1 to 64 characters of A-Z a-z 0-9 _ -");
            }
            this.member = id;
            return this;
        }

        /**
         * A group that does not exist yet starts at the first record of every partition; otherwise
         * after the records present when it is created. An existing group always goes on from its
         * committed positions; partitions created later (epoch changes) are read from their first
         * record. Default false.
         */
        public Builder fromBeginning(boolean b) {
            this.fromBeginning = b;
            return this;
        }

        /**
         * Where a group that does not exist yet starts (spec/protocol.md §6.1, §10.5): "now",
         * "beginning" (every epoch, gated) or "current-epoch" (the current epoch alone, no gates,
         * every backfilled copy delivered: each key's latest record once the backfill has ended).
         * Default (null): "beginning" with {@link #fromBeginning}; on a compacted topic
         * "current-epoch" when no backfill runs ("beginning" while one does); else "now".
         */
        public Builder start(String from) {
            if (from != null && !from.equals("now") && !from.equals("beginning") && !from.equals("current-epoch")) {
                throw new BadRequestException("start \"" + from + "\": give now, beginning or current-epoch (spec/protocol.md §6.1, §10.5)");
            }
            this.start = from;
            return this;
        }

        /**
         * True (default): the records a {@code poll} returned are acknowledged when {@code poll} is
         * called again (or the consumer is closed). False: only {@link Consumer#commit()} and
         * {@link Consumer#commit(ConsumerRecord)} acknowledge (at-least-once processing: what was
         * not acknowledged is delivered again after a crash or a rebalance). Either way positions
         * are written every {@link #commitInterval}.
         */
        public Builder autoCommit(boolean b) {
            this.autoCommit = b;
            return this;
        }

        /** How often the member announces itself and rebalances. Default 1 s. */
        public Builder heartbeat(Duration d) {
            this.heartbeat = positive(d, "heartbeat");
            return this;
        }

        /** A member silent this long is gone and its leases expire. Default 6 s. */
        public Builder sessionTimeout(Duration d) {
            this.sessionTimeout = positive(d, "session timeout");
            return this;
        }

        /**
         * How often acknowledged positions are written. Default 200 ms. A member that crashes
         * redelivers at most what was acknowledged since (in order).
         */
        public Builder commitInterval(Duration d) {
            this.commitInterval = positive(d, "commit interval");
            return this;
        }

        /**
         * False delivers new-epoch records without waiting for their parents: per-key order is NOT
         * kept then (for the benchmark that measures what the gates cost). Default true.
         */
        public Builder gating(boolean b) {
            this.gating = b;
            return this;
        }

        /** Most records read ahead per partition. Default 512. */
        public Builder maxBuffered(int n) {
            if (n < 1) {
                throw new BadRequestException("maxBuffered must be at least 1");
            }
            this.maxBuffered = n;
            return this;
        }

        /** Most records one {@code poll} returns. Default 500. */
        public Builder maxPollRecords(int n) {
            if (n < 1) {
                throw new BadRequestException("maxPollRecords must be at least 1");
            }
            this.maxPollRecords = n;
            return this;
        }

        /** The rebalance listener (partition- and key-level callbacks). Default: none. */
        public Builder listener(RebalanceListener l) {
            this.listener = Objects.requireNonNull(l, "listener");
            return this;
        }

        /**
         * The per-key state handover (spec/protocol.md §6.9): the consumer loads a key's state before
         * it delivers a record of a key it does not hold and flushes the state of keys leaving the
         * member ({@link StateHandler}). Needs gating. Default: none.
         */
        public Builder state(StateHandler h) {
            this.state = h;
            return this;
        }

        /** What to do with a misplaced record (spec/protocol.md §6.8). Default {@link MisplacedPolicy#STOP}. */
        public Builder misplaced(MisplacedPolicy p) {
            this.misplaced = Objects.requireNonNull(p, "misplaced policy");
            return this;
        }

        /**
         * A new group's assignor (spec/protocol.md §6.2): "modulo" (the default) or "sticky" (keeps
         * each key with the member that holds its state, §6.2.1). An existing group keeps its own;
         * one whose assignor differs from the one given refuses the member ({@link ConflictException}).
         */
        public Builder assignor(String a) {
            if (a != null && !a.equals("modulo") && !a.equals("sticky")) {
                throw new BadRequestException("assignor " + a + ": give modulo or sticky (spec/protocol.md §6.2)");
            }
            this.assignor = a;
            return this;
        }

        /**
         * Called (on the polling thread) with every misplaced record the member reads, before the
         * policy applies: for skipped ones and the one that stops the member too. Default: none.
         */
        public Builder onMisplaced(java.util.function.Consumer<ConsumerRecord> f) {
            this.onMisplaced = f;
            return this;
        }

        /** Receives the member's decisions, one line each (from any of its threads). Default: none. */
        public Builder logger(java.util.function.Consumer<String> f) {
            this.logger = f;
            return this;
        }

        /** The options. */
        public ConsumerOptions build() {
            if (sessionTimeout.compareTo(heartbeat) <= 0) {
                throw new BadRequestException("session timeout " + sessionTimeout.toMillis() + " ms must be longer than the heartbeat ("
                        + heartbeat.toMillis() + " ms)");
            }
            if (state != null && !gating) {
                throw new BadRequestException("state: a state handler needs the epoch gate (a key's state is loaded after it): drop gating(false) (spec/protocol.md §6.9)");
            }
            return new ConsumerOptions(this);
        }

        private static Duration positive(Duration d, String what) {
            if (d == null || d.isNegative() || d.isZero()) {
                throw new BadRequestException(what + " must be positive");
            }
            return d;
        }
    }
}
