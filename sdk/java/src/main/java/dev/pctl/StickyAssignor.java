package dev.pctl;

import dev.pctl.internal.Json;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.IntFunction;

/**
 * The sticky assignor of spec/protocol.md §6.2.1 (and the moved fractions of §6.2.2) as pure
 * functions, beside {@link Rules}: the partitioners are a function argument, {@code
 * place.apply(epoch)} giving the partitions of {@link #SAMPLE} under that epoch of the topic.
 * Records are the JSON objects of {@code g.assignment} as maps, with Go's field names
 * (client/assign.go), so Go and SDK members share one group. StickyVectorsTest replays
 * spec/vectors/assign/sticky.json against it; {@link Consumer} assigns through it.
 */
final class StickyAssignor {
    private StickyAssignor() {}

    /** §6.2.1 step 1: the keys whose bytes are the ASCII decimal digits of 0..4095. */
    static final List<byte[]> SAMPLE;

    static {
        List<byte[]> s = new ArrayList<>(4096);
        for (int i = 0; i < 4096; i++) {
            s.add(Integer.toString(i).getBytes(StandardCharsets.US_ASCII));
        }
        SAMPLE = List.copyOf(s);
    }

    /** How many records' summaries a record's history keeps (§6.2.1). */
    static final int HISTORY = 16;

    /** The largest record (bytes of JSON) pctl's clients write: under the bucket's 64 KiB (§8.5). */
    static final int MAX_RECORD = 60 << 10;

    @SuppressWarnings("unchecked")
    static List<String> members(Map<String, Object> a) {
        Object v = a.get("members");
        return v instanceof List ? (List<String>) v : List.of();
    }

    static List<Integer> ints(Object v) {
        List<Integer> out = new ArrayList<>();
        if (v instanceof List) {
            for (Object o : (List<?>) v) {
                out.add(o instanceof Number ? ((Number) o).intValue() : -1);
            }
        }
        return out;
    }

    static int intOf(Object v) {
        return v instanceof Number ? ((Number) v).intValue() : -1;
    }

    /** §6.2's modulo assignor as a record: the i-th partition to member i mod m. */
    static Map<String, Object> modulo(List<String> members, List<Integer> partitions, int epoch) {
        Map<String, Object> a = new LinkedHashMap<>();
        a.put("assignor", "modulo");
        a.put("epoch", epoch);
        a.put("members", members);
        a.put("partitions", partitions);
        List<Integer> owners = new ArrayList<>();
        for (int j = 0; j < partitions.size(); j++) {
            owners.add(j % members.size());
        }
        a.put("owners", owners);
        return a;
    }

    /** Partition -> member, for the owners a record gives validly. */
    static Map<Integer, String> ownerMap(Map<String, Object> a) {
        List<String> ms = members(a);
        List<Integer> ps = ints(a.get("partitions"));
        List<Integer> os = ints(a.get("owners"));
        Map<Integer, String> out = new HashMap<>();
        for (int j = 0; j < ps.size(); j++) {
            if (j < os.size() && os.get(j) >= 0 && os.get(j) < ms.size()) {
                out.put(ps.get(j), ms.get(os.get(j)));
            }
        }
        return out;
    }

    /** §6.2.2: the fraction of the sample whose owner differs between two records (keys either leaves out do not count). */
    static double movedKeys(Map<String, Object> from, Map<String, Object> to, IntFunction<int[]> place) {
        int[] pf = place.apply(intOf(from.get("epoch")));
        int[] pt = place.apply(intOf(to.get("epoch")));
        Map<Integer, String> of = ownerMap(from);
        Map<Integer, String> ot = ownerMap(to);
        int moved = 0;
        int total = 0;
        for (int k = 0; k < SAMPLE.size(); k++) {
            String a = of.get(pf[k]);
            String b = ot.get(pt[k]);
            if (a == null || b == null) {
                continue;
            }
            total++;
            if (!a.equals(b)) {
                moved++;
            }
        }
        return total == 0 ? 0.0 : (double) moved / total;
    }

    private record Cand(int j, int x, long num, long den) {}

