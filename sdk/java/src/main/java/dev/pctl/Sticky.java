package dev.pctl;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.BiFunction;

/**
 * The producer's sticky-ambiguity rule (spec/protocol.md §5.1.2) as an I/O-free state machine,
 * the same as the Go core's proto.Sticky: events in (a record produced, records acknowledged, an
 * anomaly on a sink, a sink's settling decided, records failed before transmit, a newer epoch,
 * close), {@link Actions} out. No I/O, no clock, no partitioner: {@code f.apply(epoch, key)} gives
 * a key's partition. ProtocolVectorsTest replays spec/vectors/protocol/sticky-ambiguity.jsonl and
 * sticky-permanent-failures.jsonl against it.
 *
 * <p>The rule: an anomaly makes every record a sink has in flight ambiguous; while any is, the
 * sink sends nothing more (of any key); other partitions' sinks of the epoch go on. Nothing a sink
 * holds moves to another partition or epoch before the sink settled: after a newer epoch every old
 * sink's records, and those produced since, are re-sent in send order once every old sink settled.
 * A record settled as stored is acknowledged where it is; one not stored is re-sent, ahead of
 * every later record; one failed for good (in settling, or before it is transmitted) fails where it
 * is and is never sent again. Only settling ends an ambiguity; close fails what is left.
 */
class Sticky {
    /** A record to transmit now, to a partition of an epoch. */
    record Placed(long seq, int epoch, int partition) {}

    /** What to do after an event: transmit send in order, report acked and failed. */
    record Actions(List<Placed> send, List<Long> acked, List<Long> failed) {
        static Actions none() {
            return new Actions(new ArrayList<>(), new ArrayList<>(), new ArrayList<>());
        }
    }

    static final class Rec {
        final long seq;
        final String key;
        boolean sent; // transmitted, fate not yet known
        boolean ambiguous; // an anomaly left its fate unknown; only settling ends it

        Rec(long seq, String key) {
            this.seq = seq;
            this.key = key;
        }
    }

    static final class Sink {
        final int epoch;
        final int partition;
        List<Rec> recs = new ArrayList<>(); // unacknowledged, in send order

        Sink(int epoch, int partition) {
            this.epoch = epoch;
            this.partition = partition;
        }
    }

    int epoch;
    int next; // a newer epoch waiting for the old sinks (0: none)
    final BiFunction<Integer, String, Integer> f;
    List<Sink> sinks = new ArrayList<>(); // in creation order
    List<Rec> held = new ArrayList<>(); // produced while moving to epoch next
    boolean closed;

    Sticky(int epoch, BiFunction<Integer, String, Integer> f) {
        this.epoch = epoch;
        this.f = f;
    }

    Sink sink(int e, int q) {
        for (Sink k : sinks) {
            if (k.epoch == e && k.partition == q) {
                return k;
            }
        }
        return null;
    }

    boolean ambiguous(Sink k) {
        for (Rec r : k.recs) {
            if (r.ambiguous) {
                return true;
            }
        }
        return false;
    }

    void place(Rec r, Actions a) {
        int q = f.apply(epoch, r.key);
        Sink k = sink(epoch, q);
        if (k == null) {
            k = new Sink(epoch, q);
            sinks.add(k);
        }
        k.recs.add(r);
        if (!ambiguous(k)) {
            r.sent = true;
            a.send().add(new Placed(r.seq, k.epoch, q));
        }
    }

    /** The application sent record seq with key. */
    Actions produce(long seq, String key) {
        Actions a = Actions.none();
        Rec r = new Rec(seq, key);
        if (closed) {
            a.failed().add(seq);
        } else if (next != 0) {
            held.add(r);
        } else {
            place(r, a);
        }
        return a;
    }

    /** A clean acknowledgement covers these records in flight (never an ambiguous one). */
    Actions acked(List<Long> seqs) {
        Actions a = Actions.none();
        for (long seq : seqs) {
            found:
            for (Sink k : sinks) {
                for (int i = 0; i < k.recs.size(); i++) {
                    Rec r = k.recs.get(i);
                    if (r.seq == seq && r.sent && !r.ambiguous) {
                        k.recs.remove(i);
                        a.acked().add(seq);
                        break found;
                    }
                }
            }
        }
        return a;
    }

