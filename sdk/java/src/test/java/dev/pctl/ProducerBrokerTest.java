package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.cli.Produce;
import dev.pctl.internal.Json;
import dev.pctl.runtime.Plugin;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.NKey;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The producer against a real broker ({@code pctl serve}, built from this repository), checked
 * with the Go tools: records land where {@code pctl partition} says, {@code pctl consume} delivers
 * every acknowledged record once and each key in send order, across an epoch change made with
 * {@code pctl topic expand} in the middle of a run; and the errors a user meets.
 */
@Tag("broker")
class ProducerBrokerTest {
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

    private static void createTopic(String name, int partitions) throws Exception {
        broker.pctlOk(null, "topic", "create", name, "--partitions", Integer.toString(partitions), "--partitioner", "kafka-murmur2");
    }

    /** What {@code pctl partition} (the Go host, wazero) says for each key. */
    private static List<Integer> pctlPartition(List<byte[]> keys, int n) throws Exception {
        StringBuilder in = new StringBuilder();
        for (byte[] k : keys) {
            in.append(HexFormat.of().formatHex(k)).append('\n');
        }
        String out = broker.pctlOffline(in.toString(), "partition", "--plugin", "kafka-murmur2", "--partitions", Integer.toString(n), "--hex");
        List<Integer> ps = new ArrayList<>();
        for (String l : out.split("\n")) {
            if (!l.isEmpty()) {
                ps.add(Integer.parseInt(l.trim()));
            }
        }
        assertEquals(keys.size(), ps.size(), "one partition per key from pctl partition");
        return ps;
    }

    /** Every record a new group gets, as {@code pctl consume --format jsonl} prints them. */
    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> consume(String topic, String group) throws Exception {
        String out = broker.pctlOk(null, "consume", topic, "--group", group, "--from-beginning", "--format", "jsonl", "--idle-exit", "2s");
        List<Map<String, Object>> recs = new ArrayList<>();
        for (String l : out.split("\n")) {
            if (!l.isBlank()) {
                recs.add((Map<String, Object>) Json.parse(l));
            }
        }
        return recs;
    }

    private static long num(Map<String, Object> r, String k) {
        return (Long) r.get(k);
    }

