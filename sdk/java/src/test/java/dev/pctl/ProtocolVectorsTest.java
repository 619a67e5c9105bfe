package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.IntPredicate;
import java.util.function.IntToLongFunction;
import java.util.function.ToIntFunction;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Replays the protocol trace vectors (spec/vectors/protocol/*.jsonl, spec/vectors/README.md)
 * against this SDK's decisions ({@link Rules}, which the consumer decides through, and the
 * producer's sticky-ambiguity machine {@link Sticky}): the same hand-written traces the Go core and
 * the other SDKs replay.
 */
class ProtocolVectorsTest {
    private static final String FORMAT = "pctl-protocol-trace/1";

    /** The rules a replay checks: {@link Rules} itself, or a test's wrong copy. */
    interface Impl {
        default Rules.Gate gateRecord(TopicDescriptor t, int drained, int x, int p, ToIntFunction<TopicDescriptor.Epoch> f, IntToLongFunction pos) {
            return Rules.gateRecord(t, drained, x, p, f, pos);
        }

        default int drainedThrough(TopicDescriptor t, int from, IntToLongFunction pos) {
            return Rules.drainedThrough(t, from, pos);
        }

        default List<Integer> assignable(TopicDescriptor t, IntToLongFunction pos) {
            return Rules.assignable(t, pos);
        }

        default boolean pastBoundary(TopicDescriptor t, int q, long b, IntToLongFunction pos, boolean leased) {
            return Rules.pastBoundary(t, q, b, pos, leased);
        }

        default long maxClockSkewMs(long session) {
            return Rules.maxClockSkewMs(session);
        }

        default boolean leaseLive(String owner, long end, long now, long skew) {
            return Rules.leaseLive(owner, end, now, skew);
        }

        default boolean mayAcquire(String me, String owner, long end, long now, long skew) {
            return Rules.mayAcquire(me, owner, end, now, skew);
        }

        default boolean mayDeliver(long until, long now, long session) {
            return Rules.mayDeliver(until, now, session);
        }

        default Rules.Marker fenceMarker(TopicDescriptor t, int q, long seq, int fence, IntPredicate done) {
            return Rules.fenceMarker(t, q, seq, fence, done);
        }

        default List<Integer> revokes(TopicDescriptor t, int q, long at, IntPredicate done) {
            return Rules.revokes(t, q, at, done);
        }

        default List<Integer> passed(TopicDescriptor t, int q, long start) {
            return Rules.passed(t, q, start);
        }

        default int[] resendOrder(long[] seqs) {
            return Rules.resendOrder(seqs);
        }

        default long searchFloor(long floor, List<Long> first) {
            return Rules.searchFloor(floor, first);
        }

        default long[] searchTop(boolean fenced, long boundary) {
            return Rules.searchTop(fenced, boundary);
        }

        default List<List<Integer>> batches(List<String> keys, List<Boolean> keyless, boolean perKey, int size) {
            return Rules.batches(keys, keyless, perKey, size);
        }

        default Sticky sticky(int epoch, java.util.function.BiFunction<Integer, String, Integer> f) {
            return new Sticky(epoch, f);
        }
    }

    private static List<Long> longs(Object o) {
        List<Long> out = new ArrayList<>();
        for (Object x : (List<?>) o) {
            out.add(num(x));
        }
        return out;
    }

    private static Object actions(Sticky.Actions a) {
        List<Object> send = new ArrayList<>();
        for (Sticky.Placed p : a.send()) {
            send.add(obj("seq", p.seq(), "epoch", p.epoch(), "partition", p.partition()));
        }
        return obj("send", send, "acked", a.acked(), "failed", a.failed());
    }

    @SuppressWarnings("unchecked")
    private static TopicDescriptor topic(Object o) {
        Map<String, Object> t = new HashMap<>((Map<String, Object>) o);
        List<Object> eps = new ArrayList<>();
        for (Object e : (List<Object>) t.get("epochs")) {
            Map<String, Object> m = new HashMap<>((Map<String, Object>) e);
            m.put("partitioner", Map.of()); // the rules read no partitioner
            eps.add(m);
        }
        t.put("epochs", eps);
        return TopicDescriptor.fromReply(Map.of("topic", t));
    }

    private static long num(Object o) {
        return ((Number) o).longValue();
    }

    private static Map<String, Object> obj(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    private static Object wait(Rules.Wait w) {
        return w == null ? null : obj("epoch", w.epoch(), "partition", w.partition(), "boundary", w.boundary());
    }

    /** Replays one file; returns the mismatches and adds the decisions checked to n[0]. */
    @SuppressWarnings("unchecked")
    static List<String> replay(String text, Impl r, int[] n) throws Exception {
        List<String> lines = text.lines().filter(l -> !l.isEmpty()).toList();
        Map<String, Object> hdr = (Map<String, Object>) Json.parse(lines.get(0));
        assertEquals(FORMAT, hdr.get("format"), "header of " + hdr.get("rule"));
        List<String> bad = new ArrayList<>();
        for (String line : lines.subList(1, lines.size())) {
            Map<String, Object> tr = (Map<String, Object>) Json.parse(line);
            String name = (String) tr.get("trace");
            TopicDescriptor[] t = {topic(tr.get("topic"))};
            Map<Integer, Long> pos = new HashMap<>();
            Map<Integer, Map<String, Object>> leases = new HashMap<>();
            Set<List<Integer>> revoked = new HashSet<>();
            long now = 0;
            long session = tr.get("session_ms") == null ? 0 : num(tr.get("session_ms"));
            String member = (String) tr.getOrDefault("member", "");
            IntToLongFunction at = q -> pos.getOrDefault(q, 0L);
            Sticky[] sticky = {null}; // the producer's sticky machine, started at the first of its events
            List<Object> steps = (List<Object>) tr.get("steps");
            for (int i = 0; i < steps.size(); i++) {
                Map<String, Object> st = (Map<String, Object>) steps.get(i);
                Map<String, Object> ev = (Map<String, Object>) st.get("event");
                assertEquals(1, ev.size(), name + " step " + i + ": one event kind");
                String kind = ev.keySet().iterator().next();
                Object a0 = ev.get(kind);
                Map<String, Object> a = a0 instanceof Map ? (Map<String, Object>) a0 : Map.of();
                int q = a.get("partition") == null ? -1 : (int) num(a.get("partition"));
                IntPredicate done = e -> revoked.contains(List.of(q, e));
                Object got;
                switch (kind) {
                    case "positions" -> {
                        for (Map.Entry<String, Object> en : a.entrySet()) {
                            pos.put(Integer.parseInt(en.getKey()), num(en.getValue()));
                        }
                        continue;
                    }
                    case "lease" -> {
                        leases.put(q, a);
                        continue;
                    }
                    case "now" -> {
                        now = num(a0);
                        continue;
                    }
                    case "descriptor" -> {
                        t[0] = topic(a0);
                        continue;
                    }
                    case "record" -> {
                        String key = (String) a.get("key_hex");
                        ToIntFunction<TopicDescriptor.Epoch> f = ep -> {
                            for (Object o : (List<Object>) tr.get("f")) {
                                Map<String, Object> v = (Map<String, Object>) o;
                                if (num(v.get("epoch")) == ep.number() && key.equals(v.get("key_hex"))) {
                                    return (int) num(v.get("partition"));
                                }
                            }
                            throw new AssertionError(name + ": no f for key " + key + " in epoch " + ep.number());
                        };
                        Rules.Gate g = r.gateRecord(t[0], r.drainedThrough(t[0], 0, at), (int) num(a.get("epoch")), q, f, at);
                        List<Object> ws = new ArrayList<>();
                        for (Rules.Wait w : g.waits()) {
                            ws.add(wait(w));
                        }
                        got = obj("refresh", g.refresh(), "waits", ws, "parent", g.parent(), "assigned", wait(g.assigned()));
                    }
                    case "drained_through" -> got = obj("drained_through", r.drainedThrough(t[0], 0, at));
                    case "assignable" -> got = obj("assignable", r.assignable(t[0], at));
                    case "past_boundary" -> {
                        Map<String, Object> l = leases.get(q);
                        boolean live = l != null && r.leaseLive((String) l.get("owner"), num(l.get("lease_end")), now, r.maxClockSkewMs(session));
                        got = obj("past", r.pastBoundary(t[0], q, num(a.get("boundary")), at, live));
                    }
                    case "max_skew" -> got = obj("max_skew_ms", r.maxClockSkewMs(session));
                    case "acquire" -> got = obj("take", r.mayAcquire(member, (String) a.get("owner"), num(a.get("lease_end")), now, r.maxClockSkewMs(session)));
                    case "deliver" -> got = obj("deliver", r.mayDeliver(num(a.get("lease_until")), now, session));
                    case "marker" -> {
                        Rules.Marker m = r.fenceMarker(t[0], q, num(a.get("seq")), (int) num(a.get("fence")), done);
                        m.revoke().forEach(e -> revoked.add(List.of(q, e)));
                        got = obj("refresh", m.refresh(), "revoke", m.revoke(), "position", m.position(), "commit", m.commit());
                    }
                    case "at" -> {
                        List<Integer> rv = r.revokes(t[0], q, num(a.get("position")), done);
                        rv.forEach(e -> revoked.add(List.of(q, e)));
                        got = obj("revoke", rv, "commit", !rv.isEmpty());
                    }
                    case "acquired" -> {
                        List<Integer> p = r.passed(t[0], q, num(a.get("position")));
                        p.forEach(e -> revoked.add(List.of(q, e)));
                        got = obj("passed", p);
                    }
                    case "fence_resend" -> {
                        List<Object> recs = (List<Object>) a.get("records");
                        long[] seqs = new long[recs.size()];
                        for (int j = 0; j < seqs.length; j++) {
                            seqs[j] = num(((Map<String, Object>) recs.get(j)).get("seq"));
                        }
                        TopicDescriptor.Epoch cur = t[0].current();
                        List<Object> order = new ArrayList<>();
                        java.util.TreeMap<Integer, List<Object>> per = new java.util.TreeMap<>();
                        for (int j : r.resendOrder(seqs)) {
                            Map<String, Object> x = (Map<String, Object>) recs.get(j);
                            order.add(x.get("seq"));
                            if (Boolean.TRUE.equals(x.get("keyless"))) {
                                continue;
                            }
                            int pq = -1;
                            for (Object o : (List<Object>) tr.get("f")) {
                                Map<String, Object> v = (Map<String, Object>) o;
                                if (num(v.get("epoch")) == cur.number() && x.get("key_hex").equals(v.get("key_hex"))) {
                                    pq = (int) num(v.get("partition"));
                                }
                            }
                            assertTrue(pq >= 0, name + ": no f for key " + x.get("key_hex"));
                            per.computeIfAbsent(pq, k -> new ArrayList<>()).add(x.get("seq"));
                        }
                        List<Object> parts = new ArrayList<>();
                        per.forEach((pq, ss) -> parts.add(obj("partition", pq, "seqs", ss)));
                        got = obj("order", order, "partitions", parts);
                    }
                    case "search" -> {
                        List<Long> first = new ArrayList<>();
                        for (Object o : (List<Object>) a.get("first_sent")) {
                            first.add(num(o));
                        }
                        long[] top = r.searchTop(Boolean.TRUE.equals(a.get("fenced")), num(a.get("boundary")));
                        got = obj("low", r.searchFloor(num(a.get("sink_floor")), first), "top", top[0], "read_last", top[1] == 1);
                    }
                    case "batches" -> {
                        List<String> keys = new ArrayList<>();
                        List<Boolean> keyless = new ArrayList<>();
                        for (Object o : (List<Object>) a.get("records")) {
                            Map<String, Object> x = (Map<String, Object>) o;
                            keys.add((String) x.get("key_hex"));
                            keyless.add(Boolean.TRUE.equals(x.get("keyless")));
                        }
                        got = obj("batches", r.batches(keys, keyless, Boolean.TRUE.equals(a.get("per_key")), (int) num(a.get("size"))));
                    }
                    case "produce", "acked", "anomaly", "settled", "drop", "new_epoch", "close" -> {
                        if (sticky[0] == null) {
                            sticky[0] = r.sticky(t[0].current().number(), (ep, key) -> {
                                for (Object o : (List<Object>) tr.get("f")) {
                                    Map<String, Object> v = (Map<String, Object>) o;
                                    if (num(v.get("epoch")) == ep && key.equals(v.get("key_hex"))) {
                                        return (int) num(v.get("partition"));
                                    }
                                }
                                throw new AssertionError(name + ": no f for key " + key + " in epoch " + ep);
                            });
                        }
                        Sticky m = sticky[0];
                        try {
                            got = actions(switch (kind) {
                                case "produce" -> {
                                    assertFalse(Boolean.TRUE.equals(a.get("keyless")), "the sticky traces have keyed records only");
                                    yield m.produce(num(a.get("seq")), (String) a.get("key_hex"));
                                }
                                case "acked" -> m.acked(longs(a.get("seqs")));
                                case "anomaly" -> m.anomaly((int) num(a.get("epoch")), q);
                                case "settled" -> m.settled((int) num(a.get("epoch")), q, longs(a.get("stored")),
                                        a.get("failed") == null ? List.of() : longs(a.get("failed")));
                                case "drop" -> m.drop(longs(a.get("seqs")));
                                case "new_epoch" -> m.newEpoch((int) num(a.get("epoch")));
                                default -> m.close();
                            });
                        } catch (IllegalStateException e) { // a core that refuses a valid event decides wrongly
                            got = obj("error", e.getMessage());
                        }
                    }
                    default -> throw new AssertionError(name + " step " + i + ": unknown event kind " + kind);
                }
                n[0]++;
                // Compare as JSON values: written and parsed again, so numbers are alike.
                Object g = Json.parse(Json.write(got));
                if (!g.equals(st.get("expect"))) {
                    bad.add(hdr.get("rule") + " / " + name + " step " + i + " " + Json.write(ev) + ": got " + Json.write(got) + ", want " + Json.write(st.get("expect")));
                }
            }
        }
        return bad;
    }

    /**
     * Every file of the vector directory, by rule (spec/vectors/README.md). A file this replay does
     * not know fails (a new rule is replayed here, its events included, or the test says so), as
     * does a known one missing.
     */
    static final List<String> KNOWN = List.of(
            "ambiguous-search-floor", "epoch-gating", "fence-markers", "fence-resend-order", "keys-assigned-past-boundary",
            "lease-expiry", "per-key-batches", "shrink-retirement", "sticky-ambiguity", "sticky-permanent-failures");

    @Test
    @SuppressWarnings("unchecked")
    void everyVectorFileIsARuleThisReplayKnows() throws Exception {
        Path dir = Repo.path("spec/vectors/protocol");
        List<String> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.map(p -> p.getFileName().toString()).sorted().toList();
        }
        assertEquals(KNOWN.stream().map(r -> r + ".jsonl").sorted().toList(), files,
                "the files of " + dir + " (a file not in KNOWN: replay it here first)");
        for (String f : files) {
            String text = Files.readString(dir.resolve(f), StandardCharsets.UTF_8);
            Map<String, Object> hdr = (Map<String, Object>) Json.parse(text.lines().findFirst().orElse(""));
            assertEquals(f.substring(0, f.length() - ".jsonl".length()), hdr.get("rule"), f + ": the header's rule");
            int[] n = {0};
            replay(text, new Impl() {}, n);
            assertTrue(n[0] > 0, f + ": no decision checked");
        }
    }

    static List<String> replayAll(Impl r, int[] n) throws Exception {
        Path dir = Repo.path("spec/vectors/protocol");
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.filter(p -> p.toString().endsWith(".jsonl")).sorted().toList();
        }
        assertTrue(files.size() >= 9, "vector files in " + dir);
        List<String> bad = new ArrayList<>();
        for (Path f : files) {
            bad.addAll(replay(Files.readString(f, StandardCharsets.UTF_8), r, n));
        }
        return bad;
    }

    @Test
    void rulesMatchEveryProtocolVector() throws Exception {
        int[] n = {0};
        List<String> bad = replayAll(new Impl() {}, n);
        assertEquals(List.of(), bad);
        assertTrue(n[0] >= 50, "only " + n[0] + " decisions checked");
    }

    @Test
    void replayFailsOnWrongRules() throws Exception {
        Map<String, Impl> mutants = new LinkedHashMap<>();
        mutants.put("gate checks only epoch x-1", new Impl() {
            @Override
            public Rules.Gate gateRecord(TopicDescriptor t, int d, int x, int p, ToIntFunction<TopicDescriptor.Epoch> f, IntToLongFunction pos) {
                return Rules.gateRecord(t, x - 2, x, p, f, pos);
            }
        });
        mutants.put("lease expiry without the skew bound", new Impl() {
            @Override
            public boolean mayAcquire(String me, String owner, long end, long now, long skew) {
                return Rules.mayAcquire(me, owner, end, now, 0);
            }
        });
        mutants.put("keys assigned at the boundary", new Impl() {
            @Override
            public boolean pastBoundary(TopicDescriptor t, int q, long b, IntToLongFunction pos, boolean leased) {
                return pos.applyAsLong(q) >= b;
            }
        });
        mutants.put("a marker passed without keys revoked", new Impl() {
            @Override
            public Rules.Marker fenceMarker(TopicDescriptor t, int q, long seq, int fence, IntPredicate done) {
                Rules.Marker m = Rules.fenceMarker(t, q, seq, fence, done);
                return new Rules.Marker(m.refresh(), List.of(), m.position(), m.commit());
            }
        });
        mutants.put("retired partitions never leave", new Impl() {
            @Override
            public List<Integer> assignable(TopicDescriptor t, IntToLongFunction pos) {
                List<Integer> all = new ArrayList<>();
                for (int q = 0; q < t.maxPartitions(); q++) {
                    all.add(q);
                }
                return all;
            }
        });
        mutants.put("re-sent sink by sink", new Impl() {
            @Override
            public int[] resendOrder(long[] seqs) {
                int[] out = new int[seqs.length];
                for (int i = 0; i < out.length; i++) {
                    out[i] = i;
                }
                return out;
            }
        });
        mutants.put("search down to the sink floor only", new Impl() {
            @Override
            public long searchFloor(long floor, List<Long> first) {
                return floor;
            }
        });
        mutants.put("batches without the per-key rule", new Impl() {
            @Override
            public List<List<Integer>> batches(List<String> keys, List<Boolean> keyless, boolean perKey, int size) {
                return Rules.batches(keys, keyless, false, size);
            }
        });
        for (Map.Entry<String, Impl> m : mutants.entrySet()) {
            assertFalse(replayAll(m.getValue(), new int[1]).isEmpty(), "the vectors did not catch: " + m.getKey());
        }
    }

    /** A sticky machine with one wrong decision: its sub-class, made for each trace. */
    interface Wrong {
        Sticky make(int epoch, java.util.function.BiFunction<Integer, String, Integer> f);
    }

    @Test
    void replayFailsOnWrongStickyMachines() throws Exception {
        Map<String, Wrong> mutants = new LinkedHashMap<>();
        mutants.put("an anomaly ignored: the ambiguous sink goes on sending", (e, f) -> new Sticky(e, f) {
            @Override
            boolean ambiguous(Sink k) {
                return false;
            }

            @Override
            Actions settled(int ep, int q, List<Long> stored, List<Long> failed) {
                return Actions.none();
            }
        });
        mutants.put("records moved before their sink settled", (e, f) -> new Sticky(e, f) {
            @Override
            void regather(Actions a) {
                for (Sink k : sinks) {
                    for (Rec x : k.recs) {
                        x.ambiguous = false;
                    }
                }
                super.regather(a);
            }
        });
        mutants.put("a record settled as stored is re-sent", (e, f) -> new Sticky(e, f) {
            @Override
            Actions settled(int ep, int q, List<Long> stored, List<Long> failed) {
                return super.settled(ep, q, List.of(), failed);
            }
        });
        mutants.put("one ambiguous sink holds back every partition", (e, f) -> new Sticky(e, f) {
            @Override
            void place(Rec x, Actions a) {
                int n = a.send().size();
                super.place(x, a);
                if (sinks.stream().anyMatch(this::ambiguous)) {
                    a.send().subList(n, a.send().size()).clear();
                }
            }
        });
        mutants.put("close drops unsettled records silently", (e, f) -> new Sticky(e, f) {
            @Override
            Actions close() {
                super.close();
                return Actions.none();
            }
        });
        assertCaught(mutants, "sticky-ambiguity");
    }

    /** Every wrong machine fails the replay of rule's file. */
    private static void assertCaught(Map<String, Wrong> mutants, String rule) throws Exception {
        for (Map.Entry<String, Wrong> m : mutants.entrySet()) {
            List<String> bad = replayAll(new Impl() {
                @Override
                public Sticky sticky(int epoch, java.util.function.BiFunction<Integer, String, Integer> f) {
                    return m.getValue().make(epoch, f);
                }
            }, new int[1]);
            assertTrue(bad.stream().anyMatch(b -> b.startsWith(rule + " / ")), rule + " did not catch: " + m.getKey());
        }
    }

    @Test
    void replayFailsOnStickyMachinesWrongAboutPermanentFailures() throws Exception {
        Map<String, Wrong> mutants = new LinkedHashMap<>();
        mutants.put("a record failed in settling is re-sent", (e, f) -> new Sticky(e, f) {
            @Override
            Actions settled(int ep, int q, List<Long> stored, List<Long> failed) {
                return super.settled(ep, q, stored, List.of());
            }
        });
        mutants.put("a failure in settling holds back the records after it", (e, f) -> new Sticky(e, f) {
            @Override
            Actions settled(int ep, int q, List<Long> stored, List<Long> failed) {
                Actions a = super.settled(ep, q, stored, failed);
                if (!a.failed().isEmpty()) {
                    a.send().clear();
                }
                return a;
            }
        });
        mutants.put("a permanent failure wins over stored", (e, f) -> new Sticky(e, f) {
            @Override
            Actions settled(int ep, int q, List<Long> stored, List<Long> failed) {
                return super.settled(ep, q, stored.stream().filter(x -> !failed.contains(x)).toList(), failed);
            }
        });
        mutants.put("a drop ignored", (e, f) -> new Sticky(e, f) {
            @Override
            Actions drop(List<Long> seqs) {
                return Actions.none();
            }
        });
        mutants.put("an ambiguous record dropped", (e, f) -> new Sticky(e, f) {
            @Override
            Actions drop(List<Long> seqs) {
                for (Sink k : sinks) {
                    for (Rec x : k.recs) {
                        if (seqs.contains(x.seq)) {
                            x.ambiguous = false;
                        }
                    }
                }
                return super.drop(seqs);
            }
        });
        mutants.put("a drop reports records already acknowledged or failed", (e, f) -> new Sticky(e, f) {
            @Override
            Actions drop(List<Long> seqs) {
                super.drop(seqs);
                Actions a = Actions.none();
                a.failed().addAll(seqs);
                return a;
            }
        });
        assertCaught(mutants, "sticky-permanent-failures");
    }
}
