package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.pctl.internal.Json;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Helpers of the consumer tests: producing with the SDK, member processes in two languages (this
 * SDK's {@code consume} command in a child JVM, and Go's {@code pctl consume}), and independent
 * checks of what a group delivered: every acknowledged record ({@code pctl verify}), per-key
 * order, and each record's partition for its epoch as {@code pctl partition} computes it.
 */
final class Groups {
    private Groups() {}

    /** A delivered record as the members print it (pctl consume --format jsonl --timestamps). */
    record Delivery(String producer, long pseq, byte[] key, String value, int partition, int epoch, long seq, long ts, Map<String, Object> raw) {
        String keyString() {
            return key == null ? null : new String(key, StandardCharsets.UTF_8);
        }
    }

    /** Sends (key, value) records in order; returns their metadata. */
    static List<RecordMetadata> produce(Broker b, String topic, String producerId, List<ProducerRecord> recs) {
        ProducerOptions.Builder ob = ProducerOptions.builder();
        if (producerId != null) {
            ob.id(producerId);
        }
        try (PctlClient c = PctlClient.connect(b.options(b.producer)); Producer p = c.producer(topic, ob.build())) {
            List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
            for (ProducerRecord r : recs) {
                fs.add(p.send(r));
            }
            List<RecordMetadata> out = new ArrayList<>();
            for (CompletableFuture<RecordMetadata> f : fs) {
                out.add(f.join());
            }
            return out;
        }
    }

    /** Records k0..k(keys-1) with values from..to-1 (value i for every key, rounds in order). */
    static List<ProducerRecord> rounds(int from, int to, int keys) {
        List<ProducerRecord> out = new ArrayList<>();
        for (int i = from; i < to; i++) {
            for (int k = 0; k < keys; k++) {
                out.add(ProducerRecord.keyed("k" + k, Integer.toString(i)));
            }
        }
        return out;
    }

    static Delivery of(ConsumerRecord r) {
        return new Delivery(r.producer(), r.producerSeq(), r.key(), r.valueString(), r.partition(), r.epoch(), r.sequence(), 0, Map.of());
    }

    static List<Delivery> of(List<ConsumerRecord> rs) {
        List<Delivery> out = new ArrayList<>();
        for (ConsumerRecord r : rs) {
            out.add(of(r));
        }
        return out;
    }

    /** Records from a consumer until {@code want} came or {@code idle} passed without one. */
    static List<ConsumerRecord> drain(Consumer cn, int want, Duration idle) {
        List<ConsumerRecord> out = new ArrayList<>();
        long last = System.nanoTime();
        while (out.size() < want && System.nanoTime() - last < idle.toNanos()) {
            List<ConsumerRecord> got = cn.poll(Duration.ofMillis(200));
            if (!got.isEmpty()) {
                last = System.nanoTime();
                out.addAll(got);
            }
        }
        return out;
    }

    /**
     * Per key, the values of first deliveries (by producer and pseq) must increase, in the order
     * given (the producer sent a key's records with increasing values). Returns the violations.
     */
    static List<String> orderViolations(List<Delivery> ds) {
        Set<String> seen = new HashSet<>();
        Map<String, Long> last = new HashMap<>();
        List<String> bad = new ArrayList<>();
        for (Delivery d : ds) {
            if (d.key() == null) {
                continue;
            }
            if (!seen.add(d.producer() + "/" + d.pseq())) {
                continue; // a redelivery after a crash: allowed, in order
            }
            String k = HexFormat.of().formatHex(d.key());
            long v = Long.parseLong(d.value());
            Long l = last.get(k);
            if (l != null && v < l) {
                bad.add(d.keyString() + ": " + l + " then " + v);
            }
            last.put(k, l == null ? v : Math.max(v, l));
        }
        return bad;
    }