    @Test
    void recordsLandWherePctlPartitionSays() throws Exception {
        createTopic("placement", 5);
        List<ProducerRecord> sent = new ArrayList<>();
        sent.add(ProducerRecord.keyed(new byte[0], "empty key".getBytes(StandardCharsets.UTF_8)));
        for (int round = 0; round < 3; round++) {
            for (int k = 0; k < 40; k++) {
                sent.add(ProducerRecord.keyed("k" + k, "r" + round));
            }
            sent.add(ProducerRecord.keyless("keyless " + round));
        }
        List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer));
                Producer p = c.producer("placement", ProducerOptions.builder().id("placement-1").build())) {
            for (ProducerRecord r : sent) {
                fs.add(p.send(r));
            }
            p.flush();
            assertEquals(0, p.resent());
        }
        List<byte[]> keys = new ArrayList<>();
        List<Integer> keyed = new ArrayList<>();
        for (int i = 0; i < sent.size(); i++) {
            if (sent.get(i).hasKey()) {
                keys.add(sent.get(i).key());
                keyed.add(i);
            }
        }
        List<Integer> want = pctlPartition(keys, 5);
        Map<Long, RecordMetadata> bySeq = new HashMap<>();
        for (int i = 0; i < sent.size(); i++) {
            RecordMetadata md = fs.get(i).join();
            assertEquals(i + 1, md.producerSeq(), "Pctl-Seq counts records from 1 in send order");
            assertEquals(1, md.epoch());
            assertFalse(md.duplicate());
            bySeq.put(md.producerSeq(), md);
        }
        for (int j = 0; j < keyed.size(); j++) {
            assertEquals((int) want.get(j), fs.get(keyed.get(j)).join().partition(), "record " + (keyed.get(j) + 1) + ": the partition pctl partition computes");
        }

        List<Map<String, Object>> got = consume("placement", "g-placement");
        assertEquals(sent.size(), got.size(), "every acknowledged record is delivered once");
        Map<String, Long> lastPseq = new HashMap<>();
        for (Map<String, Object> r : got) {
            long pseq = num(r, "pseq");
            ProducerRecord rec = sent.get((int) pseq - 1);
            RecordMetadata md = bySeq.get(pseq);
            assertEquals("placement-1", r.get("producer"));
            assertEquals((long) md.partition(), num(r, "partition"));
            if (md.sequence() > 0) {
                assertEquals(md.sequence(), num(r, "seq"), "a reported stream sequence is where the record is");
            }
            assertEquals(new String(rec.value(), StandardCharsets.UTF_8), r.get("value"));
            if (rec.hasKey()) {
                assertEquals(new String(rec.key(), StandardCharsets.UTF_8), r.get("key"), "Pctl-Key carries the key (b64:, the empty key as b64:)");
                String k = (String) r.get("key");
                Long prev = lastPseq.put(k, pseq);
                assertTrue(prev == null || prev < pseq, "key " + k + ": delivered in send order");
            } else {
                assertFalse(r.containsKey("key") || r.containsKey("key_b64"), "a keyless record has no Pctl-Key header");
            }
        }
    }

    @Test
    void epochChangeInTheMiddleOfARun() throws Exception {
        createTopic("grow", 3);
        int keysN = 40;
        int total = 3000;
        List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
        List<ProducerRecord> sent = new ArrayList<>();
        for (int i = 0; i < total; i++) {
            sent.add(ProducerRecord.keyed("key-" + (i % keysN), Integer.toString(i)));
        }
        long resent;
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer));
                Producer p = c.producer("grow", ProducerOptions.builder().id("grow-1").maxInFlight(64).build())) {
            for (int i = 0; i < 500; i++) {
                fs.add(p.send(sent.get(i)));
            }
            p.flush();
            // Keep sending, at a pace that leaves records in flight, while the topic grows.
            Thread sender = new Thread(() -> {
                for (int i = 500; i < total; i++) {
                    synchronized (fs) {
                        fs.add(p.send(sent.get(i)));
                    }
                    if (i % 25 == 0) {
                        try {
                            Thread.sleep(2);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                }
            });
            sender.start();
            Thread.sleep(100);
            broker.pctlOk(null, "topic", "expand", "grow", "--partitions", "7");
            sender.join();
            p.flush();
            assertEquals(2, p.epoch(), "the producer moved to the new epoch");
            resent = p.resent();
        }
        assertEquals(total, fs.size());
        List<byte[]> distinct = new ArrayList<>();
        for (int k = 0; k < keysN; k++) {
            distinct.add(("key-" + k).getBytes(StandardCharsets.UTF_8));
        }
        List<Integer> under3 = pctlPartition(distinct, 3);
        List<Integer> under7 = pctlPartition(distinct, 7);
        int[] perEpoch = new int[3];
        for (int i = 0; i < total; i++) {
            RecordMetadata md = fs.get(i).join();
            int k = i % keysN;
            perEpoch[md.epoch()]++;
            int want = md.epoch() == 1 ? under3.get(k) : under7.get(k);
            assertEquals(want, md.partition(), "record " + (i + 1) + " of epoch " + md.epoch() + ": the partition pctl partition computes for that epoch");
        }
        System.out.printf("epochChangeInTheMiddleOfARun: %d records in epoch 1, %d in epoch 2, %d re-sent after the fence%n", perEpoch[1], perEpoch[2], resent);
        assertTrue(perEpoch[1] >= 500 && perEpoch[2] > 0, "records in both epochs: " + perEpoch[1] + " and " + perEpoch[2]);
        assertTrue(resent > 0, "the fence made the producer re-send records under epoch 2");

        List<Map<String, Object>> got = consume("grow", "g-grow");
        assertEquals(total, got.size(), "every acknowledged record, once");
        Map<String, Long> last = new HashMap<>();
        for (Map<String, Object> r : got) {
            String k = (String) r.get("key");
            long v = Long.parseLong((String) r.get("value"));
            Long prev = last.put(k, v);
            assertTrue(prev == null || prev < v, k + ": " + v + " delivered after " + prev + ": per-key order must hold across the epoch change");
        }
    }

    @Test
    void lostAcknowledgementsStoreNothingTwice() throws Exception {
        // An acknowledgement timeout of 1 ms makes most batches time out (spec/protocol.md
        // §5.1.2): the producer settles each (closes it with an EOB, or reads the partition back)
        // and re-sends the rest with the same Nats-Msg-Id; a re-sent record that was stored after
        // all is skipped as a duplicate. Halfway through, the topic grows: batches of the fenced
        // epoch are settled in their old partition (up to the boundary) and the rest re-sent
        // under the new epoch.
        createTopic("lossy", 2);
        ClientOptions o = ClientOptions.builder().server(broker.url).creds(broker.producer).ackTimeout(Duration.ofMillis(1)).build();
        int total = 300;
        List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
        long resent;
        long settled;
        try (PctlClient c = PctlClient.connect(o); Producer p = c.producer("lossy", ProducerOptions.builder().id("lossy-1").build())) {
            for (int i = 0; i < total; i++) {
                fs.add(p.send(ProducerRecord.keyed("key-" + (i % 7), Integer.toString(i))));
                if (i == total / 2) {
                    broker.pctlOk(null, "topic", "expand", "lossy", "--partitions", "5");
                }
            }
            p.flush();
            resent = p.resent();
            settled = p.settled();
        }
        int duplicates = 0;
        for (CompletableFuture<RecordMetadata> f : fs) {
            duplicates += f.join().duplicate() ? 1 : 0;
        }
        System.out.printf("lostAcknowledgementsStoreNothingTwice: %d of %d acknowledged as duplicates of a stored copy, %d batches settled, %d re-sent after the fence%n",
                duplicates, total, settled, resent);
        assertTrue(settled > 0, "the 1 ms acknowledgement timeout made the producer settle batches");
        List<Map<String, Object>> got = consume("lossy", "g-lossy");
        assertEquals(total, got.size(), "every record stored exactly once");
        Map<String, Long> last = new HashMap<>();
        for (Map<String, Object> r : got) {
            long v = Long.parseLong((String) r.get("value"));
            Long prev = last.put((String) r.get("key"), v);
            assertTrue(prev == null || prev < v, r.get("key") + ": per-key order");
        }
    }

    @Test
    void theQuickstartExampleRuns() throws Exception {
        createTopic("orders", 6);
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        Path java = Path.of(System.getProperty("java.home"), "bin", "java");
        ProcessBuilder pb = new ProcessBuilder(java.toString(), "-cp", cp, Repo.path("sdk/java/examples/Quickstart.java").toString(), "orders")
                .redirectErrorStream(true);
        pb.environment().put("PCTL_SERVER", broker.url);
        pb.environment().put("PCTL_CREDS", broker.producer.toString());
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(2, TimeUnit.MINUTES));
        assertEquals(0, p.exitValue(), out);
        assertTrue(out.contains("record 11: partition"), out);
        int user1 = NativeMurmur2.partition("user-1".getBytes(StandardCharsets.UTF_8), 6);
        assertTrue(out.contains("user-1 goes to partition " + user1 + " of 6"), out);
    }

    @Test
    void anOversizedRecordFailsAlone() throws Exception {
        // 2 MiB: under the server's 16 MiB max_payload, over the streams' 1 MiB record size. The
        // stream refuses it (a per-record failure, never retried); the records around it, in the
        // same partition, are stored in order.
        createTopic("big", 1);
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer)); Producer p = c.producer("big")) {
            CompletableFuture<RecordMetadata> before = p.send(ProducerRecord.keyed("k", "before"));
            CompletableFuture<RecordMetadata> big = p.send(ProducerRecord.keyed("k".getBytes(StandardCharsets.UTF_8), new byte[2 << 20]));
            CompletableFuture<RecordMetadata> after = p.send(ProducerRecord.keyed("k", "after"));
            p.flush();
            ExecutionException e = assertThrows(ExecutionException.class, big::get);
            BadRequestException bad = (BadRequestException) e.getCause();
            assertTrue(bad.getMessage().contains("record 2"), bad.getMessage());
            // Stream sequences 1 and 2 (0: stored in one fast batch with the next, not reported).
            assertTrue(before.join().sequence() == 1 || before.join().sequence() == 0, "before: " + before.join());
            assertEquals(2, after.join().sequence());
        }
    }

    @Test
    void aDeletedTopicFailsTheProducer() throws Exception {
        createTopic("doomed", 2);
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer))) {
            Producer p = c.producer("doomed");
            p.send(ProducerRecord.keyed("k", "1")).join();
            broker.pctlOk(null, "topic", "delete", "doomed");
            // The topic event makes the producer re-read the descriptor: it may have failed before
            // this send (which then throws at once) or fail the record it took.
            CompletableFuture<RecordMetadata> f = null;
            NotFoundException nf = null;
            try {
                f = p.send(ProducerRecord.keyed("k", "2"));
            } catch (NotFoundException e) {
                nf = e;
            }
            if (f != null) {
                CompletableFuture<RecordMetadata> ff = f;
                ExecutionException e = assertThrows(ExecutionException.class, () -> ff.get(60, TimeUnit.SECONDS));
                nf = (NotFoundException) e.getCause();
            }
            assertTrue(nf.getMessage().contains("doomed"), nf.getMessage());
            assertThrows(NotFoundException.class, p::close, "the producer failed for good");
        }
    }

    @Test
    void unknownTopicAndBadNames() throws Exception {
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer))) {
            NotFoundException e = assertThrows(NotFoundException.class, () -> c.producer("no-such-topic"));
            assertEquals(ErrorCode.NOT_FOUND, e.code());
            assertEquals("not_found", e.wireCode());
            assertTrue(e.getMessage().contains("no-such-topic"), e.getMessage());
            assertThrows(BadRequestException.class, () -> c.topic("bad name!"));
            assertThrows(NotFoundException.class, () -> c.plugin("00".repeat(32)));
            UnavailableException none = assertThrows(UnavailableException.class, () -> c.request("pctl.api.no.such.op", new byte[0]));
            assertTrue(none.getMessage().contains("no broker answers pctl.api.no.such.op"), none.getMessage());
        }
    }

    @Test
    void consumerCredentialsCannotProduce() throws Exception {
        createTopic("guarded", 2);
        // A long acknowledgement timeout: the error must come from the server's permission
        // violation, not from a timeout.
        ClientOptions o = ClientOptions.builder().server(broker.url).creds(broker.consumer).ackTimeout(Duration.ofMinutes(2)).build();
        try (PctlClient c = PctlClient.connect(o)) {
            Producer p = c.producer("guarded");
            CompletableFuture<RecordMetadata> f = p.send(ProducerRecord.keyed("k", "v"));
            ExecutionException ee = assertThrows(ExecutionException.class, () -> f.get(60, TimeUnit.SECONDS));
            PermissionDeniedException e = (PermissionDeniedException) ee.getCause();
            assertEquals(ErrorCode.PERMISSION, e.code());
            assertTrue(e.subject().startsWith("pctl.data.guarded.1."), e.subject());
            assertEquals("producer or admin", e.role());
            assertTrue(e.getMessage().contains("producer.nk"), e.getMessage());
            assertThrows(PermissionDeniedException.class, () -> p.send(ProducerRecord.keyed("k", "v2")), "the producer failed for good");
            assertThrows(PermissionDeniedException.class, p::close);
        }
    }

    @Test
    void connectErrors() throws Exception {
        Path dir = Files.createTempDirectory(broker.dir, "creds");
        Path stranger = dir.resolve("stranger.nk");
        Files.writeString(stranger, new String(NKey.createUser(new SecureRandom()).getSeed()) + "\n");
        PermissionDeniedException refused = assertThrows(PermissionDeniedException.class, () -> PctlClient.connect(broker.options(stranger)));
        assertTrue(refused.getMessage().contains("refused the credentials"), refused.getMessage());
        Path garbage = dir.resolve("garbage.nk");
        Files.writeString(garbage, "not a seed\n");
        assertThrows(BadRequestException.class, () -> PctlClient.connect(broker.options(garbage)));
        assertThrows(BadRequestException.class, () -> PctlClient.connect(broker.options(dir.resolve("missing.nk"))));
        UnavailableException down = assertThrows(UnavailableException.class,
                () -> PctlClient.connect(ClientOptions.builder().server("nats://127.0.0.1:1").creds(broker.producer).build()));
        assertTrue(down.getMessage().contains("pctl serve"), down.getMessage());
    }

    @Test
    void pluginsAreVerifiedAndCachedByDigest() throws Exception {
        createTopic("plugins", 2);
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer))) {
            TopicDescriptor d = c.topic("plugins");
            TopicDescriptor.PartitionerRef ref = d.current().partitioner();
            assertEquals("kafka-murmur2", ref.name());
            byte[] bytes = c.plugin(ref.digest());
            assertEquals(ref.digest(), Plugin.sha256(bytes));
            assertArrayEquals(Files.readAllBytes(Repo.path("plugins/builtin/kafka-murmur2.wasm")), bytes, "the broker's built-in is the repository's module");
            assertSame(bytes, c.plugin(ref.digest()), "cached by digest");
            Partitioner p = c.partitioner(ref);
            assertSame(p, c.partitioner(ref));
            assertEquals(NativeMurmur2.partition("x".getBytes(StandardCharsets.UTF_8), 2), p.partition("x".getBytes(StandardCharsets.UTF_8), 2));
        }
    }

    @Test
    void theProduceCommand() throws Exception {
        createTopic("cli", 3);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        String in = "a\t1\nb\t2\nkeyless\n\tempty key\na\t3";
        int st = Produce.run(new String[] {"--server", broker.url, "--creds", broker.producer.toString(), "--topic", "cli", "--producer-id", "cli-1"},
                new ByteArrayInputStream(in.getBytes(StandardCharsets.UTF_8)), out, new PrintStream(err, true, StandardCharsets.UTF_8));
        assertEquals(0, st, err.toString(StandardCharsets.UTF_8));
        String[] lines = out.toString(StandardCharsets.UTF_8).split("\n");
        assertEquals(5, lines.length);
        boolean[] seen = new boolean[6];
        for (String l : lines) {
            @SuppressWarnings("unchecked")
            Map<String, Object> r = (Map<String, Object>) Json.parse(l);
            assertEquals(Boolean.TRUE, r.get("acked"), l);
            assertEquals(1L, r.get("epoch"));
            assertNotNull(r.get("partition"));
            assertTrue((Long) r.get("seq") >= 0, "a stream sequence, or 0: stored, not reported (spec/protocol.md §5.1.2)");
            seen[((Long) r.get("pseq")).intValue()] = true;
        }
        for (int i = 1; i <= 5; i++) {
            assertTrue(seen[i], "pseq " + i);
        }
        List<Map<String, Object>> got = consume("cli", "g-cli");
        assertEquals(5, got.size());
        for (Map<String, Object> r : got) {
            if (num(r, "pseq") == 4) {
                assertEquals("", r.get("key"), "the empty key before a tab is a key");
            }
            if (num(r, "pseq") == 3) {
                assertFalse(r.containsKey("key"), "a line without a tab is keyless");
            }
        }

        ByteArrayOutputStream out2 = new ByteArrayOutputStream();
        int st2 = Produce.run(new String[] {"--server", broker.url, "--creds", broker.consumer.toString(), "--topic", "cli"},
                new ByteArrayInputStream("x\ty\n".getBytes(StandardCharsets.UTF_8)), out2, new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
        assertEquals(1, st2);
        String l = out2.toString(StandardCharsets.UTF_8).trim();
        assertTrue(l.contains("\"acked\": false") && l.contains("permission denied"), l);

        int st3 = Produce.run(new String[] {"--server", broker.url, "--creds", broker.producer.toString(), "--topic", "nope"},
                new ByteArrayInputStream(new byte[0]), new ByteArrayOutputStream(), new PrintStream(new ByteArrayOutputStream(), true, StandardCharsets.UTF_8));
        assertEquals(2, st3, "an unknown topic is a usage error");
    }

    /**
     * before: other messages stored before the record; stored: whether the record is stored
     * (after them); after: messages stored after it, deleted when gone; infoLast: the last
     * sequence the stream info named (a lagging member's), counted from the stream's start.
     */
    private record ReadBackCase(String name, int before, boolean stored, int after, boolean gone, long infoLast) {}

    /**
     * The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
     * leader change (confirm) gives every record it does not find a new deduplication id, so a stored
     * record the read misses is stored a second time. The read must not end at the stream info's last
     * sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with
     * its own state, and a member that lags names a last sequence below records already stored. Here
     * the read (the sink's readBack) is given such a last sequence against a real broker, whose
     * STREAM.MSG.GET answers stand for the leader's: the record stored above it must be found. The
     * same when the stream's last message is gone (the leader names no last message: the read goes on
     * with next_by_subj), and a record that is not stored must not be found. As the Go producer's
     * TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go).
     */
    @Test
    void readBackReachesTheStreamLeadersEnd() throws Exception {
        List<ReadBackCase> cases = List.of(
                new ReadBackCase("info-lags-behind-the-record", 3, true, 0, false, 3),
                new ReadBackCase("info-lags-last-message-gone", 3, true, 2, true, 3),
                new ReadBackCase("empty-stream-info-lags", 0, true, 0, false, 0),
                new ReadBackCase("not-stored", 3, false, 1, true, 3),
                new ReadBackCase("info-current", 3, true, 1, false, 5));
        List<String> failures = new ArrayList<>();
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                PctlClient admin = PctlClient.connect(broker.options(broker.admin))) {
            for (int n = 0; n < cases.size(); n++) {
                ReadBackCase tc = cases.get(n);
                String topic = "rbj" + n;
                broker.pctlOk(null, "topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2");
                try (Producer p = pc.producer(topic, ProducerOptions.builder().id(topic + "-p").build())) {
                    int epoch = pc.topic(topic).current().number();
                    String stream = "PCTL_" + topic + "_0";
                    String subject = "pctl.data." + topic + "." + epoch + ".0";
                    long start = lastSeq(pc.connection(), stream);
                    for (int i = 0; i < tc.before(); i++) {
                        publish(pc.connection(), subject, ("other " + i).getBytes(StandardCharsets.UTF_8), null);
                    }
                    long floor = start + tc.before();
                    Object pd = p.recordForTest(ProducerRecord.keyed("k7", "value 7"));
                    long at = -1;
                    if (tc.stored()) {
                        at = publish(pc.connection(), subject, "value 7".getBytes(StandardCharsets.UTF_8), Producer.headerBlockForTest(pd));
                    }
                    List<Long> afters = new ArrayList<>();
                    for (int i = 0; i < tc.after(); i++) {
                        afters.add(publish(pc.connection(), subject, ("after " + i).getBytes(StandardCharsets.UTF_8), null));
                    }
                    if (tc.gone()) {
                        for (long seq : afters) {
                            Map<String, Object> r = request(admin.connection(), "$JS.API.STREAM.MSG.DELETE." + stream, "{\"seq\":" + seq + ",\"no_erase\":true}");
                            assertEquals(Boolean.TRUE, r.get("success"), "delete message " + seq + " of " + stream + ": " + r);
                        }
                        // The case this stands for: the leader names no last message, so the read goes on.
                        Map<String, Object> last = request(pc.connection(), "$JS.API.STREAM.MSG.GET." + stream, "{\"last_by_subj\":\">\"}");
                        assertEquals(10037L, JsApi.num(JsApi.obj(last.get("error")).get("err_code")), tc.name() + ": the stream leader still names a last message: " + last);
                    }
                    long known = start + tc.infoLast();
                    long got = p.readBackForTest(epoch, 0, floor, known, pd);
                    if (tc.stored() && got < 0) {
                        failures.add(tc.name() + ": the record stored at " + at + " was not found by a read whose stream info named last sequence " + known
                                + ": confirm would give it a new id and it would be stored twice");
                    } else if (tc.stored() && got != at) {
                        failures.add(tc.name() + ": the record stored at " + at + " was found at " + got);
                    } else if (!tc.stored() && got >= 0) {
                        failures.add(tc.name() + ": a record that is not stored was found at " + got);
                    }
                }
            }
        }
        assertTrue(failures.isEmpty(), String.join("\n", failures));
    }

    /** The spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs. */
    private static final int SPEC_SILENT_EOBS = 3;

    /**
     * A batch whose EOB is never answered (spec/protocol.md §5.1.2, settle 1): settling a batch that
     * got no reply, the sink closes it with an EOB, and nats-server 2.15.2 may never answer that EOB.
     * A fast batch whose commit waits for proposals a stream's replica or placement change dropped
     * stays "committing" on the server for good and every later message of it is skipped without a
     * reply, while the stream takes new batches. After 3 unanswered EOBs the sink must read the
     * partition back rather than close the batch forever. Here the stream is a real broker's
     * partition stream holding the batch's first 2 of 3 records, and the sink's EOB subject has a
     * real subscriber that never answers, standing for the server's committing batch: settle must
     * finish, acknowledge the 2 records and queue the third to be sent again under its old id. As the
     * Go producer's TestSettleReadsBackWhenTheEOBIsNeverAnswered (internal/produce/silenteob_test.go).
     */
    @Test
    void settleReadsBackWhenTheEobIsNeverAnswered() throws Exception {
        String topic = "silenteob";
        try (Settling t = Settling.open(topic)) {
            Producer p = t.p;
            // The EOB subject: a real subscriber takes every EOB and answers none.
            String silent = "pctl.data." + topic + ".silent.0";
            AtomicInteger eobs = new AtomicInteger();
            Dispatcher dispatcher = t.listen(silent, eobs);

            long floor = t.publish("someone else's", null);
            List<Object> recs = new ArrayList<>();
            List<String> ids = new ArrayList<>();
            Map<Integer, Object> outcome = new ConcurrentHashMap<>(); // index -> RecordMetadata or PctlException
            for (int n = 1; n <= 3; n++) {
                int i = n - 1;
                Object pd = p.recordForTest(ProducerRecord.keyed("k" + n, "value " + n),
                        (md, err) -> outcome.put(i, err != null ? err : md));
                recs.add(pd);
                ids.add(new String(Producer.headerBlockForTest(pd), StandardCharsets.UTF_8));
            }
            long[] at = new long[2];
            for (int i = 0; i < 2; i++) { // the server stored the batch's first two records
                at[i] = t.publish("value " + (i + 1), Producer.headerBlockForTest(recs.get(i)));
            }

            long start = System.nanoTime();
            Producer.SettledForTest r = p.settleForTest(t.epoch, 0, floor, silent, recs, Duration.ofSeconds(15));
            long ms = (System.nanoTime() - start) / 1_000_000;
            dispatcher.unsubscribe(silent);
            assertTrue(r.finished(), "settle did not finish within 15 s after " + eobs.get()
                    + " unanswered EOBs: a batch the server never answers must be read back, not closed forever");
            assertNull(r.error(), "settle failed: " + r.error());
            assertFalse(r.fenced(), "settle says the partition was fenced");
            assertTrue(eobs.get() > 0, "settle read back without closing the batch first");
            assertTrue(eobs.get() <= SPEC_SILENT_EOBS, eobs.get() + " EOBs sent before reading back; the spec allows " + SPEC_SILENT_EOBS);
            assertEquals(1, r.queue().size(), "to re-send: " + r.queue().size() + " records; want only the third");
            assertSame(recs.get(2), r.queue().get(0), "the record to re-send is not the third");
            assertEquals(ids.get(2), new String(Producer.headerBlockForTest(r.queue().get(0)), StandardCharsets.UTF_8),
                    "the third record is re-sent under new headers; it must keep its old id");
            p.flush(Duration.ofSeconds(10)); // the callbacks have run
            for (int i = 0; i < 2; i++) {
                assertTrue(outcome.get(i) instanceof RecordMetadata, "record " + (i + 1) + " stored at " + at[i] + ": " + outcome.get(i) + "; want it acknowledged");
            }
            assertEquals(at[1], ((RecordMetadata) outcome.get(1)).sequence(), "record 2 stored at " + at[1]);
            assertFalse(outcome.get(2) instanceof RecordMetadata, "record 3, not stored, was acknowledged: " + outcome.get(2));
            System.out.println("settled after " + eobs.get() + " unanswered EOBs in " + ms + " ms");
        }
    }

    /**
     * A record re-sent alone (its first send was stored, but its answer lost) is a one-record batch
     * the server deduplicates. Its flow ack counts the duplicate as persisted, so the sink
     * acknowledges the record then; the batch's PubAck that follows says "duplicate"
     * (spec/protocol.md §5.1.1), which is an anomaly, and settling it must not acknowledge the record
     * a second time: the PubAck adds nothing, and settle reads nothing from the stream for it. The
     * partition stream holds the record at the sequence the PubAck names. As the Go producer's
     * TestDuplicatePubAckAfterAFlowAckFinishesOnce (internal/produce/dupack_test.go).
     */
    @Test
    void duplicatePubAckAfterAFlowAckFinishesOnce() throws Exception {
        try (Settling t = Settling.open("dupack")) {
            Producer p = t.p;
            long floor = lastSeq(t.pc.connection(), t.stream);
            List<Object> calls = new CopyOnWriteArrayList<>(); // RecordMetadata or PctlException, one per callback
            Object pd = p.recordForTest(ProducerRecord.keyless("value 1"), (md, err) -> calls.add(err != null ? err : md));
            long at = t.publish("value 1", Producer.headerBlockForTest(pd)); // the first send, stored
            // Every read of the partition stream's messages (a real subscriber beside the server's).
            AtomicInteger gets = new AtomicInteger();
            Dispatcher dispatcher = t.listen("$JS.API.STREAM.MSG.GET." + t.stream, gets);

            Producer.SettledForTest r = p.settleDuplicatePubAckForTest(t.epoch, 0, floor, pd, at, Duration.ofSeconds(20));
            t.admin.connection().flush(Duration.ofSeconds(5));
            dispatcher.unsubscribe("$JS.API.STREAM.MSG.GET." + t.stream);
            assertTrue(r.finished(), "settle did not finish within 20 s");
            assertNull(r.error(), "settle failed: " + r.error());
            assertFalse(r.fenced(), "settle says the partition was fenced");
            assertTrue(p.flush(Duration.ofSeconds(10)), "the record's callback did not run"); // the callbacks have run
            assertEquals(1, calls.size(), "the record's callback ran " + calls.size() + " times (" + calls + "): a duplicate PubAck after the flow ack acknowledged it again");
            assertTrue(calls.get(0) instanceof RecordMetadata, "the record stored at " + at + ": " + calls.get(0) + "; want it acknowledged");
            assertEquals(0, p.bufferedForTest(), "records buffered; want 0");
            assertEquals(0, gets.get(), "settle read " + gets.get() + " messages of the stream for a PubAck that adds nothing");
            assertTrue(r.queue().isEmpty(), r.queue().size() + " records to send again; want none");
        }
    }

    /**
     * The settle tests' bench: a new topic of one partition, clients with the producer's (a 300 ms
     * ack timeout) and the admin's credentials, a producer of the topic (id "&lt;topic&gt;-p"), the
     * partition's stream and its current epoch's subject. Closes the producer, then the clients.
     */
    @SuppressWarnings("try") // its try-with-resources statements only close
    private static final class Settling implements AutoCloseable {
        final PctlClient pc;
        final PctlClient admin;
        final Producer p;
        final int epoch;
        final String stream;
        final String subject;

        private Settling(PctlClient pc, PctlClient admin, Producer p, int epoch, String topic) {
            this.pc = pc;
            this.admin = admin;
            this.p = p;
            this.epoch = epoch;
            this.stream = "PCTL_" + topic + "_0";
            this.subject = "pctl.data." + topic + "." + epoch + ".0";
        }

        static Settling open(String topic) throws Exception {
            createTopic(topic, 1);
            ClientOptions opts = ClientOptions.builder().server(broker.url).creds(broker.producer).ackTimeout(Duration.ofMillis(300)).build();
            PctlClient pc = PctlClient.connect(opts);
            PctlClient admin = null;
            Producer p = null;
            try {
                admin = PctlClient.connect(broker.options(broker.admin));
                p = pc.producer(topic, ProducerOptions.builder().id(topic + "-p").build());
                return new Settling(pc, admin, p, pc.topic(topic).current().number(), topic);
            } catch (Exception e) {
                try (PctlClient c = pc; PctlClient a = admin; Producer q = p) { // closes those opened (null ones are skipped)
                    throw e;
                }
            }
        }

        /** Publishes value to the partition's subject (block: a NATS header block or null); returns the stored sequence. */
        long publish(String value, byte[] block) throws Exception {
            return ProducerBrokerTest.publish(pc.connection(), subject, value.getBytes(StandardCharsets.UTF_8), block);
        }

        /** Counts every message on subject in count: a real subscriber of the admin connection that answers none. */
        Dispatcher listen(String subject, AtomicInteger count) throws Exception {
            Dispatcher d = admin.connection().createDispatcher(m -> count.incrementAndGet());
            d.subscribe(subject);
            admin.connection().flush(Duration.ofSeconds(5));
            return d;
        }

        @Override
        public void close() {
            try (pc; admin; p) { // closed in reverse: p, admin, pc
            }
        }
    }

    private static long lastSeq(Connection nc, String stream) throws Exception {
        return JsApi.num(JsApi.obj(request(nc, "$JS.API.STREAM.INFO." + stream, "").get("state")).get("last_seq"));
    }

    /** Publishes to the stream and returns the stored sequence; block is a NATS header block or null. */
    private static long publish(Connection nc, String subject, byte[] data, byte[] block) throws Exception {
        Headers h = new Headers();
        if (block != null) {
            for (String[] kv : RecordHeaders.parse(block)) {
                h.add(kv[0], kv[1]);
            }
        }
        Message m = nc.request(NatsMessage.builder().subject(subject).headers(h).data(data).build(), Duration.ofSeconds(5));
        assertTrue(m != null, "no PubAck from " + subject);
        Map<String, Object> r = JsApi.parseObject(m.getData(), "PubAck");
        assertTrue(!(r.get("error") instanceof Map) && JsApi.num(r.get("seq")) > 0, "publish to " + subject + ": " + r);
        return JsApi.num(r.get("seq"));
    }

    private static Map<String, Object> request(Connection nc, String subject, String body) throws Exception {
        Message m = nc.request(subject, body.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(5));
        assertTrue(m != null, "no answer to " + subject);
        return JsApi.parseObject(m.getData(), subject);
    }

    // A record whose Nats-Msg-Id is stuck "in process" (spec/protocol.md §5.1.5) is answered by
    // the produce service with code unavailable and the detail {"in_process": true, "partition",
    // "epoch", "msg_id"} (§3), as an error reply or as a record's error in a batched reply (§5.2).
    // A thin client MUST NOT re-send it under the same identity and fails it with its in-process
    // error (§5.2 step 5): the SDK's request path (PctlClient.request) and PctlException.fromReply
    // (what decodes a batched result's error) must give a MsgIdInProcessException. The replies
    // come from a peer implementation of the produce service's wire on the real broker's NATS: a
    // responder on the produce subject of a broker id of its own (pctl.produce.<topic>.<B>, which
    // only broker B serves) sending the spec's reply bytes, written here by hand. Mutant shown
    // failing: fromReply ignoring the detail (a plain UnavailableException, which a thin client
    // retries).
    private static final String STUCK_SUBJECT = "pctl.produce.t.PEER1";
    private static final String MSG_ID = "p-7-00112233445566778899aabbccddeeff";
    private static final String DETAIL = "{\"in_process\":true,\"partition\":2,\"epoch\":1,\"msg_id\":\"" + MSG_ID + "\"}";
    private static final String ERROR = "{\"code\":\"unavailable\",\"message\":\"record 7 (id " + MSG_ID
            + ") refused 4 times by partition 2 as 'in process' (10158)\",\"detail\":" + DETAIL + "}";

    private static void checkStuck(Throwable e, String what) throws Exception {
        MsgIdInProcessException ip = assertInstanceOf(MsgIdInProcessException.class, e, what + ": want MsgIdInProcessException (§5.2 step 5)");
        assertInstanceOf(UnavailableException.class, e);
        assertEquals(ErrorCode.UNAVAILABLE, ip.code());
        assertEquals(2, ip.partition());
        assertEquals(MSG_ID, ip.msgId());
        assertEquals(Json.parse(DETAIL), Json.parse(ip.detail()));
        assertTrue(ip.getMessage().contains("read partition 2") && ip.getMessage().contains("before producing it again"), ip.getMessage());
    }

    @Test
    void aStuckRecordFromTheProduceServiceIsMsgIdInProcess() throws Exception {
        try (PctlClient admin = PctlClient.connect(broker.options(broker.admin));
                PctlClient pc = PctlClient.connect(broker.options(broker.producer))) {
            Connection peer = admin.connection();
            Dispatcher d = peer.createDispatcher(m -> {
                Headers h = new Headers().put("Pctl-Broker", "PEER1");
                String body;
                if (m.getHeaders() != null && m.getHeaders().getFirst("Pctl-Batch") != null) {
                    body = "{\"results\":[{\"partition\":2,\"epoch\":1,\"seq\":5,\"duplicate\":false},{\"error\":" + ERROR
                            + "},{\"partition\":2,\"epoch\":1,\"seq\":6,\"duplicate\":false}],\"broker\":\"PEER1\"}";
                } else {
                    h.put("Pctl-Error", "unavailable");
                    body = ERROR;
                }
                peer.publish(NatsMessage.builder().subject(m.getReplyTo()).headers(h).data(body.getBytes(StandardCharsets.UTF_8)).build());
            });
            d.subscribe(STUCK_SUBJECT);
            peer.flush(Duration.ofSeconds(5));

            // A single request's error reply.
            PctlException e = assertThrows(PctlException.class, () -> pc.request(STUCK_SUBJECT, "v".getBytes(StandardCharsets.UTF_8)));
            checkStuck(e, "error reply");

            // A batched request: record 2 of 3 is stuck.
            Headers h = new Headers().put("Pctl-Batch", "3").put("Pctl-Producer", "p");
            Message r = pc.connection().request(NatsMessage.builder().subject(STUCK_SUBJECT).headers(h).data(new byte[] {1}).build(), Duration.ofSeconds(10));
            Map<?, ?> rep = (Map<?, ?>) Json.parse(new String(r.getData(), StandardCharsets.UTF_8));
            List<?> results = (List<?>) rep.get("results");
            assertEquals(3, results.size());
            for (int i = 0; i < 3; i++) {
                Map<?, ?> res = (Map<?, ?>) results.get(i);
                Map<?, ?> err = (Map<?, ?>) res.get("error");
                if (i != 1) {
                    assertNull(err, "record " + i);
                    continue;
                }
                checkStuck(PctlException.fromReply((String) err.get("code"), (String) err.get("message"), Json.write(err.get("detail"))), "batched result");
            }
        }
    }
}
