package dev.pctl;

import static dev.pctl.Groups.produce;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.KeyValue;
import io.nats.client.api.KeyValueEntry;
import io.nats.client.api.KeyValueOperation;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A member takes the create path only when a write that JetStream stores only while g.created has
 * no message proves its group absent (spec/protocol.md §6.1, "Proving that the group does not
 * exist"), not on a get that finds nothing (a lagging follower answers direct gets). Against a
 * real broker, with the member's first get of g.created answering "not found" (what a follower
 * that lags answers; every other request goes to the real server). The same cases as the Go
 * client's TestJoinCreatesOnlyAProvenAbsentGroup: later-epoch (a group created from now before a
 * grow must get no keys for the grow's streams: the old rule created them at the streams' last
 * sequence, and the group would skip the records in them), from-beginning (a group created from
 * the beginning must get no g.start: the old rule made one, and the group's start changed), and a
 * new group (created, with a key for every existing stream). Keys are read back with jnats's KV.
 */
@Tag("broker")
class GroupCreateTest {
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

    /** The group bucket as a lagging follower answers it: the first get of {@code marker} finds nothing. */
    private static final class MissedMarker extends GroupKv {
        private final String marker;
        private boolean missed;

        MissedMarker(PctlClient c, String marker) {
            super(c, Duration.ofSeconds(10));
            this.marker = marker;
        }

        @Override
        Entry get(String key) {
            if (key.equals(marker) && !missed) {
                missed = true;
                return null;
            }
            return super.get(key);
        }
    }

    /** A member's join (the decision, then the read of the group's keys) with its first get of g.created missing. */
    private static Consumer.GroupKeys join(PctlClient c, String topic, ConsumerOptions o) {
        TopicDescriptor d = Consumer.fetchTopic(c, topic, Duration.ofSeconds(10));
        String prefix = d.id() + "." + o.group() + ".";
        GroupKv kv = new MissedMarker(c, prefix + "g.created");
        Consumer.ensureGroup(c, kv, d, o, Duration.ofSeconds(10), s -> {});
        return Consumer.readGroupKeys(kv, prefix, o.group(), Duration.ofSeconds(30));
    }

    private static String value(KeyValue nkv, String key) throws Exception {
        KeyValueEntry e = nkv.get(key);
        return e == null || e.getOperation() != KeyValueOperation.PUT ? null : new String(e.getValue(), StandardCharsets.UTF_8);
    }

    private static List<ProducerRecord> records(int n) {
        List<ProducerRecord> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(ProducerRecord.keyed("k" + i, "v"));
        }
        return out;
    }

    @Test
    void aMemberCreatesOnlyAGroupProvenAbsent() throws Exception {
        broker.pctlOk(null, "topic", "create", "grown", "--partitions", "2", "--partitioner", "kafka-murmur2");
        broker.pctlOk(null, "topic", "create", "fresh", "--partitions", "2", "--partitioner", "kafka-murmur2");
        produce(broker, "grown", "p1", records(40));
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            // Two groups exist before the grow: "now" (from now) and "begin" (from the beginning).
            TopicDescriptor d = Consumer.fetchTopic(c, "grown", Duration.ofSeconds(10));
            GroupKv plain = new GroupKv(c, Duration.ofSeconds(10));
            Consumer.ensureGroup(c, plain, d, ConsumerOptions.builder("now").build(), Duration.ofSeconds(10), s -> {});
            Consumer.ensureGroup(c, plain, d, ConsumerOptions.builder("begin").start("beginning").build(), Duration.ofSeconds(10), s -> {});
        }
        broker.pctlOk(null, "topic", "repartition", "grown", "--partitions", "4");
        produce(broker, "grown", "p2", records(60));
        produce(broker, "fresh", "p3", records(30));
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            KeyValue nkv = c.connection().keyValue(GroupKv.BUCKET);
            String tid = Consumer.fetchTopic(c, "grown", Duration.ofSeconds(10)).id();
            List<String> failures = new ArrayList<>();

            // later-epoch
            join(c, "grown", ConsumerOptions.builder("now").build());
            for (int q = 2; q < 4; q++) {
                String v = value(nkv, tid + ".now.p." + q);
                if (v != null) {
                    failures.add("later-epoch: partition " + q + " (created by the grow, after the group) has a key " + v + ": the group would skip the records before it");
                }
            }

            // from-beginning
            Consumer.GroupKeys gk = join(c, "grown", ConsumerOptions.builder("begin").start("current-epoch").build());
            String st = value(nkv, tid + ".begin.g.start");
            if (st != null || gk.start() != null) {
                failures.add("from-beginning: a group created from the beginning has a g.start " + st + ": its start changed");
            }

            // new group
            String ftid = Consumer.fetchTopic(c, "fresh", Duration.ofSeconds(10)).id();
            gk = join(c, "fresh", ConsumerOptions.builder("new").assignor("sticky").build());
            for (int q = 0; q < 2; q++) {
                String v = value(nkv, ftid + ".new.p." + q);
                long last = c.connection().jetStreamManagement().getStreamInfo("PCTL_fresh_" + q).getStreamState().getLastSequence();
                assertTrue(last > 0);
                if (v == null) {
                    failures.add("new group: partition " + q + " has no key");
                } else if (((Number) ((Map<?, ?>) Json.parse(v)).get("position")).longValue() != last) {
                    failures.add("new group: partition " + q + " starts at " + v + ", want its last sequence " + last + " (from now)");
                }
            }
            assertNotNull(value(nkv, ftid + ".new.g.created"), "new group: no g.created");
            assertNotNull(gk.assignor(), "new group: no g.assignor");
            assertEquals("{\"assignor\":\"sticky\"}", new String(gk.assignor().value(), StandardCharsets.UTF_8));
            assertNull(failures.isEmpty() ? null : String.join("\n", failures));
        }
    }
}