    /**
     * §6.2.1: the sticky assignor's next record from the previous one (null for the first), the
     * sorted live members, the sorted assignable partitions and the current epoch; {@code at} is
     * the RFC 3339 time it records (null: none). Throws BadRequestException for no member or
     * unsorted input.
     */
    static Map<String, Object> next(Map<String, Object> prev, List<String> members, List<Integer> partitions, int epoch,
            IntFunction<int[]> place, String at) {
        int m = members.size();
        int n = partitions.size();
        if (m == 0) {
            throw new BadRequestException("an assignment needs at least one member");
        }
        for (int i = 1; i < m; i++) {
            if (members.get(i - 1).compareTo(members.get(i)) >= 0) {
                throw new BadRequestException("members must be sorted, without duplicates");
            }
        }
        for (int i = 1; i < n; i++) {
            if (partitions.get(i - 1) >= partitions.get(i)) {
                throw new BadRequestException("partitions must be sorted, without duplicates");
            }
        }
        Map<String, Integer> index = new HashMap<>();
        for (int i = 0; i < m; i++) {
            index.put(members.get(i), i);
        }
        Map<Integer, Integer> slot = new HashMap<>();
        for (int j = 0; j < n; j++) {
            slot.put(partitions.get(j), j);
        }
        long round = 1;
        List<Cand> cands = new ArrayList<>();
        if (prev != null) {
            round = ((Number) prev.get("round")).longValue() + 1;
            Map<Integer, Integer> prevOwner = new HashMap<>();
            for (Map.Entry<Integer, String> e : ownerMap(prev).entrySet()) {
                Integer x = index.get(e.getValue());
                if (x != null) {
                    prevOwner.put(e.getKey(), x);
                }
            }
            int prevEpoch = intOf(prev.get("epoch"));
            boolean[] direct = new boolean[n];
            if (prevEpoch == epoch) {
                java.util.Arrays.fill(direct, true);
            } else {
                int[] oldP = place.apply(prevEpoch);
                int[] newP = place.apply(epoch);
                long[] den = new long[n];
                Map<Long, Long> num = new HashMap<>();
                for (int k = 0; k < SAMPLE.size(); k++) {
                    Integer j = slot.get(newP[k]);
                    if (j == null) {
                        continue;
                    }
                    den[j]++;
                    Integer x = prevOwner.get(oldP[k]);
                    if (x != null) {
                        num.merge((long) j * m + x, 1L, Long::sum);
                    }
                }
                for (Map.Entry<Long, Long> e : num.entrySet()) {
                    int j = (int) (e.getKey() / m);
                    cands.add(new Cand(j, (int) (e.getKey() % m), e.getValue(), den[j]));
                }
                for (int j = 0; j < n; j++) {
                    direct[j] = den[j] == 0;
                }
            }
            for (int j = 0; j < n; j++) {
                Integer x = prevOwner.get(partitions.get(j));
                if (direct[j] && x != null) {
                    cands.add(new Cand(j, x, 1, 1));
                }
            }
        }
        // Weights compared exactly, as fractions: a/b > c/d iff a*d > c*b; then q, then x ascending.
        cands.sort((a, b) -> {
            int c = Long.compare(b.num * a.den, a.num * b.den);
            if (c != 0) {
                return c;
            }
            return a.j != b.j ? Integer.compare(a.j, b.j) : Integer.compare(a.x, b.x);
        });
        int base = n / m;
        int extra = n % m;
        int[] count = new int[m];
        int[] big = {0};
        int[] owners = new int[n];
        boolean[] done = new boolean[n];
        for (Cand c : cands) {
            if (!done[c.j] && mayTake(count, c.x, base, extra, big[0])) {
                give(owners, done, count, big, c.j, c.x, base);
            }
        }
        for (int j = 0; j < n; j++) {
            if (done[j]) {
                continue;
            }
            int best = -1;
            for (int x = 0; x < m; x++) {
                if (mayTake(count, x, base, extra, big[0]) && (best < 0 || count[x] < count[best])) {
                    best = x;
                }
            }
            give(owners, done, count, big, j, best, base);
        }
        Map<String, Object> next = new LinkedHashMap<>();
        next.put("assignor", "sticky");
        next.put("round", round);
        next.put("epoch", epoch);
        next.put("members", List.copyOf(members));
        next.put("partitions", List.copyOf(partitions));
        List<Integer> os = new ArrayList<>(n);
        for (int o : owners) {
            os.add(o);
        }
        next.put("owners", os);
        Map<String, Object> summary = new LinkedHashMap<>();
        summary.put("round", round);
        summary.put("epoch", epoch);
        summary.put("members", m);
        summary.put("partitions", n);
        if (prev != null) {
            double moved = movedKeys(prev, next, place);
            double movedModulo = movedKeys(modulo(members(prev), ints(prev.get("partitions")), intOf(prev.get("epoch"))),
                    modulo(members, partitions, epoch), place);
            next.put("moved", moved);
            next.put("moved_modulo", movedModulo);
            summary.put("moved", moved);
            summary.put("moved_modulo", movedModulo);
        }
        if (at != null) {
            next.put("at", at);
            summary.put("at", at);
        }
        List<Object> history = new ArrayList<>();
        if (prev != null && prev.get("history") instanceof List) {
            history.addAll((List<?>) prev.get("history"));
        }
        history.add(summary);
        next.put("history", new ArrayList<>(history.subList(Math.max(0, history.size() - HISTORY), history.size())));
        return next;
    }

