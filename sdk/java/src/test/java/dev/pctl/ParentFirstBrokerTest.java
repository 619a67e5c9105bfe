package dev.pctl;

import static dev.pctl.Groups.of;
import static dev.pctl.Groups.orderViolations;
import static dev.pctl.Groups.produce;
import static dev.pctl.Groups.rounds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Parent-first replay (spec/protocol.md §6.7) against a real broker: a topic written through two
 * epoch changes (2 partitions, grown to 4, then the function swapped to jump) replayed from the
 * beginning by a group of two members (the second joins once the first holds every partition),
 * with a slow parent (every epoch-1 record of partition 0 takes a millisecond), so that children
 * are ready long before their parents drain.
 *
 * <p>Checked from the deliveries alone (where the broker stored each record, not the SDK's
 * partitioners): per-key order, and that no record of a key was delivered before every record of
 * the key's partition in an older epoch had been (the gate); and, through the member's test hook,
 * that each rebalance took its partitions grouped by the epoch of the record each reads next (that
 * epoch taken from the deliveries: the first record delivered after the position), one group per
 * epoch, oldest first. The control with gating off must fail the gate check. And a release after a
 * commit whose answer was lost frees the partition (§6.3).
 */
@Tag("broker")
class ParentFirstBrokerTest {
    private static final int KEYS = 40;
    private static Broker broker;
    private static final AtomicInteger TOPICS = new AtomicInteger();

