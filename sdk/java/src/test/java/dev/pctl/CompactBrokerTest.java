package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.Connection;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Compacted topics (spec/protocol.md §10) against a real broker: the producer writes one subject
 * per key and tombstones, the consumer flags tombstones, reads the current epoch alone, skips
 * backfilled copies in a live group and delivers them to a group that started at the current
 * epoch. What the SDK delivers is compared with what {@code pctl consume} (the Go client)
 * delivers, with JetStream's own last message of each key subject, and with the values sent. The
 * key token is checked against spec/vectors/compact/keytoken.json (Python's base64 and hashlib,
 * not this SDK) in {@link #keyTokenVectors()}, which needs no broker.
 */
class CompactBrokerTest {
    private static Broker broker;

    @BeforeAll
    static void start() throws Exception {
        if (!"1".equals(System.getenv("PCTL_JAVA_UNIT_ONLY"))) {
            broker = Broker.start();
        }
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    void keyTokenVectors() throws Exception {
        Map<String, Object> doc = (Map<String, Object>) Json.parse(Files.readString(Repo.path("spec/vectors/compact/keytoken.json"), StandardCharsets.UTF_8));
        List<Object> cases = (List<Object>) doc.get("cases");
        assertTrue(cases.size() >= 500);
        int hashed = 0;
        for (Object o : cases) {
            Map<String, Object> c = (Map<String, Object>) o;
            String tok = (String) c.get("token");
            assertEquals(tok, Compaction.keyToken(HexFormat.of().parseHex((String) c.get("key_hex"))), (String) c.get("key_hex"));
            hashed += tok.startsWith("h") ? 1 : 0;
        }
        assertTrue(hashed > 0);
    }

    @Test
    void originsAndSupersededRecords() {
        assertEquals(List.of(2L, 3L, 17L), List.of(Compaction.parseOrigin("2/3/17")[0], Compaction.parseOrigin("2/3/17")[1], Compaction.parseOrigin("2/3/17")[2]));
        for (String bad : new String[] {"", "0/1/2", "1/2", "1/2/3/4", "a/1/2", "1/-1/2", " 1/2/3", "1/+2/3"}) {
            assertNull(Compaction.parseOrigin(bad), bad);
        }
        Map<Integer, Long> found = new java.util.HashMap<>(Map.of(3, 40L, 1, 38L));
        Compaction.supersededInBatch(java.util.Arrays.asList("a", "b", "a", "a", null), 0, found);
        assertEquals(Map.of(0, 0L, 1, 38L, 2, 0L, 3, 40L), found);
    }

    private static List<ConsumerRecord> drain(Consumer cn, Duration idle) {
        return Groups.drain(cn, Integer.MAX_VALUE, idle);
    }

    /** One entry per key (the last record of the key wins): its value, or null for a tombstone. */
    private static Map<String, String> latest(List<ConsumerRecord> rs) {
        Map<String, String> out = new LinkedHashMap<>();
        for (ConsumerRecord r : rs) {
            out.put(new String(r.key(), StandardCharsets.UTF_8), r.tombstone() ? null : new String(r.value(), StandardCharsets.UTF_8));
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, String> goConsume(String topic, String group) throws Exception {
        String out = broker.pctlOk(null, "consume", topic, "--group", group, "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "3s");
        Map<String, String> m = new LinkedHashMap<>();
        for (String line : out.split("\n")) {
            if (line.isEmpty()) {
                continue;
            }
            Map<String, Object> d = (Map<String, Object>) Json.parse(line);
            m.put((String) d.get("key"), Boolean.TRUE.equals(d.get("tombstone")) ? null : (String) d.getOrDefault("value", ""));
        }
        return m;
    }

    /**
     * A plain topic with --backfill (spec/protocol.md §10.1, §10.3): keyless records refused,
     * every record stored under its key's subject, and after a grow a group at the current epoch
     * (this SDK's and the Go client's) gets every key's full history in order.
     */
    @Test
    @Tag("broker")
    @SuppressWarnings("unchecked")
    void plainBackfillTopicKeySubjectsAndFullHistory() throws Exception {
        String topic = "pbfj";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "2", "--partitioner", "kafka-murmur2", "--backfill");
        List<String> keys = new ArrayList<>();
        Map<String, List<String>> hist = new LinkedHashMap<>();
        for (int i = 0; i < 12; i++) {
            keys.add("k" + i);
            hist.put("k" + i, new ArrayList<>());
        }
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                Producer p = pc.producer(topic, ProducerOptions.builder().id("pbfj-p").build());
                PctlClient cc = PctlClient.connect(broker.options(broker.consumer))) {
            java.util.concurrent.ExecutionException kl = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> p.send(ProducerRecord.keyless("x")).get(30, TimeUnit.SECONDS));
            assertTrue(kl.getCause() instanceof BadRequestException && kl.getCause().getMessage().contains("cannot be backfilled"), String.valueOf(kl.getCause()));
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
            for (int u = 0; u < 3; u++) {
                for (String k : keys) {
                    fs.add(p.send(ProducerRecord.keyed(k, k + ":" + u)));
                    hist.get(k).add(k + ":" + u);
                }
            }
            for (CompletableFuture<RecordMetadata> f : fs) {
                f.get(60, TimeUnit.SECONDS);
            }
            String[] parts = broker.pctlOffline(String.join("\n", keys) + "\n", "partition", "--plugin", "kafka-murmur2", "--partitions", "2").trim().split("\n");
            Connection nc = pc.connection();
            for (int i = 0; i < keys.size(); i++) {
                String k = keys.get(i);
                String subj = "pctl.data." + topic + ".1." + parts[i] + "." + Compaction.keyToken(k.getBytes(StandardCharsets.UTF_8));
                Message m = nc.request("$JS.API.DIRECT.GET.PCTL_" + topic + "_" + parts[i] + "." + subj, new byte[0], Duration.ofSeconds(5));
                assertTrue(m != null && m.getHeaders() != null && m.getHeaders().getFirst("Status") == null, subj);
                assertEquals(k + ":2", new String(m.getData(), StandardCharsets.UTF_8));
            }
            broker.pctlOk(null, "topic", "repartition", topic, "--partitions", "3");
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                Map<String, Object> d = (Map<String, Object>) Json.parse(broker.pctlOk(null, "topic", "describe", topic, "--json"));
                List<Object> eps = (List<Object>) d.get("epochs");
                Object bf = ((Map<String, Object>) eps.get(eps.size() - 1)).get("backfill");
                if (bf instanceof Map && "done".equals(((Map<String, Object>) bf).get("state"))) {
                    break;
                }
                assertTrue(System.nanoTime() < deadline, "backfill not done: " + bf);
                Thread.sleep(200);
            }
            for (String k : keys.subList(0, 4)) {
                assertEquals(2, p.send(ProducerRecord.keyed(k, k + ":e2")).get(60, TimeUnit.SECONDS).epoch());
                hist.get(k).add(k + ":e2");
            }
            List<ConsumerRecord> got;
            try (Consumer c = cc.consumer(topic, ConsumerOptions.builder("pbfj-fresh").start("current-epoch").build())) {
                got = drain(c, Duration.ofSeconds(3));
            }
            assertTrue(got.stream().allMatch(r -> r.epoch() == 2));
            Map<String, List<String>> by = new LinkedHashMap<>();
            for (String k : keys) {
                by.put(k, new ArrayList<>());
            }
            for (ConsumerRecord r : got) {
                by.get(new String(r.key(), StandardCharsets.UTF_8)).add(new String(r.value(), StandardCharsets.UTF_8));
            }
            assertEquals(hist, by);
            assertEquals(36, got.stream().filter(r -> r.backfill() != null).count());
            Map<String, List<String>> goBy = new LinkedHashMap<>();
            for (String k : keys) {
                goBy.put(k, new ArrayList<>());
            }
            for (String line : broker.pctlOk(null, "consume", topic, "--group", "pbfj-gofresh", "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "3s").split("\n")) {
                if (!line.isEmpty()) {
                    Map<String, Object> d = (Map<String, Object>) Json.parse(line);
                    goBy.get((String) d.get("key")).add((String) d.get("value"));
                }
            }
            assertEquals(hist, goBy);
        }
    }

    @Test
    @Tag("broker")
    @SuppressWarnings("unchecked")
    void produceTombstonesCurrentEpochAndBackfill() throws Exception {
        String topic = "cptj";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "3", "--partitioner", "kafka-murmur2", "--compact", "--delete-retention", "1h");
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < 39; i++) {
            keys.add("k" + i);
        }
        keys.add("L".repeat(300)); // a long (hashed) key
        Map<String, String> want = new LinkedHashMap<>();
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                Producer p = pc.producer(topic, ProducerOptions.builder().id("cptj-p").build());
                PctlClient cc = PctlClient.connect(broker.options(broker.consumer))) {
            java.util.concurrent.ExecutionException kl = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> p.send(ProducerRecord.keyless("x")).get(30, TimeUnit.SECONDS));
            assertTrue(kl.getCause() instanceof BadRequestException && kl.getCause().getMessage().contains("compacted"), String.valueOf(kl.getCause()));
            assertThrows(BadRequestException.class, () -> ProducerRecord.tombstone((byte[]) null));
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
            for (int u = 0; u < 6; u++) {
                for (int i = 0; i < keys.size(); i++) {
                    String k = keys.get(i);
                    String v = k.substring(0, Math.min(8, k.length())) + ":" + u;
                    fs.add(p.send(ProducerRecord.keyed(k, v)));
                    want.put(k, v);
                    if (u == 5 && i < 10) {
                        fs.add(p.send(ProducerRecord.tombstone(k)));
                        want.put(k, null);
                    }
                    if (u == 5 && i < 4) {
                        fs.add(p.send(ProducerRecord.keyed(k, k + ":back"))); // a value after a tombstone
                        want.put(k, k + ":back");
                    }
                }
            }
            for (CompletableFuture<RecordMetadata> f : fs) {
                f.get(60, TimeUnit.SECONDS);
            }
            assertEquals(40 * 6 + 10 + 4, fs.size());

            // Stored state, read by subject (JetStream's last message of each key subject).
            String[] parts = broker.pctlOffline(String.join("\n", keys) + "\n", "partition", "--plugin", "kafka-murmur2", "--partitions", "3").trim().split("\n");
            Connection nc = pc.connection();
            for (int i = 0; i < keys.size(); i++) {
                String k = keys.get(i);
                String subj = "pctl.data." + topic + ".1." + parts[i] + "." + Compaction.keyToken(k.getBytes(StandardCharsets.UTF_8));
                Message m = nc.request("$JS.API.DIRECT.GET.PCTL_" + topic + "_" + parts[i] + "." + subj, new byte[0], Duration.ofSeconds(5));
                assertTrue(m != null && m.getHeaders() != null && m.getHeaders().getFirst("Status") == null, subj);
                if (want.get(k) == null) {
                    assertEquals("true", m.getHeaders().getFirst("Pctl-Tombstone"));
                    assertEquals("3600", m.getHeaders().getFirst("Nats-TTL"));
                    assertEquals(0, m.getData().length);
                } else {
                    assertEquals(want.get(k), new String(m.getData(), StandardCharsets.UTF_8));
                }
            }

            // A new group reads the current epoch alone by default on a compacted topic.
            List<ConsumerRecord> got1;
            try (Consumer c1 = cc.consumer(topic, ConsumerOptions.builder("fresh1").build())) {
                got1 = drain(c1, Duration.ofSeconds(3));
            }
            assertEquals(keys.size(), got1.size());
            assertEquals(want, latest(got1));
            assertTrue(got1.stream().allMatch(r -> r.backfill() == null && r.epoch() == 1));
            assertTrue(got1.stream().filter(ConsumerRecord::tombstone).allMatch(r -> r.value().length == 0));
            assertEquals(want, goConsume(topic, "gofresh1"));

            // A live group that read epoch 1 before the change gets no copy again.
            try (Consumer live = cc.consumer(topic, ConsumerOptions.builder("live").start("beginning").build())) {
                List<ConsumerRecord> liveGot = new ArrayList<>(drain(live, Duration.ofSeconds(4)));
                assertEquals(keys.size(), liveGot.size());

                broker.pctlOk(null, "topic", "repartition", topic, "--partitions", "5");
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                while (true) {
                    Map<String, Object> d = (Map<String, Object>) Json.parse(broker.pctlOk(null, "topic", "describe", topic, "--json"));
                    List<Object> eps = (List<Object>) d.get("epochs");
                    Object bf = ((Map<String, Object>) eps.get(eps.size() - 1)).get("backfill");
                    if (bf instanceof Map && "done".equals(((Map<String, Object>) bf).get("state"))) {
                        break;
                    }
                    assertTrue(System.nanoTime() < deadline, "backfill not done: " + bf);
                    liveGot.addAll(live.poll(Duration.ofMillis(200)));
                }
                List<CompletableFuture<RecordMetadata>> later = new ArrayList<>();
                for (String k : keys.subList(10, 20)) {
                    later.add(p.send(ProducerRecord.keyed(k, k + ":e2")));
                    want.put(k, k + ":e2");
                }
                later.add(p.send(ProducerRecord.tombstone("k20")));
                want.put("k20", null);
                for (CompletableFuture<RecordMetadata> f : later) {
                    assertEquals(2, f.get(60, TimeUnit.SECONDS).epoch());
                }

                // A fresh group at the current epoch: every key's latest once, copies flagged.
                List<ConsumerRecord> got2;
                try (Consumer c2 = cc.consumer(topic, ConsumerOptions.builder("fresh2").build())) {
                    got2 = drain(c2, Duration.ofSeconds(3));
                }
                assertTrue(got2.stream().allMatch(r -> r.epoch() == 2));
                assertEquals(keys.size(), got2.size());
                assertEquals(want, latest(got2));
                List<ConsumerRecord> copies = got2.stream().filter(r -> r.backfill() != null).toList();
                assertEquals(keys.size() - 11, copies.size());
                assertTrue(copies.stream().allMatch(r -> r.backfill().epoch() == 1));
                assertEquals(want, goConsume(topic, "gofresh2"));

                liveGot.addAll(drain(live, Duration.ofSeconds(4)));
                assertEquals(List.of(), liveGot.stream().filter(r -> r.backfill() != null).toList(), "a live group skips copies");
                assertEquals(keys.size() + 11, liveGot.size());
                assertEquals(want, latest(liveGot));
            }
        }
    }

    @Test
    @Tag("broker")
    void recordUnderAnotherKeysTokenIsMisplaced() throws Exception {
        String topic = "cptjmis";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2", "--compact");
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                PctlClient cc = PctlClient.connect(broker.options(broker.consumer))) {
            try (Producer p = pc.producer(topic, ProducerOptions.builder().id("mis-p").build())) {
                p.send(ProducerRecord.keyed("a", "1")).get(30, TimeUnit.SECONDS);
            }
            // A hostile producer: key b's header under key a's subject (it compacts a's value away).
            Headers h = new Headers().add("Pctl-Key", "b64:Yg==").add("Nats-Msg-Id", "hostile-1");
            Message ack = pc.connection().request(NatsMessage.builder().subject("pctl.data." + topic + ".1.0." + Compaction.keyToken("a".getBytes(StandardCharsets.UTF_8)))
                    .headers(h).data("2".getBytes(StandardCharsets.UTF_8)).build(), Duration.ofSeconds(5));
            assertTrue(ack != null && ack.getData().length > 0);
            List<ConsumerRecord> got;
            try (Consumer cn = cc.consumer(topic, ConsumerOptions.builder("m").start("beginning").misplaced(MisplacedPolicy.DELIVER).build())) {
                got = drain(cn, Duration.ofSeconds(3));
            }
            assertEquals(1, got.size());
            assertEquals("b", new String(got.get(0).key(), StandardCharsets.UTF_8));
            assertTrue(got.get(0).misplacement().reason().contains("does not end with its key's token"), got.get(0).misplacement().reason());
        }
    }
}
