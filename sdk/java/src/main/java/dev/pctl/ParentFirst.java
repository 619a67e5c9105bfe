package dev.pctl;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.IntToLongFunction;

/**
 * Parent-first scheduling (spec/protocol.md §6.7): a record of epoch x waits at its gate only until
 * its key's partitions of the older, undrained epochs are drained, so a member takes and starts its
 * partitions oldest work first: those whose next record is of the oldest epoch, together, then the
 * next epoch's. As the Go client's {@code client/parentfirst.go} and the Node.js SDK's {@code
 * rules.parentFirst}. A hint for the order only: the gate decides what is delivered.
 */
final class ParentFirst {
    private ParentFirst() {}

    /**
     * The epoch of the record after position {@code pos} in partition {@code q}: the oldest epoch in
     * which q exists and whose boundary in q is above pos (the current epoch once q is past every
     * ended epoch's boundary).
     */
    static int readEpoch(TopicDescriptor t, int q, long pos) {
        for (TopicDescriptor.Epoch ep : t.epochs()) {
            if (q >= ep.partitions()) {
                continue;
            }
            if (!ep.ended() || q >= ep.boundaryCount() || pos < ep.boundary(q)) {
                return ep.number();
            }
        }
        return t.current().number();
    }

    /** The partitions {@code qs} grouped by the epoch each reads next, oldest first, each group ascending. */
    static List<List<Integer>> groups(TopicDescriptor t, Iterable<Integer> qs, IntToLongFunction pos) {
        Map<Integer, List<Integer>> by = new TreeMap<>();
        for (int q : qs) {
            by.computeIfAbsent(readEpoch(t, q, pos.applyAsLong(q)), e -> new ArrayList<>()).add(q);
        }
        List<List<Integer>> out = new ArrayList<>();
        for (List<Integer> g : by.values()) {
            g.sort(null);
            out.add(g);
        }
        return out;
    }
}
