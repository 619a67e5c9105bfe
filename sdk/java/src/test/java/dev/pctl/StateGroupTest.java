package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.KeyValue;
import io.nats.client.api.KeyValueConfiguration;
import io.nats.client.api.KeyValueEntry;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The state handover API (spec/protocol.md §6.9) against a real broker, with the running-total
 * processor of examples/StatefulTotals.java (compiled here as written; its durable state in a KV
 * bucket, exactly once by the input record that last changed each key) in a sticky group on a
 * linear-murmur2 topic: two members, a third joins, the topic grows 4 -> 8, a member crashes right
 * after a state write and before the acknowledgement (its connections closed, nothing flushed or
 * released). The final totals equal the totals computed here directly from the input. The same
 * checker fails on a processor that does not load a key's state when the key arrives (what a
 * consumer without the state API gives). Plus the option's validation and a load error stopping
 * the member.
 */
@Tag("broker")
class StateGroupTest {
    private static final int KEYS = 30;
    private static Broker broker;
    private static Class<?> example;

    @BeforeAll
    static void start() throws Exception {
        broker = Broker.start();
        example = compileExample();
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    /** Compiles examples/StatefulTotals.java against the SDK and jnats, and loads it. */
    private static Class<?> compileExample() throws Exception {
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        assertTrue(javac != null, "no system Java compiler (a JRE without javac)");
        Path out = Files.createTempDirectory("pctl-example");
        String cp = location(Consumer.class) + java.io.File.pathSeparator + location(KeyValue.class);
        int rc = javac.run(null, null, null, "-d", out.toString(), "-cp", cp, Repo.path("sdk/java/examples/StatefulTotals.java").toString());
        assertEquals(0, rc, "javac examples/StatefulTotals.java");
        URLClassLoader l = new URLClassLoader(new URL[] {out.toUri().toURL()}, StateGroupTest.class.getClassLoader());
        return l.loadClass("StatefulTotals");
    }

    private static String location(Class<?> c) throws Exception {
        return Paths.get(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
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

    /** One member: its client, consumer, processor and polling thread. */
    private static final class Member {
        final String id;
        PctlClient client;
        volatile Consumer consumer;
        Object rt;
        Thread thread;
        final AtomicInteger crashAfter = new AtomicInteger(-1);
        volatile boolean crashed;
        final AtomicReference<Throwable> error = new AtomicReference<>();

        Member(String id) {
            this.id = id;
        }

        long stat(String field) throws Exception {
            return ((AtomicLong) example.getField(field).get(rt)).get();
        }
    }

    private record Outcome(Map<String, String> expected, Map<String, String> got, String stats, int sent, long duplicates, long loadsOfC) {}

    private Outcome scenario(String topic, boolean loads, boolean crash, boolean grow) throws Exception {
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "4", "--partitioner", "linear-murmur2");
        String bucket = topic + "-totals";
        Map<String, long[]> expected = new LinkedHashMap<>();
        Set<String> seen = ConcurrentHashMap.newKeySet();
        List<Member> members = new ArrayList<>();
        List<String> logs = Collections.synchronizedList(new ArrayList<>());
        AtomicBoolean stop = new AtomicBoolean();
        Constructor<?> mk = example.getConstructor(KeyValue.class, boolean.class);
        Method handle = example.getMethod("handle", ConsumerRecord.class);
        try (PctlClient admin = PctlClient.connect(broker.options(broker.admin)); Producer p = admin.producer(topic, ProducerOptions.builder().id(topic + "-p").build())) {
            admin.connection().keyValueManagement().create(KeyValueConfiguration.builder().name(bucket).maxHistoryPerKey(1).build());
            int[] sent = {0};
            java.util.function.IntConsumer send = n -> {
                List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < n; i++, sent[0]++) {
                    String key = "k" + (sent[0] % KEYS);
                    long amount = (sent[0] * 7L) % 13 + 1;
                    long[] e = expected.computeIfAbsent(key, k -> new long[2]);
                    e[0] += amount;
                    e[1]++;
                    fs.add(p.send(ProducerRecord.keyed(key, Long.toString(amount))));
                }
                fs.forEach(CompletableFuture::join);
            };
            java.util.function.Function<String, Member> startMember = id -> {
                Member m = new Member(id);
                try {
                    m.client = PctlClient.connect(broker.options(broker.admin));
                    m.rt = mk.newInstance(m.client.connection().keyValue(bucket), loads);
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
                m.thread = new Thread(() -> {
                    try {
                        Consumer cn = m.client.consumer(topic, ConsumerOptions.builder("g").member(id).fromBeginning(true).heartbeat(Duration.ofMillis(150))
                                .sessionTimeout(Duration.ofMillis(1500)).commitInterval(Duration.ofMillis(100)).assignor("sticky")
                                .state((StateHandler) m.rt).logger(logs::add).build());
                        m.consumer = cn;
                        while (!stop.get()) {
                            for (ConsumerRecord r : cn.poll(Duration.ofMillis(100))) {
                                handle.invoke(m.rt, r);
                                if (m.crashAfter.get() > 0 && m.crashAfter.decrementAndGet() == 0) {
                                    // A crash after the state write and before the acknowledgement.
                                    m.crashed = true;
                                    m.client.close();
                                    return;
                                }
                                seen.add(r.partition() + "/" + r.sequence());
                            }
                        }
                        cn.close();
                    } catch (Throwable t) {
                        m.error.set(t instanceof InvocationTargetException ? t.getCause() : t);
                    }
                }, "state-" + id);
                m.thread.start();
                members.add(m);
                return m;
            };
            Runnable all = () -> {
                try {
                    until(Duration.ofSeconds(30), () -> seen.size() == sent[0],
                            () -> sent[0] + " records delivered, have " + seen.size() + "; log " + logs.subList(Math.max(0, logs.size() - 15), logs.size()));
                } catch (InterruptedException e) {
                    throw new AssertionError(e);
                }
            };
            try {
                startMember.apply("a");
                startMember.apply("b");
                send.accept(200);
                all.run();
                startMember.apply("c");
                until(Duration.ofSeconds(20), () -> members.stream().allMatch(m -> m.consumer != null && !m.consumer.assignment().isEmpty()),
                        () -> "every member owns a partition");
                send.accept(200);
                all.run();
                if (grow) {
                    broker.pctlOk(null, "topic", "expand", topic, "--partitions", "8");
                    send.accept(200);
                    all.run();
                }
                if (crash) {
                    members.get(0).crashAfter.set(20);
                    send.accept(200);
                    all.run();
                    assertTrue(members.get(0).crashed, "member a crashed");
                }
            } finally {
                stop.set(true);
                for (Member m : members) {
                    m.thread.join(30_000);
                    if (m.crashed && m.consumer != null) {
                        try {
                            m.consumer.close(); // its connections are gone: nothing reaches the broker
                        } catch (RuntimeException e) {
                            // expected
                        }
                    }
                    m.client.close();
                }
            }
            for (Member m : members) {
                assertEquals(null, m.error.get(), "member " + m.id);
            }
            StringBuilder stats = new StringBuilder();
            long dups = 0;
            for (Member m : members) {
                stats.append(m.id).append(": applied ").append(m.stat("applied")).append(", duplicates ").append(m.stat("duplicates"))
                        .append(", loads ").append(m.stat("loadCalls")).append(", flushes ").append(m.stat("flushCalls")).append("; ");
                dups += m.stat("duplicates");
            }
            KeyValue kv = admin.connection().keyValue(bucket);
            Map<String, String> want = new LinkedHashMap<>();
            Map<String, String> got = new LinkedHashMap<>();
            for (Map.Entry<String, long[]> e : expected.entrySet()) {
                want.put(e.getKey(), e.getValue()[0] + "/" + e.getValue()[1]);
                KeyValueEntry en = kv.get("k" + java.util.HexFormat.of().formatHex(e.getKey().getBytes(StandardCharsets.UTF_8)));
                String v = en == null || en.getValue() == null ? null : new String(en.getValue(), StandardCharsets.UTF_8);
                got.put(e.getKey(), v == null ? null : v.split(" ")[0] + "/" + v.split(" ")[1]);
            }
            return new Outcome(want, got, stats.toString(), sent[0], dups, members.get(2).stat("loadCalls"));
        }
    }

    @Test
    void totalsSurviveAJoinAnExpansionAndACrash() throws Exception {
        Outcome o = scenario("state1", true, true, true);
        assertEquals(800, o.sent());
        assertEquals(o.expected(), o.got(), o.stats());
        // The record member a applied and crashed on came again and was recognised.
        assertTrue(o.duplicates() >= 1, o.stats());
        // The third member took keys that had state: it loaded them.
        assertTrue(o.loadsOfC() > 0, o.stats());
    }

    @Test
    void theCheckerFailsOnAProcessorThatDoesNotLoad() throws Exception {
        Outcome o = scenario("state2", false, false, false);
        assertNotEquals(o.expected(), o.got(), "a processor that starts moved keys from zero ends with the input's totals: the checker sees nothing");
    }

    @Test
    void aStateHandlerNeedsGating() {
        StateHandler h = new StateHandler() {
            @Override
            public void load(KeySet ks) {}

            @Override
            public void flush(KeySet ks) {}
        };
        BadRequestException e = assertThrows(BadRequestException.class, () -> ConsumerOptions.builder("g").state(h).gating(false).build());
        assertTrue(e.getMessage().contains("gating"), e.getMessage());
    }

    @Test
    void aLoadErrorStopsTheMember() throws Exception {
        broker.pctlOk(null, "topic", "create", "state3", "--partitions", "2", "--partitioner", "kafka-murmur2");
        Groups.produce(broker, "state3", null, List.of(ProducerRecord.keyed("x", "1")));
        StateHandler failing = new StateHandler() {
            @Override
            public void load(KeySet ks) throws Exception {
                throw new java.io.IOException("disk full");
            }

            @Override
            public void flush(KeySet ks) {}
        };
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin));
                Consumer cn = c.consumer("state3", ConsumerOptions.builder("g").fromBeginning(true).heartbeat(Duration.ofMillis(150)).state(failing).build())) {
            List<ConsumerRecord> delivered = new ArrayList<>();
            long end = System.nanoTime() + Duration.ofSeconds(20).toNanos();
            InternalException e = assertThrows(InternalException.class, () -> {
                while (System.nanoTime() < end) {
                    delivered.addAll(cn.poll(Duration.ofMillis(100)));
                }
            });
            assertTrue(e.getMessage().contains("state load of key") && e.getMessage().contains("disk full"), e.getMessage());
            assertFalse(delivered.iterator().hasNext(), "delivered " + delivered);
        }
    }
}