    @BeforeAll
    static void start() throws Exception {
        broker = Broker.start();
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    private static String createTopic(int partitions) throws Exception {
        String name = "pf" + TOPICS.incrementAndGet();
        broker.pctlOk(null, "topic", "create", name, "--partitions", Integer.toString(partitions), "--partitioner", "kafka-murmur2");
        return name;
    }

    /** A first delivery: where the broker stored it, its key and value. */
    private record D(int epoch, int partition, long seq, String key, int value) {}

    /** One take of the hook: the member, its rebalance, and the group's [partition, position]s. */
    private record Take(String member, int round, List<long[]> group) {}

    @ParameterizedTest(name = "gating={0}")
    @ValueSource(booleans = {true, false})
    void parentFirstReplayKeepsOrderAndTakesParentsFirst(boolean gating) throws Exception {
        String topic = createTopic(2);
        produce(broker, topic, null, rounds(0, 40, KEYS));
        broker.pctlOk(null, "topic", "repartition", topic, "--partitions", "4");
        produce(broker, topic, null, rounds(40, 55, KEYS));
        broker.pctlOk(null, "topic", "repartition", topic, "--partitioner", "jump");
        produce(broker, topic, null, rounds(55, 70, KEYS));
        int total = 70 * KEYS;

        List<Take> takes = new CopyOnWriteArrayList<>();
        List<D> got = Collections.synchronizedList(new ArrayList<>());
        Set<String> seen = Collections.synchronizedSet(new HashSet<>());
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (String name : List.of("a", "b")) {
            if (name.equals("b")) {
                // Member a takes every partition (two epochs' worth) before b joins and it gives
                // half back: a round with several partitions of one epoch and of two.
                long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
                while (got.size() < 50 && System.nanoTime() < deadline && errors.isEmpty()) {
                    Thread.sleep(10);
                }
            }
            Thread t = new Thread(() -> {
                ConsumerOptions o = ConsumerOptions.builder("pf").member(name).fromBeginning(true).heartbeat(Duration.ofMillis(200))
                        .sessionTimeout(Duration.ofSeconds(3)).gating(gating).build();
                long deadline = System.nanoTime() + Duration.ofMinutes(3).toNanos();
                try (PctlClient c = PctlClient.connect(broker.options(broker.consumer)); Consumer cn = c.consumer(topic, o)) {
                    cn.takeHookForTest = (round, group) -> takes.add(new Take(name, round, group));
                    while (seen.size() < total && System.nanoTime() < deadline) {
                        for (ConsumerRecord r : cn.poll(Duration.ofMillis(200))) {
                            if (r.partition() == 0 && r.epoch() == 1) {
                                Thread.sleep(1); // the slow parent
                            }
                            got.add(new D(r.epoch(), r.partition(), r.sequence(), r.keyString(), Integer.parseInt(r.valueString())));
                            seen.add(r.epoch() + "/" + r.partition() + "/" + r.sequence());
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            }, "pf-member-" + name);
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        assertTrue(errors.isEmpty(), () -> "a member failed: " + errors);
        List<D> first = new ArrayList<>();
        Set<String> ids = new HashSet<>();
        synchronized (got) {
            for (D d : got) {
                if (ids.add(d.epoch + "/" + d.partition + "/" + d.seq)) {
                    first.add(d);
                }
            }
        }
        assertEquals(total, first.size(), "every record delivered");
        List<String> early = deliveredBeforeParents(first);
        if (!gating) {
            assertFalse(early.isEmpty(), "gating off: the gate check must fail here, or it proves nothing");
            return;
        }
        assertEquals(List.of(), early.subList(0, Math.min(3, early.size())), early.size() + " records delivered before their parents drained");
        List<Groups.Delivery> ds = new ArrayList<>();
        for (D d : first) {
            ds.add(new Groups.Delivery("p", ds.size(), d.key.getBytes(StandardCharsets.UTF_8), Integer.toString(d.value), d.partition, d.epoch, d.seq, 0, Map.of()));
        }
        assertEquals(List.of(), orderViolations(ds), "per-key order");
        int[] mixed = {0};
        List<String> bad = takeViolations(takes, first, 3, mixed);
        assertEquals(List.of(), bad);
        assertTrue(mixed[0] > 0, () -> "no rebalance took partitions of two epochs, so the order was not tested: " + describe(takes));
        assertTrue(takes.stream().anyMatch(t -> t.group.size() > 1), () -> "no group of two partitions, so 'together' was not tested: " + describe(takes));
    }

    /**
     * The first deliveries of a key's record of epoch x in partition c that came before the last
     * delivery of an epoch-e record (e &lt; x) of partition q != c, where q held the key's epoch-e
     * records: q had not drained yet.
     */
    static List<String> deliveredBeforeParents(List<D> first) {
        Map<String, Integer> home = new HashMap<>();
        Map<String, Integer> last = new HashMap<>();
        for (int i = 0; i < first.size(); i++) {
            D d = first.get(i);
            home.put(d.epoch + "/" + d.key, d.partition);
            last.put(d.epoch + "/" + d.partition, i);
        }
        List<String> out = new ArrayList<>();
        for (int i = 0; i < first.size(); i++) {
            D d = first.get(i);
            for (int e = 1; e < d.epoch; e++) {
                Integer q = home.get(e + "/" + d.key);
                if (q != null && q != d.partition && i < last.get(e + "/" + q)) {
                    out.add("key " + d.key + " epoch " + d.epoch + " partition " + d.partition + " seq " + d.seq + ", delivered before partition " + q
                            + " drained epoch " + e);
                    break;
                }
            }
        }
        return out;
    }

    /**
     * For each (member, round): the epoch each taken partition reads next (the epoch of the first
     * record delivered after its position; {@code newest} when none came) must be one per group
     * and rise from group to group. mixed[0] counts the rounds that took partitions of two epochs.
     */
    static List<String> takeViolations(List<Take> takes, List<D> first, int newest, int[] mixed) {
        Map<Integer, TreeMap<Long, Integer>> after = new HashMap<>();
        for (D d : first) {
            after.computeIfAbsent(d.partition, k -> new TreeMap<>()).put(d.seq, d.epoch);
        }
        Map<String, List<List<long[]>>> rounds = new TreeMap<>();
        for (Take t : takes) {
            rounds.computeIfAbsent(t.member + " round " + t.round, k -> new ArrayList<>()).add(t.group);
        }
        List<String> bad = new ArrayList<>();
        for (Map.Entry<String, List<List<long[]>>> en : rounds.entrySet()) {
            List<Integer> epochs = new ArrayList<>();
            StringBuilder sb = new StringBuilder();
            for (List<long[]> g : en.getValue()) {
                Set<Integer> es = new TreeSet<>();
                for (long[] qp : g) {
                    TreeMap<Long, Integer> m = after.get((int) qp[0]);
                    Map.Entry<Long, Integer> nx = m == null ? null : m.higherEntry(qp[1]);
                    int e = nx == null ? newest : nx.getValue();
                    es.add(e);
                    sb.append(" p").append(qp[0]).append("@").append(qp[1]).append("(epoch ").append(e).append(")");
                }
                sb.append(" |");
                if (es.size() != 1) {
                    bad.add("member " + en.getKey() + ": one group holds partitions of epochs " + es + ":" + sb);
                }
                epochs.add(Collections.min(es));
            }
            if (!epochs.equals(new ArrayList<>(new TreeSet<>(epochs)))) {
                bad.add("member " + en.getKey() + ": groups by epoch " + epochs + ", not one per epoch oldest first:" + sb);
            }
            if (new TreeSet<>(epochs).size() > 1) {
                mixed[0]++;
            }
        }
        return bad;
    }

    private static String describe(List<Take> takes) {
        StringBuilder sb = new StringBuilder();
        for (Take t : takes) {
            sb.append(t.member).append(" round ").append(t.round).append(":");
            for (long[] qp : t.group) {
                sb.append(" p").append(qp[0]).append("@").append(qp[1]);
            }
            sb.append("; ");
        }
        return sb.toString();
    }

    /**
     * spec §6.3: a release whose compare-and-set fails on the member's own unanswered commit reads
     * the key and, finding that write of its own, releases from its revision. Before, the release
     * failed and the partitions stayed leased to the member until the lease expired (what a member
     * joining then waited for). Every commit's answer is taken as lost here.
     */
    @Test
    void releaseAfterAnUnansweredCommitFreesThePartition() throws Exception {
        String topic = createTopic(2);
        int n = 100;
        List<ProducerRecord> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            recs.add(ProducerRecord.keyed("k" + (i % 7), Integer.toString(i)));
        }
        produce(broker, topic, null, recs);
        List<String> logs = new CopyOnWriteArrayList<>();
        AtomicInteger commits = new AtomicInteger();
        String topicId;
        try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
            ConsumerOptions o = ConsumerOptions.builder("relunsure").fromBeginning(true).commitInterval(Duration.ofMillis(20))
                    .sessionTimeout(Duration.ofSeconds(30)).logger(logs::add).build();
            Consumer cn = c.consumer(topic, o);
            cn.loseCommitAnswerForTest = () -> {
                commits.incrementAndGet();
                return true;
            };
            int got = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (got < n && System.nanoTime() < deadline) {
                got += cn.poll(Duration.ofMillis(200)).size();
            }
            assertEquals(n, got, "every record delivered");
            cn.poll(Duration.ofMillis(300)); // acknowledges the last records
            int before = commits.get();
            deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (commits.get() <= before && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            topicId = c.topic(topic).id();
            cn.close();
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            Map<Integer, Object> owners = new TreeMap<>();
            for (int q = 0; q < 2; q++) {
                GroupKv.Entry e = kv.get(topicId + ".relunsure.p." + q);
                Map<?, ?> st = e == null ? Map.of() : (Map<?, ?>) Json.parse(new String(e.value(), StandardCharsets.UTF_8));
                owners.put(q, st.containsKey("owner") ? st.get("owner") : "");
            }
            assertTrue(commits.get() > 0);
            assertEquals(Map.of(0, "", 1, ""), owners, "partitions still leased after the release");
        }
        assertTrue(logs.stream().anyMatch(l -> l.contains("releasing from revision")), "the release never met its own unanswered commit");
    }
}
