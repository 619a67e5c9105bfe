package dev.pctl;

import static dev.pctl.Groups.Member;
import static dev.pctl.Groups.merged;
import static dev.pctl.Groups.misplaced;
import static dev.pctl.Groups.orderViolations;
import static dev.pctl.Groups.verify;
import static dev.pctl.Groups.waitDelivered;
import static dev.pctl.Groups.writeSent;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Consumer groups whose members are separate processes in two languages — this SDK's {@code
 * consume} command (a child JVM) and Go's {@code pctl consume} — sharing one topic while the Java
 * producer writes to it through a grow, a shrink and a function swap, and while a Java member is
 * killed with SIGKILL and another joins late. Checked with {@code pctl verify} (every acknowledged
 * record delivered, first deliveries in the producer's order per key) and independently here:
 * per-key order of the merged deliveries by their timestamps, and every record in its key's
 * partition for its epoch as {@code pctl partition} computes it. Also the {@code consume}
 * command's output, byte for byte against {@code pctl consume --format jsonl --timestamps}.
 */
@Tag("broker")
class ConsumerGroupTest {
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
        String name = "g" + TOPICS.incrementAndGet();
        broker.pctlOk(null, "topic", "create", name, "--partitions", Integer.toString(partitions), "--partitioner", "kafka-murmur2");
        return name;
    }

    record Sent(List<ProducerRecord> records, List<RecordMetadata> metas, String producer) {}

    /**
     * Sends n records (key k(i % keys), value i) in chunks with pauses; starts each change (pctl
     * topic repartition arguments) while records are in flight, after the fraction of n in at.
     */
    private static Sent produceThrough(String topic, int n, int keys, List<String[]> changes, double[] at, int chunk) throws Exception {
        return produceThrough(topic, n, keys, changes, at, chunk, false);
    }

    /**
     * As above; with slowTail the last quarter goes in chunks a tenth the size (the same pauses), so
     * that records still flow for seconds after the rest (a member that joins late gets some).
     */
    private static Sent produceThrough(String topic, int n, int keys, List<String[]> changes, double[] at, int chunk, boolean slowTail) throws Exception {
        String pid = "prod-" + topic;
        List<ProducerRecord> recs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            recs.add(ProducerRecord.keyed("k" + (i % keys), Integer.toString(i)));
        }
        List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
        CompletableFuture<Void> running = CompletableFuture.completedFuture(null);
        int next = 0;
        try (PctlClient c = PctlClient.connect(broker.options(broker.producer)); Producer p = c.producer(topic, ProducerOptions.builder().id(pid).build())) {
            for (int i = 0, step = chunk; i < n; i += step) {
                step = slowTail && i >= 0.75 * n ? Math.max(1, chunk / 10) : chunk;
                if (i >= 0.95 * n && next == changes.size()) {
                    running.join(); // the last epoch gets the last records
                }
                for (int j = i; j < Math.min(n, i + step); j++) {
                    fs.add(p.send(recs.get(j)));
                }
                if (next < changes.size() && i >= at[next] * n) {
                    // Records keep flowing while a change runs, but every change finishes, and
                    // the producer has caught up with it (every record sent so far acknowledged),
                    // before the next one's point, so that every epoch gets records however slow
                    // the machine is (the producer settles every partition's open batch at a
                    // fence: an epoch that lasts less than that gets none).
                    running.join();
                    p.flush();
                    String[] args = changes.get(next++);
                    running = CompletableFuture.runAsync(() -> repartition(topic, args));
                }
                Thread.sleep(40);
            }
            running.join();
            while (next < changes.size()) {
                repartition(topic, changes.get(next++));
            }
            List<RecordMetadata> metas = new ArrayList<>();
            for (CompletableFuture<RecordMetadata> f : fs) {
                metas.add(f.get(60, TimeUnit.SECONDS));
            }
            return new Sent(recs, metas, pid);
        }
    }

    private static void repartition(String topic, String[] args) {
        List<String> a = new ArrayList<>(List.of("topic", "repartition", topic));
        a.addAll(List.of(args));
        try {
            broker.pctlOk(null, a.toArray(new String[0]));
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static void checkGroup(String topic, String group, List<Member> members, Sent s, boolean noDuplicates) throws Exception {
        Path sent = broker.dir.resolve(topic + "-sent.jsonl");
        writeSent(sent, s.producer(), s.records(), s.metas());
        Set<String> want = new HashSet<>();
        for (RecordMetadata m : s.metas()) {
            want.add(s.producer() + "/" + m.producerSeq());
        }
        Set<String> got = waitDelivered(members, want, Duration.ofSeconds(120));
        for (Member m : members) {
            m.stop();
        }
        Set<String> lost = new TreeSet<>(want);
        lost.removeAll(got);
        StringBuilder logs = new StringBuilder();
        for (Member m : members) {
            logs.append("\n--- ").append(m.lang).append(' ').append(m.out.getFileName()).append(":\n").append(m.log());
        }
        assertTrue(lost.isEmpty(), lost.size() + " acknowledged records never delivered; logs:" + logs);
        Broker.Result v = noDuplicates ? verify(broker, sent, group, members, "--no-duplicates") : verify(broker, sent, group, members);
        assertEquals(0, v.status(), "pctl verify failed:\n" + v.stdout() + v.stderr() + logs);
        List<Groups.Delivery> ds = merged(members);
        assertEquals(List.of(), orderViolations(ds), "per-key order of the merged deliveries");
        assertEquals(List.of(), misplaced(broker, topic, ds), "every record in its key's partition for its epoch (pctl partition)");
    }

    @Test
    void javaAndGoMembersShareAGroupThroughGrowShrinkAndSwap() throws Exception {
        String topic = createTopic(3);
        String group = "mixed";
        Path d = broker.dir;
        List<Member> members = new ArrayList<>(List.of(new Member(broker, "java", topic, group, d.resolve(topic + "-j1.jsonl"), "--from-beginning"),
                new Member(broker, "java", topic, group, d.resolve(topic + "-j2.jsonl"), "--from-beginning"),
                new Member(broker, "go", topic, group, d.resolve(topic + "-go1.jsonl"), "--from-beginning")));
        try {
            Groups.waitOwners(broker, topic, group, 3, 3, Duration.ofSeconds(60));
            Sent s = produceThrough(topic, 6000, 120, List.of(new String[] {"--partitions", "6"}, new String[] {"--partitions", "2"},
                    new String[] {"--partitions", "4", "--partitioner", "librdkafka-consistent"}), new double[] {0.25, 0.5, 0.75}, 200);
            checkGroup(topic, group, members, s, true);
            Map<String, Integer> per = new HashMap<>();
            Set<Integer> epochs = new TreeSet<>();
            for (Member m : members) {
                per.put(m.out.getFileName().toString(), m.records().size());
                for (Groups.Delivery x : m.records()) {
                    epochs.add(x.epoch());
                }
            }
            StringBuilder logs = new StringBuilder();
            for (Member m : members) {
                logs.append("\n--- ").append(m.out.getFileName()).append(":\n").append(m.log());
            }
            assertTrue(per.values().stream().allMatch(x -> x > 0), "every member took part: " + per + logs);
            assertEquals(Set.of(1, 2, 3, 4), epochs);
        } finally {
            for (Member m : members) {
                m.stop();
            }
        }
    }

    @Test
    void aMemberKilledHardIsTakenOverAndALateMemberJoins() throws Exception {
        String topic = createTopic(4);
        String group = "crash";
        Path d = broker.dir;
        List<Member> members = new ArrayList<>(List.of(new Member(broker, "java", topic, group, d.resolve(topic + "-j1.jsonl"), "--from-beginning"),
                new Member(broker, "java", topic, group, d.resolve(topic + "-j2.jsonl"), "--from-beginning"),
                new Member(broker, "go", topic, group, d.resolve(topic + "-go1.jsonl"), "--from-beginning")));
        try {
            Groups.waitOwners(broker, topic, group, 4, 3, Duration.ofSeconds(60));
            CompletableFuture<Sent> prod = CompletableFuture.supplyAsync(() -> {
                try {
                    return produceThrough(topic, 8000, 100, List.<String[]>of(new String[] {"--partitions", "6"}), new double[] {0.6}, 150, true);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            Member killed = members.get(0);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (killed.records().size() < 500 && !prod.isDone() && System.nanoTime() < until) {
                Thread.sleep(50);
            }
            killed.kill9(); // mid-stream: records printed and not committed are delivered again
            Thread.sleep(1000);
            Member late = new Member(broker, "java", topic, group, d.resolve(topic + "-j3.jsonl"));
            members.add(late);
            Sent s = prod.get(180, TimeUnit.SECONDS);
            checkGroup(topic, group, members, s, false);
            assertTrue(killed.records().size() >= 500, "the killed member had delivered " + killed.records().size());
            assertTrue(late.records().size() > 0, "the late member took over partitions");
        } finally {
            for (Member m : members) {
                m.stop();
            }
        }
    }

    private static final String[] TRICKY = {"plain", "<&>", "a\u2028b\u2029", "", "tab\there\nnl\r\u0001\u007f", "é€😀", "\\\"quote", "-", "hex:41"};

    private static String stripTs(String line) throws Exception {
        Groups.Delivery d = Groups.parseLine(line);
        String field = ",\"ts\":" + d.ts();
        int i = line.indexOf(field);
        assertTrue(i > 0, line);
        return line.substring(0, i) + line.substring(i + field.length());
    }

    @Test
    void theConsumeCommandPrintsExactlyWhatPctlConsumePrints() throws Exception {
        String topic = createTopic(2);
        List<ProducerRecord> recs = new ArrayList<>();
        for (String k : TRICKY) {
            for (int v = 0; v < 4; v++) {
                recs.add(ProducerRecord.keyed(k, TRICKY[v]));
            }
        }
        recs.add(ProducerRecord.keyed(new byte[] {(byte) 0xff, (byte) 0xfe}, new byte[] {(byte) 0xff, 0}));
        recs.add(ProducerRecord.keyed("k".getBytes(StandardCharsets.UTF_8), new byte[] {(byte) 0xc3}));
        recs.add(ProducerRecord.keyless("keyless <&>"));
        recs.add(ProducerRecord.keyless(new byte[] {0, 1}));
        Groups.produce(broker, topic, "jsonl-1", recs);
        String rogue = null;
        for (int i = 0; i < 50 && rogue == null; i++) {
            String hex = java.util.HexFormat.of().formatHex(("m" + i).getBytes(StandardCharsets.UTF_8));
            if (Groups.placements(broker, Set.of(hex), "kafka-murmur2", 2).get(hex) == 1) {
                rogue = "m" + i;
            }
        }
        ConsumerBrokerTest.publishMisplaced(broker, topic, rogue);
        int total = recs.size() + 2;
        Broker.Result go = broker.run(null, false, "consume", topic, "--group", "go-jsonl", "--from-beginning", "--format", "jsonl", "--timestamps",
                "--max", Integer.toString(total), "--idle-exit", "10s", "--misplaced", "deliver", "--server", broker.url, "--creds", broker.consumer.toString());
        assertEquals(0, go.status(), go.stderr());
        Path out = broker.dir.resolve(topic + "-java.jsonl");
        Member java = new Member(broker, "java", topic, "java-jsonl", out, "--from-beginning", "--max", Integer.toString(total), "--idle-exit", "10s",
                "--misplaced", "deliver");
        assertTrue(java.proc.waitFor(120, TimeUnit.SECONDS));
        assertEquals(0, java.proc.exitValue(), java.log());
        List<String> goLines = new ArrayList<>(List.of(go.stdout().split("\n")));
        List<String> javaLines = new ArrayList<>(List.of(Files.readString(out, StandardCharsets.UTF_8).split("\n")));
        assertEquals(total, goLines.size());
        assertEquals(total, javaLines.size());
        List<String> a = new ArrayList<>();
        for (String l : goLines) {
            a.add(stripTs(l));
        }
        List<String> b = new ArrayList<>();
        for (String l : javaLines) {
            b.add(stripTs(l));
        }
        Comparator<String> byPos = Comparator.comparing((String l) -> {
            try {
                Groups.Delivery x = Groups.parseLine(l + "");
                return String.format("%05d/%010d", x.partition(), x.seq());
            } catch (Exception e) {
                return l;
            }
        });
        a.sort(byPos);
        b.sort(byPos);
        assertEquals(a, b, "byte for byte, but for the delivery time");
        long flagged = javaLines.stream().filter(l -> l.contains("\"misplaced\":true")).count();
        assertEquals(2, flagged);
        assertTrue(java.log().contains("misplaced record"), java.log());
        // The bytes of the lines, not just the strings: the same UTF-8.
        assertTrue(Files.readString(out, StandardCharsets.UTF_8).contains("\\u003c\\u0026\\u003e"), "HTML-safe escapes as Go writes them");
        assertTrue(Base64.getEncoder().encodeToString(new byte[] {(byte) 0xff, (byte) 0xfe}).length() > 0);
    }

    @Test
    void theConsumeCommandsArgumentsAndMax() throws Exception {
        String topic = createTopic(1);
        List<ProducerRecord> recs = new ArrayList<>();
        for (int i = 0; i < 30; i++) {
            recs.add(ProducerRecord.keyed("k", Integer.toString(i)));
        }
        Groups.produce(broker, topic, null, recs);
        Path d = broker.dir;
        String[][] bad = {{"--group", "g", "--idle-exit", "nope"}, {"--group", "bad.group", "--idle-exit", "1s"},
            {"--group", "g", "--max", "-1"}, {"--group", "g", "--misplaced", "maybe"}};
        String[] says = {"invalid duration", "consumer group", "--max -1", "--misplaced maybe"};
        for (int i = 0; i < bad.length; i++) {
            Member m = new Member(broker, "java", topic, "unused", d.resolve(topic + "-bad" + i + ".jsonl"), bad[i]);
            assertTrue(m.proc.waitFor(60, TimeUnit.SECONDS));
            assertEquals(2, m.proc.exitValue(), m.log());
            assertTrue(m.log().contains(says[i]), m.log());
        }
        Member unknown = new Member(broker, "java", "no-such-topic", "g", d.resolve(topic + "-unknown.jsonl"), "--idle-exit", "1s");
        assertTrue(unknown.proc.waitFor(60, TimeUnit.SECONDS));
        assertEquals(2, unknown.proc.exitValue(), unknown.log());
        assertTrue(unknown.log().contains("no-such-topic"), unknown.log());
        Member first = new Member(broker, "java", topic, "max", d.resolve(topic + "-first.jsonl"), "--from-beginning", "--max", "12", "--idle-exit", "10s");
        assertTrue(first.proc.waitFor(60, TimeUnit.SECONDS));
        assertEquals(0, first.proc.exitValue(), first.log());
        assertEquals(12, first.records().size());
        Member rest = new Member(broker, "java", topic, "max", d.resolve(topic + "-rest.jsonl"), "--idle-exit", "8s");
        assertTrue(rest.proc.waitFor(60, TimeUnit.SECONDS));
        List<String> values = new ArrayList<>();
        for (Groups.Delivery x : first.records()) {
            values.add(x.value());
        }
        for (Groups.Delivery x : rest.records()) {
            values.add(x.value());
        }
        List<String> want = new ArrayList<>();
        for (int i = 0; i < 30; i++) {
            want.add(Integer.toString(i));
        }
        assertEquals(want, values, "the next member goes on after exactly what was printed");
        // SIGTERM: the member commits what it printed and leaves (exit 0, as pctl consume).
        Member term = new Member(broker, "java", topic, "term", d.resolve(topic + "-term.jsonl"), "--from-beginning");
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (term.records().size() < 30 && System.nanoTime() < until) {
            Thread.sleep(50);
        }
        assertEquals(0, term.stop(), term.log());
        assertTrue(term.log().contains("(interrupted)"), term.log());
    }
}
