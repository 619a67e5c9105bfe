package dev.pctl;

import static dev.pctl.Groups.drain;
import static dev.pctl.Groups.misplaced;
import static dev.pctl.Groups.of;
import static dev.pctl.Groups.orderViolations;
import static dev.pctl.Groups.produce;
import static dev.pctl.Groups.rounds;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.JetStream;
import io.nats.client.JetStreamManagement;
import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.ConcurrentModificationException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The consumer-group member against a real broker ({@code pctl serve} built from this checkout):
 * per-key order across grow, shrink and function swap (and the same check failing on an ungated
 * member), seeks that close the gates again (and a member that keeps its drained set caught
 * replaying out of order), manual commits, KIP-253 key callbacks in the right order, headers and
 * timestamps, misplaced records from a raw producer, readers whose server-side consumers are
 * deleted under them, the errors a caller sees, partitions taken parents first (§6.7) and a
 * release after a commit whose answer was lost. Expected placements come from {@code pctl
 * partition} (the Go host), never from the SDK.
 */
@Tag("broker")
class ConsumerBrokerTest {
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
        String name = "c" + TOPICS.incrementAndGet();
        broker.pctlOk(null, "topic", "create", name, "--partitions", Integer.toString(partitions), "--partitioner", "kafka-murmur2");
        return name;
    }

    private static void repartition(String topic, String... args) throws Exception {
        List<String> a = new ArrayList<>(List.of("topic", "repartition", topic));
        a.addAll(List.of(args));
        broker.pctlOk(null, a.toArray(new String[0]));
    }

    private static PctlClient consumerClient() {
        return PctlClient.connect(broker.options(broker.consumer));
    }

    /**
     * Epoch 1: 3 partitions (murmur2), 2: grown to 6, 3: shrunk to 2, 4: the function swapped to
     * librdkafka-consistent with 4 partitions. Values count up per key across all epochs.
     */
    private static List<ProducerRecord> buildEpochs(String topic, int perEpoch, int keys) throws Exception {
        List<ProducerRecord> sent = new ArrayList<>();
        String[][] steps = {null, {"--partitions", "6"}, {"--partitions", "2"}, {"--partitions", "4", "--partitioner", "librdkafka-consistent"}};
        int n = 0;
        for (String[] step : steps) {
            if (step != null) {
                repartition(topic, step);
            }
            List<ProducerRecord> recs = rounds(n, n + perEpoch, keys);
            n += perEpoch;
            sent.addAll(recs);
            produce(broker, topic, null, recs);
        }
        return sent;
    }

    @Test
    void oneMemberKeepsKeyOrderAcrossGrowShrinkAndSwap() throws Exception {
        String topic = createTopic(3);
        List<ProducerRecord> sent = buildEpochs(topic, 40, 30);
        List<ConsumerRecord> got;
        ConsumerStats st;
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("g").fromBeginning(true).build())) {
            got = drain(cn, sent.size(), Duration.ofSeconds(20));
            st = cn.stats();
        }
        List<Groups.Delivery> ds = of(got);
        assertEquals(sent.size(), got.size(), "every record delivered once");
        List<String> want = new ArrayList<>();
        for (ProducerRecord r : sent) {
            want.add(new String(r.key(), StandardCharsets.UTF_8) + "=" + new String(r.value(), StandardCharsets.UTF_8));
        }
        List<String> have = new ArrayList<>();
        for (ConsumerRecord r : got) {
            have.add(r.keyString() + "=" + r.valueString());
        }
        Collections.sort(want);
        Collections.sort(have);
        assertEquals(want, have, "exactly the records sent");
        assertEquals(List.of(), orderViolations(ds), "per-key order across three epoch changes");
        assertEquals(List.of(), misplaced(broker, topic, ds), "every record in its key's partition for its epoch (pctl partition)");
        Set<Integer> epochs = new TreeSet<>();
        for (ConsumerRecord r : got) {
            epochs.add(r.epoch());
        }
        assertEquals(Set.of(1, 2, 3, 4), epochs);
        assertTrue(st.gated() > 0, "some records waited at a gate: " + st);
    }

    @Test
    void theOrderCheckCatchesAMemberWithoutGates() throws Exception {
        // The control for the test above: the same check on a member that does not gate must
        // fail, or that test would prove nothing. Epoch 1 has many records in 2 partitions; after a
        // grow the new partitions hold only epoch-2 records, which an ungated member delivers at once.
        String topic = createTopic(2);
        produce(broker, topic, null, rounds(0, 120, 40));
        repartition(topic, "--partitions", "6");
        produce(broker, topic, null, rounds(120, 130, 40));
        List<ConsumerRecord> got;
        try (PctlClient c = consumerClient();
                Consumer cn = c.consumer(topic, ConsumerOptions.builder("ungated").fromBeginning(true).gating(false).build())) {
            got = drain(cn, 130 * 40, Duration.ofSeconds(20));
        }
        assertEquals(130 * 40, got.size());
        assertFalse(orderViolations(of(got)).isEmpty(), "an ungated member breaks per-key order here");
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void seekToTheBeginningReplaysEveryEpochInKeyOrder(boolean keepsDrainedSet) throws Exception {
        String topic = createTopic(2);
        produce(broker, topic, null, rounds(0, 120, 40));
        repartition(topic, "--partitions", "6");
        produce(broker, topic, null, rounds(120, 130, 40));
        int total = 130 * 40;
        List<ConsumerRecord> first;
        List<ConsumerRecord> replay;
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("seeker").fromBeginning(true).build())) {
            cn.keepDrainedAcrossSeeksForTest = keepsDrainedSet;
            first = drain(cn, total, Duration.ofSeconds(20));
            cn.poll(Duration.ofMillis(300)); // acknowledges the last records
            cn.commit();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (cn.drainedThrough() < 1 && System.nanoTime() < until) {
                cn.poll(Duration.ofMillis(100));
            }
            assertEquals(1, cn.drainedThrough(), "epoch 1 fully drained before the seek");
            cn.seekToBeginning();
            assertEquals(1, cn.generation());
            replay = drain(cn, total, Duration.ofSeconds(20));
        }
        assertEquals(total, first.size());
        assertEquals(List.of(), orderViolations(of(first)));
        assertEquals(total, replay.size(), "a seek to the beginning delivers every record of every epoch again");
        List<String> bad = orderViolations(of(replay));
        if (keepsDrainedSet) {
            assertFalse(bad.isEmpty(), "a member that keeps its drained set across a seek replays out of order (Pulsar's bug)");
        } else {
            assertEquals(List.of(), bad, "after a seek the gates close again: the replay is in key order");
        }
    }

    @Test
    void seekToTheEndAndToATime() throws Exception {
        String topic = createTopic(3);
        produce(broker, topic, null, rounds(0, 10, 20));
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("times").fromBeginning(true).build())) {
            assertEquals(200, drain(cn, 200, Duration.ofSeconds(10)).size());
            cn.seekToEnd();
            assertEquals(List.of(), drain(cn, 1, Duration.ofMillis(1500)), "nothing after a seek to the end");
            produce(broker, topic, null, rounds(10, 12, 20));
            List<ConsumerRecord> afterEnd = drain(cn, 40, Duration.ofSeconds(10));
            Thread.sleep(50);
            Instant t = Instant.now();
            Thread.sleep(50);
            produce(broker, topic, null, rounds(12, 15, 20));
            cn.seek(t);
            List<ConsumerRecord> afterT = drain(cn, 60, Duration.ofSeconds(10));
            List<ConsumerRecord> extra = drain(cn, 1, Duration.ofSeconds(1));
            assertEquals(2, cn.generation());
            assertEquals(values(rounds(10, 12, 20)), sortedValues(afterEnd));
            assertEquals(values(rounds(12, 15, 20)), sortedValues(afterT), "exactly the records stored after T");
            assertEquals(List.of(), extra);
            assertEquals(List.of(), orderViolations(of(afterT)));
        }
    }

    private static List<Integer> values(List<ProducerRecord> rs) {
        List<Integer> out = new ArrayList<>();
        for (ProducerRecord r : rs) {
            out.add(Integer.parseInt(new String(r.value(), StandardCharsets.UTF_8)));
        }
        Collections.sort(out);
        return out;
    }

    private static List<Integer> sortedValues(List<ConsumerRecord> rs) {
        List<Integer> out = new ArrayList<>();
        for (ConsumerRecord r : rs) {
            out.add(Integer.parseInt(r.valueString()));
        }
        Collections.sort(out);
        return out;
    }

    @Test
    void manualCommitRedeliversWhatWasNotCommitted() throws Exception {
        String topic = createTopic(1);
        List<ProducerRecord> recs = new ArrayList<>();
        for (int i = 0; i < 100; i++) {
            recs.add(ProducerRecord.keyed("k", Integer.toString(i)));
        }
        produce(broker, topic, null, recs);
        List<ConsumerRecord> got;
        List<ConsumerRecord> again;
        try (PctlClient c = consumerClient()) {
            Consumer a = c.consumer(topic, ConsumerOptions.builder("manual").fromBeginning(true).autoCommit(false).maxPollRecords(7).build());
            got = drain(a, 60, Duration.ofSeconds(10)).subList(0, 60);
            a.commit(got.get(39)); // records 0..39 processed; 40..59 delivered, not committed
            a.close();
            try (Consumer b = c.consumer(topic, ConsumerOptions.builder("manual").autoCommit(false).build())) {
                again = drain(b, 60, Duration.ofSeconds(10));
                b.commit();
                // A commit for a partition this member no longer owns fails clearly.
                c.resetGroup(topic, "manual", ResetTarget.beginning());
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (b.generation() == 0 && System.nanoTime() < until) {
                    b.poll(Duration.ofMillis(100));
                }
                ConsumerRecord lastOne = again.get(again.size() - 1);
                CommitFailedException e = assertThrows(CommitFailedException.class, () -> b.commit(lastOne));
                assertTrue(e.getMessage().contains("no longer"), e.getMessage());
                assertEquals(ErrorCode.CONFLICT, e.code());
            }
        }
        List<Integer> firstVals = new ArrayList<>();
        for (ConsumerRecord r : got) {
            firstVals.add(Integer.parseInt(r.valueString()));
        }
        List<Integer> againVals = new ArrayList<>();
        for (ConsumerRecord r : again) {
            againVals.add(Integer.parseInt(r.valueString()));
        }
        assertEquals(range(0, 60), firstVals);
        assertEquals(range(40, 100), againVals, "redelivery starts after the last committed record, in order");
    }

    private static List<Integer> range(int a, int b) {
        List<Integer> out = new ArrayList<>();
        for (int i = a; i < b; i++) {
            out.add(i);
        }
        return out;
    }

    @Test
    void manualCommitHoldsTheChildrensGates() throws Exception {
        // Gates open on committed positions: without auto-commit a record of a moved key waits
        // until its parent's records are committed (§6.7), then comes in order.
        String topic = createTopic(1);
        List<ProducerRecord> olds = new ArrayList<>();
        List<ProducerRecord> news = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            olds.add(ProducerRecord.keyed("k" + i, "old"));
            news.add(ProducerRecord.keyed("k" + i, "new"));
        }
        produce(broker, topic, null, olds);
        repartition(topic, "--partitions", "3");
        produce(broker, topic, null, news);
        try (PctlClient c = consumerClient();
                Consumer cn = c.consumer(topic, ConsumerOptions.builder("hold").fromBeginning(true).autoCommit(false).build())) {
            List<ConsumerRecord> first = new ArrayList<>();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (first.stream().filter(r -> r.valueString().equals("old")).count() < 20 && System.nanoTime() < until) {
                first.addAll(cn.poll(Duration.ofMillis(200)));
            }
            first.addAll(drain(cn, 40 - first.size(), Duration.ofSeconds(2))); // what else comes without a commit
            long oldN = first.stream().filter(r -> r.valueString().equals("old")).count();
            long movedBefore = first.stream().filter(r -> r.valueString().equals("new") && r.partition() != 0).count();
            assertEquals(20, oldN);
            assertEquals(0, movedBefore, "no moved key's new record before its parent partition was committed");
            cn.commit();
            List<ConsumerRecord> rest = drain(cn, 40 - first.size(), Duration.ofSeconds(10));
            cn.commit();
            assertEquals(40, first.size() + rest.size());
            assertTrue(rest.stream().allMatch(r -> r.valueString().equals("new")));
        }
    }

    @Test
    void keyCallbacksHandOverInOrder() throws Exception {
        String topic = createTopic(2);
        produce(broker, topic, null, rounds(0, 20, 30));
        List<Object[]> log = new CopyOnWriteArrayList<>();
        AtomicBoolean done = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        for (String name : List.of("a", "b")) {
            Thread t = new Thread(() -> {
                try (PctlClient c = consumerClient();
                        Consumer cn = c.consumer(topic, ConsumerOptions.builder("handover").member(name).fromBeginning(true)
                                .heartbeat(Duration.ofMillis(300)).sessionTimeout(Duration.ofSeconds(3)).listener(new RebalanceListener() {
                                    @Override
                                    public void onKeysRevoked(KeyChange ch) {
                                        log.add(new Object[] {"revoked", name, ch.partition(), ch.fromEpoch(), movedKeys(ch)});
                                    }

                                    @Override
                                    public void onKeysAssigned(KeyChange ch) {
                                        log.add(new Object[] {"assigned", name, ch.partition(), ch.parent(), movedKeys(ch)});
                                    }
                                }).build())) {
                    while (!done.get()) {
                        for (ConsumerRecord r : cn.poll(Duration.ofMillis(200))) {
                            log.add(new Object[] {"record", name, r.partition(), r.epoch(), r.keyString(), r.valueString()});
                        }
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            t.start();
            threads.add(t);
        }
        Thread.sleep(2500); // both members share the partitions
        repartition(topic, "--partitions", "5");
        produce(broker, topic, null, rounds(20, 30, 30));
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (log.stream().filter(e -> e[0].equals("record")).count() < 900 && System.nanoTime() < until) {
            Thread.sleep(100);
        }
        done.set(true);
        for (Thread t : threads) {
            t.join(30_000);
        }
        assertEquals(List.of(), errors);
        List<Integer> recIdx = new ArrayList<>();
        for (int i = 0; i < log.size(); i++) {
            if (log.get(i)[0].equals("record")) {
                recIdx.add(i);
            }
        }
        assertTrue(recIdx.size() >= 900, "records delivered: " + recIdx.size());
        Set<Object> owners = new HashSet<>();
        for (int i : recIdx) {
            owners.add(log.get(i)[1]);
        }
        assertEquals(Set.of("a", "b"), owners, "both members delivered");
        // For every key that moved: its last epoch-1 record, then keys-revoked of its old
        // partition, then keys-assigned (child, parent) on the new partition's member, then its
        // first epoch-2 record.
        int moved = 0;
        for (int k = 0; k < 30; k++) {
            String key = "k" + k;
            int lastOld = -1;
            int firstNew = -1;
            for (int i : recIdx) {
                Object[] e = log.get(i);
                if (e[4].equals(key) && (int) e[3] == 1) {
                    lastOld = i;
                }
                if (e[4].equals(key) && (int) e[3] == 2 && firstNew < 0) {
                    firstNew = i;
                }
            }
            int q = (int) log.get(lastOld)[2];
            int p = (int) log.get(firstNew)[2];
            if (q == p) {
                continue;
            }
            moved++;
            int rev = -1;
            int asg = -1;
            for (int i = 0; i < log.size(); i++) {
                Object[] e = log.get(i);
                if (rev < 0 && e[0].equals("revoked") && (int) e[2] == q && (int) e[3] == 1) {
                    rev = i;
                }
                if (asg < 0 && e[0].equals("assigned") && (int) e[2] == p && (int) e[3] == q) {
                    asg = i;
                }
            }
            assertTrue(rev >= 0 && asg >= 0, key + " " + q + "->" + p);
            assertTrue(lastOld < rev && rev < asg && asg < firstNew, key + ": " + lastOld + " " + rev + " " + asg + " " + firstNew);
            assertTrue(((Set<?>) log.get(rev)[4]).contains(key) && ((Set<?>) log.get(asg)[4]).contains(key), "KeyChange.moved names the key");
        }
        assertTrue(moved > 0);
    }

    /** The test's keys k0..k29 that a key change says move (asked in the callback: it runs the partitioners). */
    private static Set<String> movedKeys(KeyChange ch) {
        Set<String> out = new HashSet<>();
        for (int k = 0; k < 30; k++) {
            if (ch.isMoved(("k" + k).getBytes(StandardCharsets.UTF_8))) {
                out.add("k" + k);
            }
        }
        return out;
    }

    @Test
    void headersAndTimestampsRoundTrip() throws Exception {
        String topic = createTopic(1);
        long stamp = 1700000000123L;
        long t0 = System.currentTimeMillis();
        produce(broker, topic, null, List.of(
                ProducerRecord.keyed("k1", "v1").withHeader("trace-id", "abc").withHeader("tag", "a").withHeader("tag", "b").withHeader("empty", "")
                        .withTimestamp(stamp),
                ProducerRecord.keyed("k2", "v2").withHeaders(Map.of("tag", List.of("x", "y"))).withHeader("note", "é ü €"),
                ProducerRecord.keyed("k3", "v3")));
        long t1 = System.currentTimeMillis();
        // A record without Pctl-Time (the Go CLI's producer sets none): its timestamp is the store time.
        broker.pctlOk("k4\tv4\n", "produce", topic);
        List<ConsumerRecord> got;
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("hdr").fromBeginning(true).build())) {
            got = drain(cn, 4, Duration.ofSeconds(10));
        }
        assertEquals(List.of("v1", "v2", "v3", "v4"), got.stream().map(ConsumerRecord::valueString).toList());
        assertEquals(Map.of("trace-id", List.of("abc"), "tag", List.of("a", "b"), "empty", List.of("")), got.get(0).headers(),
                "repeated names keep their values, in order");
        assertEquals("a", got.get(0).header("tag"));
        assertNull(got.get(0).header("nope"));
        assertEquals(stamp, got.get(0).timestamp());
        assertEquals(Instant.ofEpochMilli(stamp), got.get(0).time());
        assertEquals(Map.of("tag", List.of("x", "y"), "note", List.of("é ü €")), got.get(1).headers());
        assertTrue(t0 <= got.get(2).timestamp() && got.get(2).timestamp() <= t1, "default timestamp: when the record was sent");
        assertEquals(Map.of(), got.get(2).headers(), "pctl's own headers are not application headers");
        assertEquals(got.get(3).storedNanos() / 1_000_000, got.get(3).timestamp(), "without Pctl-Time the timestamp is the store time");
        for (ConsumerRecord r : got) {
            assertTrue(t0 * 1_000_000 - 1_000_000_000L <= r.storedNanos(), "stored time " + r.storedNanos());
        }
    }

    @Test
    void recordsWithAnyHeaderBytesAreDeliveredAndTheMemberGoesOn() throws Exception {
        // spec/protocol.md §5.3 allows UTF-8 header values (the other SDKs send them), and a
        // producer can store any bytes: jnats cannot parse such a header (it throws in its
        // connection reader), so a member reading through jnats would re-read the record forever.
        // The member reads on its own connection: it delivers the record, values decoded as UTF-8.
        String topic = createTopic(1);
        produce(broker, topic, null, List.of(ProducerRecord.keyed("k", "0")));
        try (PctlClient p = PctlClient.connect(broker.options(broker.producer))) {
            String key = "b64:" + Base64.getEncoder().encodeToString("k".getBytes(StandardCharsets.UTF_8));
            byte[] utf8 = ("NATS/1.0\r\nPctl-Key: " + key + "\r\nPctl-Producer: raw\r\nPctl-Seq: 1\r\nnote: é ü €\r\n\r\n").getBytes(StandardCharsets.UTF_8);
            java.io.ByteArrayOutputStream bad = new java.io.ByteArrayOutputStream();
            bad.write(("NATS/1.0\r\nPctl-Key: " + key + "\r\nPctl-Producer: raw\r\nPctl-Seq: 2\r\nbin: ").getBytes(StandardCharsets.US_ASCII));
            bad.write(new byte[] {(byte) 0xff, (byte) 0xfe, 'x'});
            bad.write("\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            String inbox = p.raw().newInbox();
            p.raw().hpublish("pctl.data." + topic + ".1.0", inbox, utf8, "1".getBytes(StandardCharsets.UTF_8));
            p.raw().hpublish("pctl.data." + topic + ".1.0", inbox, bad.toByteArray(), "2".getBytes(StandardCharsets.UTF_8));
            Thread.sleep(300);
        }
        produce(broker, topic, null, List.of(ProducerRecord.keyed("k", "3")));
        List<ConsumerRecord> got;
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("bytes").fromBeginning(true).build())) {
            got = drain(cn, 4, Duration.ofSeconds(10));
        }
        assertEquals(List.of("0", "1", "2", "3"), got.stream().map(ConsumerRecord::valueString).toList());
        assertEquals("é ü €", got.get(1).header("note"));
        assertEquals("\ufffd\ufffdx", got.get(2).header("bin"), "malformed UTF-8 is replaced, the record still delivered");
    }

    @Test
    void badHeadersAndOversizedRecordsAreRefusedBeforeSending() throws Exception {
        String topic = createTopic(1);
        ProducerRecord k = ProducerRecord.keyed("k", "v");
        String[][] bad = {{"Pctl-Thing", "x", "reserved"}, {"NATS-thing", "x", "reserved"}, {"a b", "x", "header name"},
            {"ok", "line\nbreak", "control character"}, {"ok", " padded", "leading/trailing"}, {"x".repeat(129), "v", "header name"},
            {"big", "v".repeat(70000), "at most 65536"}, {"", "v", "header name"}};
        for (String[] b : bad) {
            BadRequestException e = assertThrows(BadRequestException.class, () -> k.withHeader(b[0], b[1]), b[0]);
            assertTrue(e.getMessage().contains(b[2]), e.getMessage());
        }
        assertThrows(BadRequestException.class, () -> k.withTimestamp(1L << 53));
        assertThrows(BadRequestException.class, () -> k.withTimestamp(-1));
        // The record limit counts the value and the whole header block, as JetStream does: compute
        // the block by hand (spec/protocol.md §5.3) and probe both sides of the limit.
        int limit = 1 << 20;
        long ts = 1700000000000L;
        java.util.function.IntUnaryOperator block = seq -> {
            String[] lines = {"Pctl-Key: b64:aw==", "Pctl-Producer: size-1", "Pctl-Seq: " + seq, "Nats-Msg-Id: size-1-" + seq + "-" + "0".repeat(32), "Pctl-Time: " + ts, "h: v"};
            int n = "NATS/1.0\r\n".length() + 2;
            for (String l : lines) {
                n += l.length() + 2;
            }
            return n;
        };
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer));
                Producer p = c.producer(topic, ProducerOptions.builder().id("size-1").build())) {
            RecordMetadata fits = p.send(ProducerRecord.keyed("k".getBytes(), "x".repeat(limit - block.applyAsInt(1)).getBytes()).withHeader("h", "v")
                    .withTimestamp(ts)).get(30, TimeUnit.SECONDS);
            CompletableFuture<RecordMetadata> over = p.send(ProducerRecord.keyed("k".getBytes(), "x".repeat(limit - block.applyAsInt(2) + 1).getBytes())
                    .withHeader("h", "v").withTimestamp(ts));
            java.util.concurrent.ExecutionException e = assertThrows(java.util.concurrent.ExecutionException.class, () -> over.get(30, TimeUnit.SECONDS));
            assertTrue(e.getCause() instanceof BadRequestException, String.valueOf(e.getCause()));
            assertTrue(e.getCause().getMessage().contains("record limit of 1048576 bytes") && e.getCause().getMessage().contains("--max-record-bytes"),
                    e.getCause().getMessage());
            RecordMetadata after = p.send(ProducerRecord.keyed("k", "small")).get(30, TimeUnit.SECONDS);
            assertEquals(1, fits.sequence(), "a record of exactly the limit is stored");
            assertEquals(2, after.sequence(), "the refused record failed alone");
        }
    }

    @Test
    void consumerErrors() throws Exception {
        String topic = createTopic(1);
        try (PctlClient c = consumerClient()) {
            assertThrows(NotFoundException.class, () -> c.consumer("no-such-topic", ConsumerOptions.builder("g").build()));
            BadRequestException e = assertThrows(BadRequestException.class, () -> ConsumerOptions.builder("bad.group"));
            assertTrue(e.getMessage().contains("consumer group"), e.getMessage());
            e = assertThrows(BadRequestException.class, () -> ConsumerOptions.builder("g").member("a b"));
            assertTrue(e.getMessage().contains("member id"), e.getMessage());
            assertThrows(BadRequestException.class, () -> ConsumerOptions.builder("g").heartbeat(Duration.ofSeconds(7)).build());
            assertThrows(BadRequestException.class, () -> ResetTarget.parse("start"));
            assertThrows(BadRequestException.class, () -> ResetTarget.time(Instant.parse("1960-01-01T00:00:00Z")));
            Consumer cn = c.consumer(topic, ConsumerOptions.builder("g").build());
            assertEquals(List.of(), cn.poll(Duration.ofMillis(200)));
            assertEquals(List.of(0), cn.assignment());
            cn.close();
            cn.close(); // idempotent
            assertThrows(IllegalStateException.class, () -> cn.poll(Duration.ofMillis(10)));
        }
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer))) {
            PermissionDeniedException e = assertThrows(PermissionDeniedException.class, () -> {
                try (Consumer cn = c.consumer(topic, ConsumerOptions.builder("g2").build())) {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                    while (System.nanoTime() < until) {
                        cn.poll(Duration.ofMillis(200));
                    }
                }
            });
            assertTrue(e.getMessage().contains("consumer.nk"), e.getMessage());
            assertTrue(String.valueOf(e.role()).contains("consumer"), String.valueOf(e.role()));
        }
    }

    @Test
    void wakeupStopsAPollAndOneThreadAtATime() throws Exception {
        String topic = createTopic(1);
        try (PctlClient c = consumerClient(); Consumer cn = c.consumer(topic, ConsumerOptions.builder("wake").build())) {
            CompletableFuture<Throwable> other = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    Thread.sleep(300);
                    try {
                        cn.poll(Duration.ofMillis(10));
                        other.complete(null);
                    } catch (Throwable e) {
                        other.complete(e);
                    }
                    cn.wakeup();
                } catch (InterruptedException e) {
                    other.complete(e);
                }
            });
            t.start();
            long t0 = System.nanoTime();
            assertThrows(WakeupException.class, () -> cn.poll(Duration.ofSeconds(60)));
            assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(30));
            assertTrue(other.get(10, TimeUnit.SECONDS) instanceof ConcurrentModificationException, String.valueOf(other.get()));
            assertEquals(List.of(), cn.poll(Duration.ofMillis(100)), "usable after a wakeup");
            t.join();
        }
    }

    @Test
    void scopedCredentialsAndPrivateInboxes() throws Exception {
        // spec/protocol.md §8.2/§8.3: a producer credential scoped to the topic and a consumer one
        // scoped to (topic, group) are enough for everything the SDK does, on the private inbox.
        String topic = createTopic(2);
        Path prod = broker.dir.resolve(topic + "-p.nk");
        Path cons = broker.dir.resolve(topic + "-c.nk");
        broker.pctlOk(null, "creds", "issue", "--role", "producer", "--topic", topic, "--out", prod.toString());
        broker.pctlOk(null, "creds", "issue", "--role", "consumer", "--topic", topic, "--group", "scoped", "--out", cons.toString());
        Instant t;
        try (PctlClient c = PctlClient.connect(broker.options(prod)); Producer p = c.producer(topic)) {
            assertTrue(c.connection().getOptions().getInboxPrefix().startsWith("_INBOX_U"), c.connection().getOptions().getInboxPrefix());
            for (int i = 0; i < 50; i++) {
                p.send(ProducerRecord.keyed("k" + (i % 5), Integer.toString(i)).withHeader("n", Integer.toString(i)));
            }
            p.flush();
            Thread.sleep(20); // a seek's time has millisecond precision (§6.6)
            t = Instant.now();
            Thread.sleep(50);
            for (int i = 50; i < 60; i++) {
                p.send(ProducerRecord.keyed("k" + (i % 5), Integer.toString(i)));
            }
            p.flush();
        }
        try (PctlClient c = PctlClient.connect(broker.options(cons))) {
            List<ConsumerRecord> got;
            List<ConsumerRecord> again;
            try (Consumer cn = c.consumer(topic, ConsumerOptions.builder("scoped").fromBeginning(true).build())) {
                got = drain(cn, 60, Duration.ofSeconds(10));
                cn.seek(t);
                again = drain(cn, 10, Duration.ofSeconds(10));
            }
            assertEquals(range(0, 60), sortedValues(got));
            assertNotNull(got.get(0).header("n"));
            assertEquals(range(50, 60), sortedValues(again));
            assertThrows(PermissionDeniedException.class, () -> {
                try (Consumer other = c.consumer(topic, ConsumerOptions.builder("another-group").build())) {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                    while (System.nanoTime() < until) {
                        other.poll(Duration.ofMillis(200));
                    }
                }
            });
        }
    }

    /** A fenced code block of the README's section. */
    private static String readmeBlock(String section, String lang) throws Exception {
        String text = Files.readString(Repo.path("sdk/java/README.md"), StandardCharsets.UTF_8);
        String body = text.substring(text.indexOf("## " + section + "\n"));
        body = body.substring(0, body.indexOf("\n## ", 4));
        int start = body.indexOf("```" + lang + "\n") + lang.length() + 4;
        return body.substring(start, body.indexOf("```", start));
    }

    @Test
    void theConsumerQuickstartRunsAsWritten() throws Exception {
        // The README's shell block, with the test broker's address and data directory in place of
        // the defaults, a fresh topic name in place of "payments", pctl on PATH, and the classes this
        // test runs with in place of the jar (./setup cannot run inside the build that tests it).
        String sh = readmeBlock("Consumer quickstart", "sh");
        assertFalse(sh.contains("pctl serve"), "the quickstart starts from a running broker");
        String topic = "orders" + TOPICS.incrementAndGet();
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        String script = sh.replace("sdk/java/setup\n", "").replace("sdk/java/target/pctl-sdk.jar:sdk/java/target/lib/*", cp)
                .replace("nats://127.0.0.1:4222", broker.url).replace("./pctl-data", broker.dir.resolve("data").toString()).replace(" payments", " " + topic);
        assertTrue(sh.contains("sdk/java/setup\n") && !script.contains("target/pctl-sdk.jar"), "the block was localized: " + script);
        ProcessBuilder pb = new ProcessBuilder("sh", "-e", "-c", script).directory(Repo.root().toFile()).redirectErrorStream(false);
        pb.environment().put("PATH", Broker.pctl().getParent() + java.io.File.pathSeparator + Path.of(System.getProperty("java.home"), "bin")
                + java.io.File.pathSeparator + System.getenv("PATH"));
        pb.environment().remove("PCTL_SERVER");
        pb.environment().remove("PCTL_CREDS");
        Path err = broker.dir.resolve(topic + "-quickstart.err");
        pb.redirectError(err.toFile());
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(5, TimeUnit.MINUTES));
        assertEquals(0, p.exitValue(), out + Files.readString(err));
        List<String> lines = List.of(out.split("\n"));
        List<String> recs = lines.stream().filter(l -> l.startsWith("partition ") && l.contains(" seq ")).toList();
        assertEquals(22, recs.size(), out);
        assertEquals(Set.of("1", "2"), recs.stream().map(l -> l.split(" ")[3]).collect(java.util.stream.Collectors.toSet()), "records of both epochs");
        for (String c : List.of("user-0", "user-1", "user-2")) {
            // The quickstart producer ran once per epoch: a key's records come epoch by epoch, in order.
            List<Integer> seen = new ArrayList<>();
            for (String l : recs) {
                if (l.contains(": " + c + " = ")) {
                    seen.add(Integer.parseInt(l.split(" ")[3]) * 100 + Integer.parseInt(l.substring(l.lastIndexOf(' ') + 1)));
                }
            }
            List<Integer> sorted = new ArrayList<>(seen);
            Collections.sort(sorted);
            assertEquals(sorted, seen, c);
        }
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("assigned partitions")), out);
        assertTrue(lines.stream().anyMatch(l -> l.startsWith("22 records; member")), out);
        // The README's Java block is the example's own code.
        String example = Files.readString(Repo.path("sdk/java/examples/ConsumerQuickstart.java"), StandardCharsets.UTF_8);
        for (String l : readmeBlock("Consumer quickstart", "java").split("\n")) {
            assertTrue(example.contains(l.trim()), "README line not in examples/ConsumerQuickstart.java: " + l);
        }
    }

    /** A key of the 2-partition topic that kafka-murmur2 puts in partition 1 (by pctl partition). */
    private static String keyOfPartition1() throws Exception {
        Set<String> hex = new HashSet<>();
        for (int i = 0; i < 50; i++) {
            hex.add(java.util.HexFormat.of().formatHex(("m" + i).getBytes(StandardCharsets.UTF_8)));
        }
        for (Map.Entry<String, Integer> e : Groups.placements(broker, hex, "kafka-murmur2", 2).entrySet()) {
            if (e.getValue() == 1) {
                return new String(java.util.HexFormat.of().parseHex(e.getKey()), StandardCharsets.UTF_8);
            }
        }
        throw new AssertionError("no key in partition 1");
    }

    /**
     * Publishes, around the partitioner, with a raw NATS client and the producer credential, a
     * record whose key belongs to partition 1 into partition 0 of a 2-partition topic, and one
     * whose Pctl-Key header is not base64. Returns the key.
     */
    static String publishMisplaced(Broker b, String topic, String key) throws Exception {
        try (PctlClient raw = PctlClient.connect(b.options(b.producer))) {
            JetStream js = raw.connection().jetStream();
            Headers h = new Headers();
            h.put("Pctl-Key", "b64:" + Base64.getEncoder().encodeToString(key.getBytes(StandardCharsets.UTF_8)));
            h.put("Pctl-Producer", "rogue");
            h.put("Pctl-Seq", "1");
            js.publish("pctl.data." + topic + ".1.0", h, "wrong-place".getBytes(StandardCharsets.UTF_8));
            Headers h2 = new Headers();
            h2.put("Pctl-Key", "not base64");
            h2.put("Pctl-Producer", "rogue");
            h2.put("Pctl-Seq", "2");
            js.publish("pctl.data." + topic + ".1.0", h2, "bad-key".getBytes(StandardCharsets.UTF_8));
        }
        return key;
    }

    @ParameterizedTest
    @ValueSource(strings = {"stop", "deliver", "skip"})
    void misplacedRecordsByPolicy(String policy) throws Exception {
        String topic = createTopic(2);
        String rogue = keyOfPartition1();
        // Keys of partition 0, by pctl partition.
        Set<String> hex = new HashSet<>();
        for (int i = 0; i < 40; i++) {
            hex.add(java.util.HexFormat.of().formatHex(("x" + i).getBytes(StandardCharsets.UTF_8)));
        }
        List<String> k0 = new ArrayList<>();
        for (Map.Entry<String, Integer> e : Groups.placements(broker, hex, "kafka-murmur2", 2).entrySet()) {
            if (e.getValue() == 0 && k0.size() < 5) {
                k0.add(new String(java.util.HexFormat.of().parseHex(e.getKey()), StandardCharsets.UTF_8));
            }
        }
        List<ProducerRecord> before = new ArrayList<>();
        List<ProducerRecord> after = new ArrayList<>();
        for (String k : k0) {
            before.add(ProducerRecord.keyed(k, "before"));
            after.add(ProducerRecord.keyed(k, "after"));
        }
        produce(broker, topic, null, before);
        publishMisplaced(broker, topic, rogue);
        produce(broker, topic, null, after);
        List<ConsumerRecord> seen = new CopyOnWriteArrayList<>();
        List<ConsumerRecord> got = new ArrayList<>();
        MisplacedRecordException err = null;
        ConsumerStats st;
        try (PctlClient c = consumerClient();
                Consumer cn = c.consumer(topic, ConsumerOptions.builder("mis-" + policy).fromBeginning(true).misplaced(MisplacedPolicy.parse(policy))
                        .onMisplaced(seen::add).build())) {
            try {
                long last = System.nanoTime();
                while (System.nanoTime() - last < TimeUnit.SECONDS.toNanos(3)) {
                    List<ConsumerRecord> rs = cn.poll(Duration.ofMillis(200));
                    if (!rs.isEmpty()) {
                        got.addAll(rs);
                        last = System.nanoTime();
                    }
                }
            } catch (MisplacedRecordException e) {
                err = e;
            }
            st = cn.stats();
        }
        List<String> values = got.stream().filter(r -> r.partition() == 0).map(ConsumerRecord::valueString).toList();
        assertTrue(st.misplaced() >= 1 && !seen.isEmpty() && seen.get(0).misplacement().expected() == 1, st + " " + seen);
        switch (policy) {
            case "stop":
                assertEquals(Collections.nCopies(5, "before"), values, "everything before the misplaced record, nothing after it");
                assertNotNull(err);
                assertEquals(0, err.partition());
                assertEquals(1, err.misplacement().expected());
                assertEquals(rogue, new String(err.key(), StandardCharsets.UTF_8));
                assertTrue(err.getMessage().contains("DELIVER") && err.getMessage().contains("partition 0"), err.getMessage());
                break;
            case "deliver":
                List<String> want = new ArrayList<>(Collections.nCopies(5, "before"));
                want.addAll(List.of("wrong-place", "bad-key"));
                want.addAll(Collections.nCopies(5, "after"));
                assertEquals(want, values);
                List<ConsumerRecord> flagged = got.stream().filter(r -> r.misplacement() != null).toList();
                assertEquals(List.of(1, -1), flagged.stream().map(r -> r.misplacement().expected()).toList());
                assertTrue(flagged.get(1).misplacement().reason().contains("not b64") && flagged.get(1).key() == null);
                assertNull(err);
                break;
            default:
                List<String> w = new ArrayList<>(Collections.nCopies(5, "before"));
                w.addAll(Collections.nCopies(5, "after"));
                assertEquals(w, values);
                assertNull(err);
        }
    }

    @Test
    void aMemberWhoseConnectionsAreCutGoesOn() throws Exception {
        // §6.7: the member's connections (jnats' and the records' own) are cut again and again
        // while records arrive; every record comes, in order, and no partition is given up for
        // it (duplicates only after a crash: a cut is not one).
        String topic = createTopic(3);
        try (CutProxy proxy = new CutProxy(broker.url);
                PctlClient c = PctlClient.connect(ClientOptions.builder().server(proxy.url).creds(broker.consumer).build());
                Consumer cn = c.consumer(topic, ConsumerOptions.builder("cut").fromBeginning(true).build())) {
            List<ConsumerRecord> got = new ArrayList<>();
            for (int round = 0; round < 8; round++) {
                produce(broker, topic, null, rounds(round * 10, round * 10 + 10, 12));
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(700);
                while (System.nanoTime() < until) {
                    got.addAll(cn.poll(Duration.ofMillis(100)));
                }
                if (round == 3) {
                    // Writes applied, their replies lost: the member's commits and lease renewals
                    // reach the group state while it hears nothing back for longer than its
                    // requests wait (6 s), then the connections drop with the replies.
                    proxy.hold(true);
                    long t = System.nanoTime() + TimeUnit.SECONDS.toNanos(8);
                    while (System.nanoTime() < t) {
                        got.addAll(cn.poll(Duration.ofMillis(100)));
                    }
                }
                proxy.cut();
            }
            got.addAll(drain(cn, 960 - got.size(), Duration.ofSeconds(30)));
            assertTrue(proxy.cuts.get() >= 8);
            assertEquals(960, got.size(), "every record, once: " + cn.stats());
            assertEquals(960, new HashSet<>(got.stream().map(r -> r.partition() + "/" + r.sequence()).toList()).size());
            assertEquals(List.of(), orderViolations(of(got)));
            assertEquals(0, cn.stats().lost(), "no partition given up for a cut connection: " + cn.stats());
        }
    }

    @Test
    void readersRecoverWhenTheirConsumersAreDeleted() throws Exception {
        // §6.7: a hostile (or unlucky) client deletes the member's server-side consumers again
        // and again while records arrive; every record still comes, once and in order.
        String topic = createTopic(2);
        AtomicBoolean stopDeleting = new AtomicBoolean();
        AtomicInteger deleted = new AtomicInteger();
        try (PctlClient admin = PctlClient.connect(broker.options(broker.admin)); PctlClient c = consumerClient();
                Consumer cn = c.consumer(topic, ConsumerOptions.builder("victim").fromBeginning(true).build())) {
            JetStreamManagement jsm = admin.connection().jetStreamManagement();
            Thread hostile = new Thread(() -> {
                while (!stopDeleting.get()) {
                    for (int q = 0; q < 2; q++) {
                        try {
                            for (String name : jsm.getConsumerNames("PCTL_" + topic + "_" + q)) {
                                if (jsm.deleteConsumer("PCTL_" + topic + "_" + q, name)) {
                                    deleted.incrementAndGet();
                                }
                            }
                        } catch (Exception e) {
                            System.err.println("hostile: " + e); // raced with the member
                        }
                    }
                    try {
                        Thread.sleep(700);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            hostile.start();
            List<ConsumerRecord> got = new ArrayList<>();
            for (int round = 0; round < 8; round++) {
                produce(broker, topic, null, rounds(round * 10, round * 10 + 10, 10));
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(800);
                while (System.nanoTime() < until) {
                    got.addAll(cn.poll(Duration.ofMillis(100)));
                }
            }
            got.addAll(drain(cn, 800 - got.size(), Duration.ofSeconds(30)));
            stopDeleting.set(true);
            hostile.join();
            assertTrue(deleted.get() > 0, "the hostile client deleted consumers");
            assertEquals(800, got.size(), "every record, once: " + cn.stats());
            assertEquals(800, new HashSet<>(got.stream().map(r -> r.partition() + "/" + r.sequence()).toList()).size());
            assertEquals(List.of(), orderViolations(of(got)));
            assertTrue(cn.stats().readerRecoveries() > 0, "readers re-created their consumers: " + cn.stats());
        }
    }

    // ---- parents first (spec/protocol.md §6.7) --------------------------------------------------

    private static final int PF_KEYS = 40;

    /** A first delivery: where the broker stored it, its key and value. */
    private record D(int epoch, int partition, long seq, String key, int value) {}

    /** One take of the hook: the member, its rebalance, and the group's [partition, position]s. */
    private record Take(String member, int round, List<long[]> group) {}

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
    @ParameterizedTest(name = "gating={0}")
    @ValueSource(booleans = {true, false})
    void parentFirstReplayKeepsOrderAndTakesParentsFirst(boolean gating) throws Exception {
        String topic = createTopic(2);
        produce(broker, topic, null, rounds(0, 40, PF_KEYS));
        broker.pctlOk(null, "topic", "repartition", topic, "--partitions", "4");
        produce(broker, topic, null, rounds(40, 55, PF_KEYS));
        broker.pctlOk(null, "topic", "repartition", topic, "--partitioner", "jump");
        produce(broker, topic, null, rounds(55, 70, PF_KEYS));
        int total = 70 * PF_KEYS;

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
    /**
     * spec/protocol.md §6.3: after a refused compare-and-set, a member that cannot read the key back
     * (close() interrupting the commit, a server that does not answer) does not know whether the
     * refusal was its own unanswered write or a takeover, and must not count the partition as
     * taken: the next commit asks again. Every commit's answer is lost and the first three
     * read-backs fail; the member keeps both partitions (no loss, every record once) and its close
     * releases them. (A clean-clone CI run lost partition 0 this way: close() interrupted the
     * commit's read-back, the partition was counted lost, and its lease was never released.)
     */
    @Test
    void anUnreadableKeyAfterARefusedCommitIsNotATakeover() throws Exception {
        String topic = createTopic(2);
        int n = 60;
        List<ProducerRecord> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            recs.add(ProducerRecord.keyed("k" + (i % 5), Integer.toString(i)));
        }
        produce(broker, topic, null, recs);
        List<String> logs = new CopyOnWriteArrayList<>();
        AtomicInteger unread = new AtomicInteger();
        try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
            ConsumerOptions o = ConsumerOptions.builder("unread").fromBeginning(true).commitInterval(Duration.ofMillis(20))
                    .sessionTimeout(Duration.ofSeconds(30)).logger(logs::add).build();
            Consumer cn = c.consumer(topic, o);
            cn.loseCommitAnswerForTest = () -> true;
            cn.failReadBackForTest = () -> unread.incrementAndGet() <= 3;
            Set<String> seen = new HashSet<>();
            int got = 0;
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while ((got < n || unread.get() <= 4) && System.nanoTime() < deadline) {
                for (ConsumerRecord r : cn.poll(Duration.ofMillis(200))) {
                    got++;
                    assertTrue(seen.add(r.valueString()), () -> "delivered twice: " + r.valueString() + "; log:\n" + String.join("\n", logs));
                }
            }
            assertEquals(n, got, "every record delivered once");
            assertTrue(unread.get() > 4, () -> "the read-back hook never ran past its failures: " + unread.get());
            String topicId = c.topic(topic).id();
            cn.close();
            assertTrue(logs.stream().noneMatch(l -> l.contains(": lost (")), () -> "a partition counted as taken over:\n" + String.join("\n", logs));
            assertTrue(logs.stream().anyMatch(l -> l.contains("could not be read back; retrying")), () -> "no refused commit met an unreadable key:\n" + String.join("\n", logs));
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            for (int q = 0; q < 2; q++) {
                GroupKv.Entry e = kv.get(topicId + ".unread.p." + q);
                Map<?, ?> st = e == null ? Map.of() : (Map<?, ?>) Json.parse(new String(e.value(), StandardCharsets.UTF_8));
                assertEquals("", st.containsKey("owner") ? st.get("owner") : "", () -> "partition still leased after the release; log:\n" + String.join("\n", logs));
            }
        }
    }

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
            assertEquals(Map.of(0, "", 1, ""), owners, () -> "partitions still leased after the release; the member's log:\n" + String.join("\n", logs));
        }
        assertTrue(logs.stream().anyMatch(l -> l.contains("releasing from revision")), "the release never met its own unanswered commit");
    }
}