    /** {@code pctl partition} of each key (the Go host: the independent placement). */
    static Map<String, Integer> placements(Broker b, Set<String> keys, String plugin, int n) throws Exception {
        List<String> ks = new ArrayList<>(keys);
        StringBuilder in = new StringBuilder();
        for (String k : ks) {
            in.append(k).append('\n');
        }
        String out = b.pctlOffline(in.toString(), "partition", "--plugin", plugin, "--partitions", Integer.toString(n), "--hex");
        String[] ls = out.trim().split("\n");
        assertEquals(ks.size(), ls.length);
        Map<String, Integer> m = new HashMap<>();
        for (int i = 0; i < ks.size(); i++) {
            m.put(ks.get(i), Integer.parseInt(ls[i].trim()));
        }
        return m;
    }

    /** Deliveries whose partition is not their key's partition in their epoch, by pctl partition. */
    static List<Delivery> misplaced(Broker b, String topic, List<Delivery> ds) throws Exception {
        Set<String> keys = new HashSet<>();
        for (Delivery d : ds) {
            if (d.key() != null) {
                keys.add(HexFormat.of().formatHex(d.key()));
            }
        }
        TopicDescriptor t;
        try (PctlClient c = PctlClient.connect(b.options(b.consumer))) {
            t = c.topic(topic);
        }
        Map<Integer, Map<String, Integer>> want = new HashMap<>();
        for (TopicDescriptor.Epoch e : t.epochs()) {
            want.put(e.number(), placements(b, keys, e.partitioner().name(), e.partitions()));
        }
        List<Delivery> bad = new ArrayList<>();
        for (Delivery d : ds) {
            if (d.key() != null && want.get(d.epoch()).get(HexFormat.of().formatHex(d.key())) != d.partition()) {
                bad.add(d);
            }
        }
        return bad;
    }

