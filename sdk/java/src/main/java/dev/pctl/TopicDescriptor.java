package dev.pctl;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A topic's descriptor as the broker keeps it (spec/protocol.md §4): its epochs, oldest first;
 * the last is {@linkplain #current() current}. Immutable. Fetched with {@link
 * PctlClient#topic(String)}.
 */
public final class TopicDescriptor {
    private final String name;
    private final String id;
    private final List<Epoch> epochs;
    private final long revision;
    private final boolean creating;
    private final boolean deleting;
    private final boolean changing;
    private final int changePartitions;
    /** A compacted topic (spec/protocol.md §10: the descriptor has {@code compact}). */
    boolean compacted;
    /** A plain topic that backfills its history at epoch changes (the descriptor's {@code backfill: true}). */
    boolean backfill;
    /** A compacted topic's delete retention (how long a tombstone is kept), milliseconds. */
    long deleteRetentionMs;
    /** The epoch whose backfill runs (§10.3), 0 if none. */
    int backfilling;

    /**
     * Whether record subjects carry key tokens (spec/protocol.md §10.1): a compacted topic, or a
     * plain topic with backfill. Every subject decision asks this, never {@code compacted} alone
     * (Go: wire.Topic.KeySubjects).
     */
    boolean keySubjects() {
        return compacted || backfill;
    }
    /** Epochs up to this one are being retired (§10.7), 0 if none. */
    int retiringThrough;
    /** Epochs whose records are retired (§10.7). */
    java.util.Set<Integer> retired = java.util.Set.of();

    TopicDescriptor(String name, String id, List<Epoch> epochs, long revision, boolean creating, boolean deleting, boolean changing) {
        this(name, id, epochs, revision, creating, deleting, changing, 0);
    }

    TopicDescriptor(String name, String id, List<Epoch> epochs, long revision, boolean creating, boolean deleting, boolean changing,
            int changePartitions) {
        this.changePartitions = changePartitions;
        this.name = name;
        this.id = id;
        this.epochs = Collections.unmodifiableList(epochs);
        this.revision = revision;
        this.creating = creating;
        this.deleting = deleting;
        this.changing = changing;
    }

    /** The topic's name. */
    public String name() {
        return name;
    }

    /** The topic's id: random, new for every creation of the name. */
    public String id() {
        return id;
    }

    /** The epochs, oldest first. */
    public List<Epoch> epochs() {
        return epochs;
    }

    /** The current (last) epoch. */
    public Epoch current() {
        return epochs.get(epochs.size() - 1);
    }

    /** Epoch number e, or null if the descriptor does not hold it. */
    public Epoch epoch(int e) {
        if (epochs.isEmpty()) {
            return null;
        }
        int i = e - epochs.get(0).number();
        return i < 0 || i >= epochs.size() ? null : epochs.get(i);
    }

    /** The descriptor's revision in the broker's KV bucket. */
    public long revision() {
        return revision;
    }

    /** The topic is being created: not yet usable. */
    public boolean creating() {
        return creating;
    }

    /** The topic is being deleted. */
    public boolean deleting() {
        return deleting;
    }

    /** An epoch change is in progress (spec/protocol.md §7). */
    public boolean changing() {
        return changing;
    }

    /**
     * How many partition streams the topic has ever had: the largest partition count of any
     * epoch (and of an epoch change in progress).
     */
    public int maxPartitions() {
        int m = changePartitions;
        for (Epoch e : epochs) {
            m = Math.max(m, e.partitions());
        }
        return m;
    }

    /**
     * The last boundary of partition q in the ended epochs (0 if none): for a partition shrunk
     * away, the sequence of its last record.
     */
    long finalBoundary(int q) {
        long last = 0;
        for (int i = 0; i + 1 < epochs.size(); i++) {
            long b = epochs.get(i).boundary(q);
            if (b >= 0) {
                last = b;
            }
        }
        return last;
    }

    /**
     * Whether epoch e's records are retired or being retired (§10.7): a backfilled copy of one of
     * them is then delivered (§10.4).
     */
    boolean originRetired(int e) {
        if (retiringThrough > 0 && e <= retiringThrough) {
            return true;
        }
        if (!epochs.isEmpty() && e < epochs.get(0).number()) {
            return true;
        }
        return retired.contains(e);
    }

    /**
     * The position at which a group that reads the current epoch alone starts in stream q
     * (§10.5): the sequence of the last fence marker q has (max boundary + 1), 0 if none.
     */
    long currentEpochStart(int q) {
        long pos = 0;
        for (Epoch e : epochs) {
            long b = e.boundary(q);
            if (b >= 0 && b + 1 > pos) {
                pos = b + 1;
            }
        }
        return pos;
    }

    @Override
    public String toString() {
        Epoch c = current();
        return "topic " + name + " (epoch " + c.number() + ", " + c.partitions() + " partitions, " + c.partitioner().name() + ")";
    }

    /** One epoch: a partitioner and a partition count. */
    public static final class Epoch {
        private final int number;
        private final PartitionerRef partitioner;
        private final int partitions;
        private final Instant started;
        private final long[] boundaries;

        Epoch(int number, PartitionerRef partitioner, int partitions, Instant started, long[] boundaries) {
            this.number = number;
            this.partitioner = partitioner;
            this.partitions = partitions;
            this.started = started;
            this.boundaries = boundaries;
        }

        /** The epoch's number (1, 2, ...). */
        public int number() {
            return number;
        }

        /** The epoch's partitioner: the module's digest and the config. */
        public PartitionerRef partitioner() {
            return partitioner;
        }

        /** The epoch's partition count {@code N_e}. */
        public int partitions() {
            return partitions;
        }

        /** When the epoch started, or null. */
        public Instant started() {
            return started;
        }

        /** How many boundaries the epoch has (its partition count once it has ended, else 0). */
        int boundaryCount() {
            return boundaries == null ? 0 : boundaries.length;
        }

        /** Whether the epoch has ended (it has boundaries). */
        public boolean ended() {
            return boundaries != null;
        }

        /**
         * The stream sequence of partition q's last record of this epoch (0 if none), or -1 while
         * the epoch is current.
         */
        public long boundary(int q) {
            return boundaries == null || q < 0 || q >= boundaries.length ? -1 : boundaries[q];
        }
    }

    /** An epoch's partitioner: the module's digest (its identity), its name and the config bytes. */
    public static final class PartitionerRef {
        private final String name;
        private final String digest;
        private final byte[] config;

        PartitionerRef(String name, String digest, byte[] config) {
            this.name = name;
            this.digest = digest;
            this.config = config;
        }

        /** The module's metadata name, for humans. */
        public String name() {
            return name;
        }

        /** The hex SHA-256 of the module. */
        public String digest() {
            return digest;
        }

        /** The config bytes (spec/abi-v1.md §2.5), empty for none (a copy). */
        public byte[] config() {
            return config.clone();
        }

        byte[] configRef() {
            return config;
        }
    }

    // ---- parsing -----------------------------------------------------------------------------

    /** Reads a {@code topic.get} reply: {"topic": descriptor, "revision": R}. */
    @SuppressWarnings("unchecked")
    static TopicDescriptor fromReply(Object reply) {
        Map<String, Object> r = map(reply, "reply");
        Map<String, Object> t = map(r.get("topic"), "topic");
        List<Epoch> epochs = new ArrayList<>();
        Object eps = t.get("epochs");
        if (!(eps instanceof List) || ((List<Object>) eps).isEmpty()) {
            throw new InternalException("bad topic descriptor from the broker: no epochs");
        }
        for (Object o : (List<Object>) eps) {
            Map<String, Object> e = map(o, "epoch");
            Map<String, Object> p = map(e.get("partitioner"), "partitioner");
            byte[] config = new byte[0];
            if (p.get("config") instanceof String) {
                config = Base64.getDecoder().decode((String) p.get("config"));
            }
            long[] b = null;
            if (e.get("boundaries") instanceof List) {
                List<Object> l = (List<Object>) e.get("boundaries");
                b = new long[l.size()];
                for (int i = 0; i < b.length; i++) {
                    b[i] = num(l.get(i), "boundary");
                }
            }
            Instant started = null;
            if (e.get("started") instanceof String) {
                try {
                    started = Instant.parse((String) e.get("started"));
                } catch (RuntimeException ex) {
                    started = null;
                }
            }
            epochs.add(new Epoch((int) num(e.get("epoch"), "epoch"), new PartitionerRef(str(p.get("name")), str(p.get("digest")), config),
                    (int) num(e.get("partitions"), "partitions"), started, b));
        }
        int changeParts = 0;
        if (t.get("change") instanceof Map && ((Map<String, Object>) t.get("change")).get("partitions") instanceof Long) {
            changeParts = (int) (long) (Long) ((Map<String, Object>) t.get("change")).get("partitions");
        }
        TopicDescriptor d = new TopicDescriptor(str(t.get("name")), str(t.get("id")), epochs, r.get("revision") == null ? 0 : num(r.get("revision"), "revision"),
                Boolean.TRUE.equals(t.get("creating")), Boolean.TRUE.equals(t.get("deleting")), t.get("change") != null, changeParts);
        d.compacted = t.get("compact") instanceof Map;
        d.backfill = Boolean.TRUE.equals(t.get("backfill"));
        if (d.compacted && ((Map<String, Object>) t.get("compact")).get("delete_retention_ms") instanceof Long) {
            d.deleteRetentionMs = (Long) ((Map<String, Object>) t.get("compact")).get("delete_retention_ms");
        }
        java.util.Set<Integer> retired = new java.util.HashSet<>();
        for (Object o : (List<Object>) eps) {
            Map<String, Object> e = (Map<String, Object>) o;
            int n = (int) num(e.get("epoch"), "epoch");
            if (e.get("backfill") instanceof Map && "running".equals(((Map<String, Object>) e.get("backfill")).get("state"))) {
                d.backfilling = n;
            }
            if (Boolean.TRUE.equals(e.get("retired"))) {
                retired.add(n);
            }
        }
        d.retired = java.util.Collections.unmodifiableSet(retired);
        if (t.get("retiring") instanceof Map && ((Map<String, Object>) t.get("retiring")).get("through") instanceof Long) {
            d.retiringThrough = (int) (long) (Long) ((Map<String, Object>) t.get("retiring")).get("through");
        }
        return d;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> map(Object o, String what) {
        if (!(o instanceof Map)) {
            throw new InternalException("bad topic descriptor from the broker: " + what + " is not an object");
        }
        return (Map<String, Object>) o;
    }

    private static long num(Object o, String what) {
        if (!(o instanceof Long)) {
            throw new InternalException("bad topic descriptor from the broker: " + what + " is not an integer");
        }
        return (Long) o;
    }

    private static String str(Object o) {
        return o instanceof String ? (String) o : "";
    }
}