    private static boolean mayTake(int[] count, int x, int base, int extra, int big) {
        return count[x] < base || (count[x] == base && big < extra);
    }

    private static void give(int[] owners, boolean[] done, int[] count, int[] big, int j, int x, int base) {
        owners[j] = x;
        done[j] = true;
        count[x]++;
        if (count[x] == base + 1) {
            big[0]++;
        }
    }

    /** A record's JSON, or BadRequestException when it exceeds {@link #MAX_RECORD} (§6.2.1: the group cannot use sticky on this topic). */
    static byte[] encode(Map<String, Object> rec, String group) {
        byte[] body = Json.write(rec).getBytes(StandardCharsets.UTF_8);
        if (body.length > MAX_RECORD) {
            throw new BadRequestException("group " + group + ": the sticky assignment of " + ints(rec.get("partitions")).size()
                    + " partitions over " + members(rec).size() + " members takes " + body.length
                    + " bytes, more than the group bucket holds (" + MAX_RECORD + "): use the modulo assignor for this topic");
        }
        return body;
    }

    /** §6.2.1, who writes: the record is missing or has other members, partitions or epoch. */
    static boolean needs(Map<String, Object> rec, List<String> members, List<Integer> partitions, int epoch) {
        return rec == null || intOf(rec.get("epoch")) != epoch || !members(rec).equals(members) || !ints(rec.get("partitions")).equals(partitions);
    }

    /**
     * §6.2.1: this member writes the next record: it is the leader (first of the sorted live
     * members), its view is whole, the record no longer matches, and a member the record has and
     * the view lacks was missed by the previous rebalance's view too.
     */
    static boolean writes(Map<String, Object> record, List<String> members, List<Integer> partitions, int epoch, String me,
            boolean complete, List<String> previousView) {
        if (!complete || members.isEmpty() || !members.get(0).equals(me) || !needs(record, members, partitions, epoch)) {
            return false;
        }
        if (record == null) {
            return true;
        }
        if (record.get("epoch") != null && intOf(record.get("epoch")) > epoch) {
            return false; // a record newer than this view (one view per rebalance)
        }
        Set<String> live = new HashSet<>(members);
        boolean drops = false;
        for (String x : members(record)) {
            drops |= !live.contains(x);
        }
        return !drops || (previousView != null && previousView.equals(members));
    }

    /** The partitions a record gives member me among the assignable ones, sorted (none without a record). */
    static List<Integer> wants(Map<String, Object> rec, String me, List<Integer> assignable) {
        List<Integer> out = new ArrayList<>();
        if (rec == null) {
            return out;
        }
        Set<Integer> ok = new HashSet<>(assignable);
        for (Map.Entry<Integer, String> e : ownerMap(rec).entrySet()) {
            if (e.getValue().equals(me) && ok.contains(e.getKey())) {
                out.add(e.getKey());
            }
        }
        out.sort(null);
        return out;
    }
}