    /** The sink's open batch had an anomaly: its records in flight are ambiguous. Nothing moves. */
    Actions anomaly(int e, int q) {
        Sink k = sink(e, q);
        if (k != null) {
            for (Rec r : k.recs) {
                if (r.sent) {
                    r.ambiguous = true;
                }
            }
        }
        return Actions.none();
    }

    /**
     * Settling decided the sink's ambiguous records: those in stored are stored, those in failed
     * failed for good (never sent again; a record in both is stored), the rest not stored.
     */
    Actions settled(int e, int q, List<Long> stored, List<Long> failed) {
        Sink k = sink(e, q);
        if (k == null || !ambiguous(k)) {
            throw new IllegalStateException("sink (epoch " + e + ", partition " + q + ") has no ambiguous record to settle");
        }
        Actions a = Actions.none();
        Set<Long> in = new HashSet<>(stored);
        Set<Long> out = new HashSet<>(failed);
        List<Rec> keep = new ArrayList<>();
        for (Rec r : k.recs) {
            if (r.ambiguous && in.contains(r.seq)) {
                a.acked().add(r.seq);
                continue;
            }
            if (r.ambiguous && out.contains(r.seq)) {
                a.failed().add(r.seq);
                continue;
            }
            if (r.ambiguous) {
                r.ambiguous = false;
                r.sent = false;
            }
            keep.add(r);
        }
        k.recs = keep;
        if (next != 0) {
            regather(a);
            return a;
        }
        for (Rec r : k.recs) {
            if (!r.sent) {
                r.sent = true;
                a.send().add(new Placed(r.seq, e, q));
            }
        }
        return a;
    }

    /**
     * The producer failed these records for good before transmitting them, wherever they wait
     * (told to be sent, behind an ambiguous record, held for a newer epoch): each one the machine
     * holds fails; nothing else changes. An ambiguous record is not failed this way: settling
     * decides it.
     */
    Actions drop(List<Long> seqs) {
        Actions a = Actions.none();
        for (long seq : seqs) {
            boolean gone = false;
            found:
            for (Sink k : sinks) {
                for (int i = 0; i < k.recs.size(); i++) {
                    Rec r = k.recs.get(i);
                    if (r.seq == seq) {
                        if (!r.ambiguous) {
                            k.recs.remove(i);
                            gone = true;
                        }
                        break found;
                    }
                }
            }
            gone |= held.removeIf(r -> r.seq == seq);
            if (gone) {
                a.failed().add(seq);
            }
        }
        return a;
    }

    /** The descriptor shows epoch current: old sinks' records in flight are ambiguous until settled. */
    Actions newEpoch(int current) {
        Actions a = Actions.none();
        if (current <= epoch || current <= next) {
            return a;
        }
        next = current;
        for (Sink k : sinks) {
            for (Rec r : k.recs) {
                if (r.sent) {
                    r.ambiguous = true;
                }
            }
        }
        regather(a);
        return a;
    }

    void regather(Actions a) {
        List<Rec> left = new ArrayList<>();
        for (Sink k : sinks) {
            if (ambiguous(k)) {
                return;
            }
            left.addAll(k.recs);
        }
        left.addAll(held);
        long[] seqs = new long[left.size()];
        for (int i = 0; i < seqs.length; i++) {
            seqs[i] = left.get(i).seq;
        }
        sinks = new ArrayList<>();
        held = new ArrayList<>();
        epoch = next;
        next = 0;
        for (int i : Rules.resendOrder(seqs)) {
            Rec r = left.get(i);
            r.sent = false;
            r.ambiguous = false;
            place(r, a);
        }
    }

    /** The producer is closed: every unacknowledged record fails, in send order. */
    Actions close() {
        Actions a = Actions.none();
        for (Sink k : sinks) {
            for (Rec r : k.recs) {
                a.failed().add(r.seq);
            }
        }
        for (Rec r : held) {
            a.failed().add(r.seq);
        }
        a.failed().sort(null);
        sinks = new ArrayList<>();
        held = new ArrayList<>();
        closed = true;
        return a;
    }
}
