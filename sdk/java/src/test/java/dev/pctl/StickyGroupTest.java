package dev.pctl;

import static dev.pctl.Groups.produce;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.KeyValue;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The sticky assignor (spec/protocol.md §6.2.1) in this SDK's consumer, against a real broker:
 * two Java members of a sticky group on a linear-murmur2 topic of 4 partitions keep every key on
 * its member when the topic grows to 8 (the leader's record says moved 0, and each member owns the
 * children of its partitions); a member that asks for another assignor is refused. Before, the
 * consumer refused every sticky group (unsupported). Also the group's keys as a member reads them
 * at join (§6.1): only from a state that holds g.created.
 */
@Tag("broker")
class StickyGroupTest {
    private static Broker broker;

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

    private static List<ProducerRecord> records(int from, int to) {
        List<ProducerRecord> out = new ArrayList<>();
        for (int i = from; i < to; i++) {
            out.add(ProducerRecord.keyed("k" + (i % 50), Integer.toString(i)));
        }
        return out;
    }

    private static void until(Duration d, BooleanSupplier cond, Supplier<String> what) throws InterruptedException {
        long end = System.nanoTime() + d.toNanos();
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > end) {
                throw new AssertionError("timed out waiting for " + what.get());
            }
            Thread.sleep(50);
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void anExpansionUnderLinearHashingMovesNoKey() throws Exception {
        String topic = "sticky1";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "4", "--partitioner", "linear-murmur2");
        produce(broker, topic, null, records(0, 200));
        try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
            String key = c.topic(topic).id() + ".sg.g.assignment";
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            Map<String, Object>[] last = new Map[1];
            Supplier<Map<String, Object>> record = () -> {
                GroupKv.Entry e = kv.get(key);
                try {
                    last[0] = e == null ? null : (Map<String, Object>) Json.parse(new String(e.value(), StandardCharsets.UTF_8));
                } catch (Json.JsonException x) {
                    throw new AssertionError(x);
                }
                return last[0];
            };
            AtomicBoolean stop = new AtomicBoolean();
            AtomicBoolean grown = new AtomicBoolean();
            AtomicInteger delivered = new AtomicInteger();
            Map<String, List<Integer>> ownedBefore = new ConcurrentHashMap<>();
            List<String> misses = Collections.synchronizedList(new ArrayList<>());
            Set<String> keysAfter = ConcurrentHashMap.newKeySet();
            Map<String, Consumer> members = new ConcurrentHashMap<>();
            Map<String, ConsumerStats> stats = new ConcurrentHashMap<>();
            List<Thread> threads = new ArrayList<>();
            for (String id : List.of("a", "b")) {
                Thread t = new Thread(() -> {
                    try (Consumer cn = c.consumer(topic, ConsumerOptions.builder("sg").member(id).fromBeginning(true)
                            .heartbeat(Duration.ofMillis(150)).assignor("sticky").build())) {
                        members.put(id, cn);
                        while (!stop.get()) {
                            for (ConsumerRecord r : cn.poll(Duration.ofMillis(100))) {
                                delivered.incrementAndGet();
                                if (grown.get()) {
                                    // Linear hashing 4 -> 8: a key of partition q in epoch 2 was in q mod 4 in epoch 1.
                                    keysAfter.add(r.keyString());
                                    if (!ownedBefore.get(id).contains(r.partition() % 4)) {
                                        misses.add(r.keyString() + " (partition " + r.partition() + ", epoch " + r.epoch() + ") by " + id);
                                    }
                                }
                            }
                        }
                        stats.put(id, cn.stats());
                    }
                }, "sticky-" + id);
                t.start();
                threads.add(t);
            }
            try {
                Supplier<String> view = () -> "record " + last[0] + ", owned " + (members.size() < 2 ? "?" : members.get("a").assignment() + " / " + members.get("b").assignment());
                until(Duration.ofSeconds(60), () -> members.size() == 2 && record.get() != null && ((List<?>) last[0].get("members")).size() == 2
                        && sorted(members.get("a").assignment()).size() == 2 && members.get("b").assignment().size() == 2, view);
                until(Duration.ofSeconds(60), () -> delivered.get() >= 200, () -> "200 deliveries, have " + delivered.get());
                Map<String, List<Integer>> want = new ConcurrentHashMap<>();
                for (String id : List.of("a", "b")) {
                    List<Integer> qs = sorted(members.get(id).assignment());
                    ownedBefore.put(id, qs);
                    List<Integer> w = new ArrayList<>(qs);
                    for (int q : qs) {
                        w.add(q + 4);
                    }
                    want.put(id, sorted(w));
                }
                grown.set(true);
                broker.pctlOk(null, "topic", "expand", topic, "--partitions", "8");
                produce(broker, topic, null, records(200, 400));
                until(Duration.ofSeconds(60), () -> record.get() != null && ((Number) last[0].get("epoch")).intValue() == 2
                        && sorted(members.get("a").assignment()).equals(want.get("a")) && sorted(members.get("b").assignment()).equals(want.get("b")),
                        () -> "the children with their parents' owners " + want + ": " + view.get());
                until(Duration.ofSeconds(60), () -> delivered.get() >= 400, () -> "400 deliveries, have " + delivered.get());
                Map<String, Object> rec = record.get();
                assertEquals("sticky", rec.get("assignor"));
                assertEquals(0.0, ((Number) rec.get("moved")).doubleValue(), "moved in " + rec);
                assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L, 6L, 7L), rec.get("partitions"));
                assertEquals(50, keysAfter.size());
                assertEquals(List.of(), misses, "keys delivered after the expansion by a member that did not hold them");
                ConflictException e = assertThrows(ConflictException.class,
                        () -> c.consumer(topic, ConsumerOptions.builder("sg").member("c").assignor("modulo").build()).close());
                assertTrue(e.getMessage().contains("sticky"), e.getMessage());
            } finally {
                stop.set(true);
                for (Thread t : threads) {
                    t.join(30_000);
                }
            }
            assertTrue(stats.get("a").assignments() + stats.get("b").assignments() >= 2, "records written: " + stats);
        }
    }

    private static List<Integer> sorted(List<Integer> xs) {
        List<Integer> out = new ArrayList<>(xs);
        Collections.sort(out);
        return out;
    }

    /** A group whose recorded assignor this SDK does not implement (§6.1) is refused as unsupported (§3). */
    @Test
    void aGroupWithAnUnknownAssignorIsUnsupported() throws Exception {
        String topic = "rr";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "2", "--partitioner", "kafka-murmur2");
        try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            // Then g.created, as its creator writes it: a group without g.created is being
            // created, and a member may still write its own assignor (§6.1).
            kv.create(c.topic(topic).id() + ".rr.g.assignor", "{\"assignor\":\"round-robin\"}".getBytes(StandardCharsets.UTF_8));
            kv.create(c.topic(topic).id() + ".rr.g.created", NOW);
            UnsupportedException e = assertThrows(UnsupportedException.class,
                    () -> c.consumer(topic, ConsumerOptions.builder("rr").member("a").build()).close());
            org.junit.jupiter.api.Assertions.assertEquals(ErrorCode.UNSUPPORTED, e.code());
            org.junit.jupiter.api.Assertions.assertTrue(e.getMessage().contains("round-robin") && e.getMessage().contains("another group"), e.getMessage());
        }
    }

    // Reading the group's keys at join (§6.1): a member takes g.start and g.assignor only from a
    // state that holds g.created. While only g.start and g.assignor exist (a creator between its
    // writes, or a replica that lags behind them) the read goes on; once g.created exists it
    // returns both; a deleted key reads as absent; with no keys at all it gives up with
    // unavailable. The keys are written with jnats's own KeyValue, not the SDK's GroupKv. The same
    // three cases as the Go client's TestReadGroupKeysWaitsForTheMarker. The cluster failure this
    // guards against (a lagging follower answering "not found" for a g.start that exists) needs a
    // lagging replica at the right moment; the rule that prevents it is what is checked here.

    private static final byte[] START = "{\"from\":\"current-epoch\",\"epoch\":3}".getBytes(StandardCharsets.UTF_8);
    private static final byte[] ASSIGNOR = "{\"assignor\":\"sticky\"}".getBytes(StandardCharsets.UTF_8);
    private static final byte[] NOW = "now".getBytes(StandardCharsets.UTF_8);

    /** One case of the group-keys read: a fresh topic id's prefix, jnats's KV and the SDK's, on an admin connection. */
    private interface KeysCase {
        void run(String tid, KeyValue nkv, GroupKv kv) throws Exception;
    }

    private static void keysCase(KeysCase body) throws Exception {
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            body.run("T" + UUID.randomUUID().toString().replace("-", "").substring(0, 8), c.connection().keyValue(GroupKv.BUCKET),
                    new GroupKv(c, Duration.ofSeconds(5)));
        }
    }

    @Test
    void theGroupKeysReadWaitsForGCreatedThenReturnsBoth() throws Exception {
        keysCase((tid, nkv, kv) -> {
            // A first read of a complete group (not timed): the classes loaded, the connection warm.
            nkv.put(tid + ".g0.g.created", NOW);
            Consumer.readGroupKeys(kv, tid + ".g0.", "g0", Duration.ofSeconds(30));
            String p = tid + ".g1.";
            nkv.put(p + "g.start", START);
            nkv.put(p + "g.assignor", ASSIGNOR);
            AtomicLong doneAt = new AtomicLong();
            CompletableFuture<Consumer.GroupKeys> f = CompletableFuture.supplyAsync(() -> {
                Consumer.GroupKeys r = Consumer.readGroupKeys(kv, p, "g1", Duration.ofSeconds(30));
                doneAt.set(System.nanoTime());
                return r;
            });
            Thread.sleep(300); // several reads, each without g.created
            assertFalse(f.isDone(), () -> "returned " + (f.isCompletedExceptionally() ? "an error" : f.join()) + " while g.created did not exist");
            long before = System.nanoTime();
            nkv.put(p + "g.created", NOW);
            Consumer.GroupKeys gk = f.get(10, TimeUnit.SECONDS);
            assertTrue(doneAt.get() > before, "the read returned before g.created was written");
            assertNotNull(gk.start(), "g.start");
            assertArrayEquals(START, gk.start().value());
            assertNotNull(gk.assignor(), "g.assignor");
            assertArrayEquals(ASSIGNOR, gk.assignor().value());
        });
    }

    @Test
    void theGroupKeysReadTakesADeletedAssignorAndNoStartAsAbsent() throws Exception {
        keysCase((tid, nkv, kv) -> {
            String p = tid + ".g2.";
            nkv.put(p + "g.assignor", ASSIGNOR);
            nkv.delete(p + "g.assignor");
            nkv.put(p + "g.created", NOW);
            Consumer.GroupKeys gk = Consumer.readGroupKeys(kv, p, "g2", Duration.ofSeconds(30));
            assertNull(gk.start(), "g.start");
            assertNull(gk.assignor(), "g.assignor");
        });
    }

    @Test
    void theGroupKeysReadWithoutKeysGivesUpWithUnavailable() throws Exception {
        keysCase((tid, nkv, kv) -> {
            UnavailableException e = assertThrows(UnavailableException.class, () -> Consumer.readGroupKeys(kv, tid + ".g3.", "g3", Duration.ofMillis(500)));
            assertEquals(ErrorCode.UNAVAILABLE, e.code(), e.getMessage());
        });
    }
}