    /** A {@code pctl verify --sent} file for records the SDK's producer sent. */
    static void writeSent(Path path, String producerId, List<ProducerRecord> recs, List<RecordMetadata> metas) throws IOException {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < recs.size(); i++) {
            sb.append("{\"producer\":").append(Json.quote(producerId)).append(",\"pseq\":").append(metas.get(i).producerSeq()).append(",\"acked\":true");
            if (recs.get(i).key() == null) {
                sb.append(",\"nokey\":true");
            } else {
                sb.append(",\"key\":\"").append(Base64.getEncoder().encodeToString(recs.get(i).key())).append('"');
            }
            sb.append("}\n");
        }
        Files.writeString(path, sb.toString());
    }

    @SuppressWarnings("unchecked")
    static Delivery parseLine(String line) throws Json.JsonException {
        Map<String, Object> m = (Map<String, Object>) Json.parse(line);
        byte[] key = null;
        if (m.get("key") instanceof String) {
            key = ((String) m.get("key")).getBytes(StandardCharsets.UTF_8);
        } else if (m.get("key_b64") instanceof String) {
            key = Base64.getDecoder().decode((String) m.get("key_b64"));
        }
        String value = m.get("value") instanceof String ? (String) m.get("value") : "";
        return new Delivery(m.get("producer") instanceof String ? (String) m.get("producer") : "", num(m.get("pseq")), key, value,
                (int) num(m.get("partition")), (int) num(m.get("epoch")), num(m.get("seq")), num(m.get("ts")), m);
    }

    private static long num(Object o) {
        return o instanceof Long ? (Long) o : 0;
    }

    /** A group member in its own process, writing its records (jsonl with delivery times) to a file. */
    static final class Member {
        final String lang;
        final Path out;
        final Path err;
        final Process proc;

        Member(Broker b, String lang, String topic, String group, Path out, String... extra) throws IOException, InterruptedException {
            this.lang = lang;
            this.out = out;
            this.err = Path.of(out + ".err");
            List<String> cmd = new ArrayList<>();
            if (lang.equals("java")) {
                cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
                cmd.addAll(List.of("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp",
                        System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")), "dev.pctl.cli.Consume",
                        "--server", b.url, "--creds", b.consumer.toString(), "--topic", topic, "--group", group, "--verbose"));
            } else if (lang.equals("go")) {
                cmd.addAll(List.of(Broker.pctl().toString(), "consume", topic, "--group", group, "--format", "jsonl", "--timestamps", "--server", b.url,
                        "--creds", b.consumer.toString()));
            } else {
                throw new IllegalArgumentException(lang);
            }
            cmd.addAll(List.of(extra));
            this.proc = new ProcessBuilder(cmd).redirectOutput(out.toFile()).redirectError(err.toFile()).start();
        }

        /** Every complete line written so far. */
        List<Delivery> records() throws Exception {
            List<Delivery> ds = new ArrayList<>();
            String s = Files.readString(out, StandardCharsets.UTF_8);
            int start = 0;
            int nl;
            while ((nl = s.indexOf('\n', start)) >= 0) {
                ds.add(parseLine(s.substring(start, nl)));
                start = nl + 1;
            }
            return ds;
        }

        /** SIGTERM (the member commits and leaves), then waits. */
        int stop() throws InterruptedException {
            if (proc.isAlive()) {
                proc.destroy();
            }
            if (!proc.waitFor(30, TimeUnit.SECONDS)) {
                proc.destroyForcibly();
                proc.waitFor();
            }
            return proc.exitValue();
        }

        /** SIGKILL: no commit, no goodbye. */
        void kill9() throws InterruptedException {
            proc.destroyForcibly();
            proc.waitFor();
        }

        String log() {
            try {
                String s = Files.readString(err);
                return s.length() > 2000 ? s.substring(s.length() - 2000) : s;
            } catch (IOException e) {
                return "";
            }
        }
    }

    /**
     * Waits until partitions 0..n-1 of the group have {@code owners} distinct owners (read from the
     * group state): every member has joined and taken its share.
     */
    static void waitOwners(Broker b, String topic, String group, int n, int owners, Duration timeout) throws Exception {
        try (PctlClient c = PctlClient.connect(b.options(b.consumer))) {
            String id = c.topic(topic).id();
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            long deadline = System.nanoTime() + timeout.toNanos();
            Set<String> seen = new HashSet<>();
            while (System.nanoTime() < deadline) {
                seen.clear();
                for (int q = 0; q < n; q++) {
                    GroupKv.Entry e = kv.get(id + "." + group + ".p." + q);
                    if (e != null) {
                        Object o = JsApi.parseObject(e.value(), "state").get("owner");
                        if (o instanceof String && !((String) o).isEmpty()) {
                            seen.add((String) o);
                        }
                    }
                }
                if (seen.size() >= owners) {
                    return;
                }
                Thread.sleep(200);
            }
            throw new AssertionError("the group's partitions have owners " + seen + ", not " + owners + " members, after " + timeout);
        }
    }

    /** Waits until the members together delivered every (producer, pseq) of want. */
    static Set<String> waitDelivered(List<Member> ms, Set<String> want, Duration timeout) throws Exception {
        long deadline = System.nanoTime() + timeout.toNanos();
        Set<String> got = new HashSet<>();
        while (System.nanoTime() < deadline) {
            got.clear();
            for (Member m : ms) {
                for (Delivery d : m.records()) {
                    got.add(d.producer() + "/" + d.pseq());
                }
            }
            if (got.containsAll(want)) {
                return got;
            }
            Thread.sleep(200);
        }
        return got;
    }

    /** Every delivery of the members, in delivery order (by their timestamps). */
    static List<Delivery> merged(List<Member> ms) throws Exception {
        List<Delivery> all = new ArrayList<>();
        for (Member m : ms) {
            all.addAll(m.records());
        }
        all.sort((x, y) -> Long.compare(x.ts(), y.ts()));
        return all;
    }

    /** pctl verify of a group's member outputs against a sent log. */
    static Broker.Result verify(Broker b, Path sent, String group, List<Member> ms, String... extra) throws Exception {
        List<String> args = new ArrayList<>(List.of("verify", "--sent", sent.toString()));
        for (Member m : ms) {
            args.add("--delivered");
            args.add(group + "=" + m.out);
        }
        args.addAll(List.of(extra));
        return b.run(null, false, args.toArray(new String[0]));
    }

    static File tmp(Broker b, String name) {
        return b.dir.resolve(name).toFile();
    }
}
