package dev.pctl;

import java.util.ArrayList;
import java.util.List;
import java.util.function.IntPredicate;
import java.util.function.IntToLongFunction;
import java.util.function.ToIntFunction;

/**
 * The consumer group's decisions (spec/protocol.md §6.2 to §6.5) as pure functions of the
 * descriptor, the group's positions ({@code pos.applyAsLong(q)}: partition q's effective committed
 * position), the leases and a time passed in: no I/O, no clock, no partitioner (a key's partition
 * in an epoch is a function argument). {@link Consumer} decides through them, and
 * ProtocolVectorsTest replays spec/vectors/protocol/*.jsonl against them, the same traces the Go
 * core (internal/proto) and the other SDKs replay. Times are milliseconds.
 */
final class Rules {
    private Rules() {}

    /** An unmet gate condition: partition's position must reach boundary, its boundary in epoch. */
    record Wait(int epoch, int partition, long boundary) {}

    /**
     * The gate of a keyed record (§6.5): refresh the descriptor first, or wait for {@code waits}
     * (newest epoch first; empty: deliver now); parent is the key's partition in epoch x-1 (-1 in
     * the first epoch); assigned is keys assigned's condition when parent is not the record's
     * partition, else null.
     */
    record Gate(boolean refresh, List<Wait> waits, int parent, Wait assigned) {}

    /** The decision for a fence marker (§6.4). */
    record Marker(boolean refresh, List<Integer> revoke, long position, boolean commit) {}

    static boolean ended(TopicDescriptor.Epoch ep) {
        return ep != null && ep.ended() && ep.boundaryCount() == ep.partitions();
    }

    /** §6.2: the current epoch's partitions, and those shrunk away below their final boundary. */
    static List<Integer> assignable(TopicDescriptor t, IntToLongFunction pos) {
        int n = t.current().partitions();
        List<Integer> out = new ArrayList<>();
        for (int q = 0; q < t.maxPartitions(); q++) {
            if (q < n || pos.applyAsLong(q) < t.finalBoundary(q)) {
                out.add(q);
            }
        }
        return out;
    }

    /** Partition q was shrunk away and is drained to its final boundary. */
    static boolean retired(TopicDescriptor t, int q, IntToLongFunction pos) {
        return q >= t.current().partitions() && pos.applyAsLong(q) >= t.finalBoundary(q);
    }

    /** The newest ended epoch through which every epoch's every partition is at its boundary, searching after from. */
    static int drainedThrough(TopicDescriptor t, int from, IntToLongFunction pos) {
        int d = Math.max(from, t.epochs().get(0).number() - 1);
        while (true) {
            TopicDescriptor.Epoch ep = t.epoch(d + 1);
            if (!ended(ep)) {
                return d;
            }
            for (int q = 0; q < ep.partitions(); q++) {
                if (pos.applyAsLong(q) < ep.boundary(q)) {
                    return d;
                }
            }
            d++;
        }
    }

    /** §6.5, §6.7: the gate of a keyed record of epoch x read from partition p; f gives the key's partition in an epoch. */
    static Gate gateRecord(TopicDescriptor t, int drained, int x, int p, ToIntFunction<TopicDescriptor.Epoch> f, IntToLongFunction pos) {
        int first = t.epochs().get(0).number();
        if (x <= first) {
            return new Gate(false, List.of(), -1, null);
        }
        TopicDescriptor.Epoch prev = t.epoch(x - 1);
        if (!ended(prev) || t.epoch(x) == null) {
            return new Gate(true, List.of(), -1, null);
        }
        List<Wait> waits = new ArrayList<>();
        int parent = -1;
        for (int e = x - 1; e >= first; e--) {
            if (e <= drained && e != x - 1) {
                break;
            }
            TopicDescriptor.Epoch ep = t.epoch(e);
            int q = f.applyAsInt(ep);
            if (e == x - 1) {
                parent = q;
            }
            if (e <= drained || q == p) {
                continue;
            }
            if (pos.applyAsLong(q) < ep.boundary(q)) {
                waits.add(new Wait(e, q, ep.boundary(q)));
            }
        }
        Wait assigned = parent != p ? new Wait(x - 1, parent, prev.boundary(parent)) : null;
        return new Gate(false, waits, parent, assigned);
    }

    /** §6.5 keys assigned may go on: q's position is past b, or at b while q is retired and no live lease holds it. */
    static boolean pastBoundary(TopicDescriptor t, int q, long b, IntToLongFunction pos, boolean leased) {
        long at = pos.applyAsLong(q);
        if (at != b) {
            return at > b;
        }
        return !leased && retired(t, q, pos);
    }

    /** §6.3 the clock-skew bound of leases: min(1 s, session / 6), whole milliseconds. */
    static long maxClockSkewMs(long sessionMs) {
        return Math.min(1000, sessionMs / 6);
    }

