package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Test;

/**
 * Replays the sticky assignor's golden vectors (spec/vectors/assign/sticky.json, written by hand
 * from spec/protocol.md §6.2.1) against {@link StickyAssignor}, which the consumer assigns
 * through: the same file Go's client and the other SDKs replay.
 */
class StickyVectorsTest {
    /** The assignor a replay checks: StickyAssignor itself, or a test's wrong copy. */
    interface Impl {
        default Map<String, Object> next(Map<String, Object> prev, List<String> members, List<Integer> partitions, int epoch,
                IntFunction<int[]> place, String at) {
            return StickyAssignor.next(prev, members, partitions, epoch, place, at);
        }

        default boolean writes(Map<String, Object> record, List<String> members, List<Integer> partitions, int epoch, String me,
                boolean complete, List<String> previousView) {
            return StickyAssignor.writes(record, members, partitions, epoch, me, complete, previousView);
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> vectors() throws Exception {
        return (Map<String, Object>) Json.parse(Files.readString(Repo.path("spec/vectors/assign/sticky.json"), StandardCharsets.UTF_8));
    }

    static int linear(int h, int n) {
        int b = 1;
        while (b * 2 <= n) {
            b *= 2;
        }
        int p = h % (2 * b);
        return p >= n ? p - b : p;
    }

    /** The vectors' functions (their "functions" field): h is the integer a sample key spells. */
    static IntFunction<int[]> placer(Map<?, ?> epochs) {
        Map<Integer, int[]> memo = new HashMap<>();
        return e -> memo.computeIfAbsent(e, k -> {
            Map<?, ?> ep = (Map<?, ?>) epochs.get(Integer.toString(k));
            String f = (String) ep.get("f");
            int n = ((Number) ep.get("n")).intValue();
            int[] out = new int[4096];
            if (f.startsWith("int-")) {
                for (int h = 0; h < 4096; h++) {
                    out[h] = switch (f) {
                        case "int-mod" -> h % n;
                        case "int-linear" -> linear(h, n);
                        case "int-range" -> (int) ((long) h * n / 4096);
                        default -> throw new IllegalArgumentException(f);
                    };
                }
                return out;
            }
            try (Partitioner p = Partitioner.builtin(f)) {
                return p.partitionAll(StickyAssignor.SAMPLE, n);
            }
        });
    }

    @SuppressWarnings("unchecked")
    static List<String> strs(Object o) {
        return o == null ? null : (List<String>) o;
    }

    static List<Integer> parts(Object o) {
        if (o instanceof String s) {
            String[] ab = s.split("\\.\\.");
            List<Integer> out = new ArrayList<>();
            for (int q = Integer.parseInt(ab[0]); q <= Integer.parseInt(ab[1]); q++) {
                out.add(q);
            }
            return out;
        }
        return StickyAssignor.ints(o);
    }

    static Object frac(Object f) {
        if (f == null) {
            return null;
        }
        List<?> l = (List<?>) f;
        return ((Number) l.get(0)).doubleValue() / ((Number) l.get(1)).doubleValue();
    }

    @SuppressWarnings("unchecked")
    static List<String> replay(Impl impl) throws Exception {
        Map<String, Object> v = vectors();
        List<String> bad = new ArrayList<>();
        for (Object o : (List<?>) v.get("cases")) {
            Map<String, Object> c = (Map<String, Object>) o;
            String name = (String) c.get("name");
            Map<String, Object> got = null;
            PctlException err = null;
            try {
                got = impl.next((Map<String, Object>) c.get("prev"), strs(c.get("members")), parts(c.get("partitions")),
                        ((Number) c.get("epoch")).intValue(), placer((Map<?, ?>) c.get("epochs")), "2026-12-01T12:00:00Z");
                StickyAssignor.encode(got, "g");
            } catch (PctlException e) {
                err = e;
            }
            if (c.containsKey("want_error")) {
                if (err == null || !err.code().wire().equals(c.get("want_error"))) {
                    bad.add(name + ": want error " + c.get("want_error") + ", got " + err);
                }
                continue;
            }
            if (err != null) {
                bad.add(name + ": " + err.getMessage());
                continue;
            }
            Map<String, Object> w = (Map<String, Object>) c.get("want");
            List<Long> rounds = new ArrayList<>();
            for (Object h : (List<?>) got.get("history")) {
                rounds.add(((Number) ((Map<?, ?>) h).get("round")).longValue());
            }
            Map<String, Object> have = new LinkedHashMap<>();
            have.put("round", ((Number) got.get("round")).longValue());
            have.put("owners", StickyAssignor.ints(got.get("owners")));
            have.put("moved", got.get("moved"));
            have.put("moved_modulo", got.get("moved_modulo"));
            have.put("history_rounds", rounds);
            Map<String, Object> want = new LinkedHashMap<>();
            want.put("round", ((Number) w.get("round")).longValue());
            want.put("owners", StickyAssignor.ints(w.get("owners")));
            want.put("moved", frac(w.get("moved")));
            want.put("moved_modulo", frac(w.get("moved_modulo")));
            List<Long> wr = new ArrayList<>();
            for (Object r : (List<?>) w.get("history_rounds")) {
                wr.add(((Number) r).longValue());
            }
            want.put("history_rounds", wr);
            if (!have.equals(want)) {
                bad.add(name + ": got " + have + ", want " + want);
            }
        }
        for (Object o : (List<?>) v.get("writes")) {
            Map<String, Object> c = (Map<String, Object>) o;
            boolean got = impl.writes((Map<String, Object>) c.get("record"), strs(c.get("members")), StickyAssignor.ints(c.get("partitions")),
                    ((Number) c.get("epoch")).intValue(), (String) c.get("me"), (Boolean) c.get("complete"), strs(c.get("previous_view")));
            if (got != (Boolean) c.get("want")) {
                bad.add("writes " + c.get("name") + ": got " + got);
            }
        }
        for (Object o : (List<?>) v.get("wants")) {
            Map<String, Object> c = (Map<String, Object>) o;
            List<Integer> got = StickyAssignor.wants((Map<String, Object>) c.get("record"), (String) c.get("me"), StickyAssignor.ints(c.get("assignable")));
            if (!got.equals(StickyAssignor.ints(c.get("want")))) {
                bad.add("wants " + c.get("name") + ": got " + got);
            }
        }
        return bad;
    }

    @Test
    void assignorMatchesEveryVector() throws Exception {
        assertEquals(List.of(), replay(new Impl() {}));
    }

    @Test
    @SuppressWarnings("unchecked")
    void recordHasGoFieldNames() throws Exception {
        IntFunction<int[]> place = placer(Map.of("1", Map.of("f", "int-mod", "n", 4)));
        Map<String, Object> first = StickyAssignor.next(null, List.of("a", "b"), List.of(0, 1, 2, 3), 1, place, "2026-12-01T12:00:00Z");
        Map<String, Object> back = (Map<String, Object>) Json.parse(new String(StickyAssignor.encode(first, "g"), StandardCharsets.UTF_8));
        assertEquals(List.of("assignor", "round", "epoch", "members", "partitions", "owners", "at", "history"), new ArrayList<>(back.keySet()));
        Map<String, Object> second = StickyAssignor.next(back, List.of("a", "b", "c"), List.of(0, 1, 2, 3), 1, place, "2026-12-01T12:00:01Z");
        assertEquals("{\"round\":2,\"epoch\":1,\"members\":3,\"partitions\":4,\"moved\":0.25,\"moved_modulo\":0.5,\"at\":\"2026-12-01T12:00:01Z\"}",
                Json.write(((List<?>) second.get("history")).get(1)));
    }

    @Test
    void replayFailsOnAWrongAssignor() throws Exception {
        // Step 4's member tie-break flipped: the members renamed so that they sort in reverse; only
        // the owners are the mutant's.
        Impl flipped = new Impl() {
            @Override
            public Map<String, Object> next(Map<String, Object> prev, List<String> members, List<Integer> partitions, int epoch,
                    IntFunction<int[]> place, String at) {
                int m = members.size();
                Map<String, String> alias = new HashMap<>();
                for (int i = 0; i < m; i++) {
                    alias.put(members.get(i), String.format("~%04d", m - 1 - i));
                }
                Map<String, Object> p = null;
                if (prev != null) {
                    p = new LinkedHashMap<>(prev);
                    List<String> pm = new ArrayList<>();
                    for (String x : StickyAssignor.members(prev)) {
                        pm.add(alias.getOrDefault(x, "~~" + x));
                    }
                    p.put("members", pm);
                }
                List<String> renamed = new ArrayList<>(alias.values());
                renamed.sort(null);
                Map<String, Object> got = StickyAssignor.next(p, renamed, partitions, epoch, place, at);
                Map<String, Object> real = StickyAssignor.next(prev, members, partitions, epoch, place, at);
                List<Integer> owners = new ArrayList<>();
                for (int o : StickyAssignor.ints(got.get("owners"))) {
                    owners.add(m - 1 - o);
                }
                real.put("owners", owners);
                return real;
            }
        };
        List<String> bad = replay(flipped);
        assertTrue(bad.stream().anyMatch(b -> b.startsWith("swap-mod-to-range-ties:")), "the flipped tie-break passes: " + bad);
        Impl hasty = new Impl() {
            @Override
            public boolean writes(Map<String, Object> record, List<String> members, List<Integer> partitions, int epoch, String me,
                    boolean complete, List<String> previousView) {
                return StickyAssignor.writes(record, members, partitions, epoch, me, complete, members);
            }
        };
        assertFalse(replay(hasty).isEmpty(), "dropping a missing member at once passes the vectors");
    }
}