    /** A lease (by its holder's clock) is live to another member at now (its own clock). */
    static boolean leaseLive(String owner, long leaseEnd, long now, long skewMs) {
        return owner != null && !owner.isEmpty() && now < leaseEnd + skewMs;
    }

    /** §6.3: member me may take a partition whose key shows this lease. */
    static boolean mayAcquire(String me, String owner, long leaseEnd, long now, long skewMs) {
        return owner == null || owner.isEmpty() || owner.equals(me) || !leaseLive(owner, leaseEnd, now, skewMs);
    }

    /** §6.3: the holder of a lease ending at leaseUntil may deliver at now: more than a quarter of the session is left (any unit, the same for all three). */
    static boolean mayDeliver(long leaseUntil, long now, long session) {
        return leaseUntil - now > session / 4;
    }

    /** Ended epochs (with a successor) whose boundary in q is at or below at and whose keys-revoked step has not run, oldest first. */
    static List<Integer> revokes(TopicDescriptor t, int q, long at, IntPredicate done) {
        List<Integer> out = new ArrayList<>();
        List<TopicDescriptor.Epoch> es = t.epochs();
        for (int i = 0; i + 1 < es.size(); i++) {
            TopicDescriptor.Epoch e = es.get(i);
            if (q >= e.boundaryCount() || at < e.boundary(q) || done.test(e.number())) {
                continue;
            }
            out.add(e.number());
        }
        return out;
    }

    /** Epochs whose boundary in q is below start: an owner acquiring q at start counts their keys-revoked steps as run. */
    static List<Integer> passed(TopicDescriptor t, int q, long start) {
        List<Integer> out = new ArrayList<>();
        for (TopicDescriptor.Epoch e : t.epochs()) {
            if (q < e.boundaryCount() && e.boundary(q) < start) {
                out.add(e.number());
            }
        }
        return out;
    }

    /** A fence marker {@code Pctl-Fence: fence} waits for a descriptor showing epoch fence-1 ended and epoch fence. */
    static boolean markerNeedsDescriptor(TopicDescriptor t, int fence) {
        return fence > 1 && !(ended(t.epoch(fence - 1)) && t.epoch(fence) != null);
    }

    /** §6.4: refresh first; or the keys-revoked steps to run, the new position (seq), commit at once. */
    static Marker fenceMarker(TopicDescriptor t, int q, long seq, int fence, IntPredicate done) {
        if (markerNeedsDescriptor(t, fence)) {
            return new Marker(true, List.of(), 0, false);
        }
        List<Integer> rv = new ArrayList<>();
        for (long at : new long[] {seq - 1, seq}) {
            rv.addAll(revokes(t, q, at, e -> rv.contains(e) || done.test(e)));
        }
        return new Marker(false, rv, seq, true);
    }

    // ---- the producer's decisions (spec/protocol.md §5.1.2) ----

    /** The order (indices into seqs) in which a fenced epoch's unacknowledged records are re-sent: their original send order. */
    static int[] resendOrder(long[] seqs) {
        Integer[] idx = new Integer[seqs.length];
        for (int i = 0; i < idx.length; i++) {
            idx[i] = i;
        }
        java.util.Arrays.sort(idx, (a, b) -> Long.compare(seqs[a], seqs[b])); // stable
        int[] out = new int[idx.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = idx[i];
        }
        return out;
    }

    /** A search reads down to (exclusive) the sink's floor, or the lowest floor a record was first sent to this stream above. */
    static long searchFloor(long sinkFloor, List<Long> firstSent) {
        long low = sinkFloor;
        for (long f : firstSent) {
            low = Math.min(low, f);
        }
        return low;
    }

    /** {top, readLast (1/0)}: a fenced partition is searched from its epoch's boundary (if > 0), else from the stream's last sequence. */
    static long[] searchTop(boolean fenced, long boundary) {
        return fenced && boundary > 0 ? new long[] {boundary, 0} : new long[] {0, 1};
    }

    /** The per-key rule: a record may join the open batch unless the rule holds, it is keyed and its key is in the batch. */
    static boolean admits(boolean perKey, boolean keyless, boolean inBatch) {
        return !perKey || keyless || !inBatch;
    }

    /** How a queue of records (keys[i], keyless[i]) is cut into batches by the per-key rule and the batch size. */
    static List<List<Integer>> batches(List<String> keys, List<Boolean> keyless, boolean perKey, int size) {
        List<List<Integer>> out = new ArrayList<>();
        List<Integer> cur = new ArrayList<>();
        java.util.Set<String> in = new java.util.HashSet<>();
        for (int i = 0; i < keys.size(); i++) {
            if (cur.size() >= size || !admits(perKey, keyless.get(i), in.contains(keys.get(i)))) {
                out.add(cur);
                cur = new ArrayList<>();
                in = new java.util.HashSet<>();
            }
            cur.add(i);
            if (!keyless.get(i)) {
                in.add(keys.get(i));
            }
        }
        if (!cur.isEmpty()) {
            out.add(cur);
        }
        return out;
    }
}
