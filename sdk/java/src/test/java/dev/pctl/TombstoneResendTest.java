package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Message;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A tombstone re-sent into a later epoch carries the Nats-TTL of the descriptor it is re-sent
 * under (spec/protocol.md §10.2), not the one it was first made with. Unit level against a real
 * broker: the tombstone is sent while the producer switches epochs (held, its headers made under
 * the topic's own descriptor: delete retention 60 s), then placed as a repartition places held and
 * handed-back records, under a descriptor that holds tombstones (a backfill running: H = 100
 * years); the stored tombstone must carry H. The fence itself (a tombstone unacknowledged at it)
 * is arranged only by the Go client's TestTombstoneResentIntoNewEpochIsHeld; the conformance
 * suite's compacted row checks the TTL of every tombstone acknowledged while a backfill is held,
 * but does not force a re-send. Before the fix the producer kept the first header block and stored Nats-TTL 60.
 */
class TombstoneResendTest {
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
    @Tag("broker")
    void tombstonePlacedAgainGetsTheTtlOfTheDescriptorItIsSentUnder() throws Exception {
        String topic = "trsj";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2", "--compact", "--delete-retention", "60s");
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                Producer p = pc.producer(topic, ProducerOptions.builder().id("trsj-p").build())) {
            p.send(ProducerRecord.keyed("k", "old")).get(30, TimeUnit.SECONDS);
            p.switchingForTest(true);
            CompletableFuture<RecordMetadata> f = p.send(ProducerRecord.tombstone("k"));
            p.placeHeldForTest(3_153_600_000_000L); // spec §10.2's H
            RecordMetadata md = f.get(30, TimeUnit.SECONDS);
            String subj = "pctl.data." + topic + "." + md.epoch() + "." + md.partition() + "." + Compaction.keyToken("k".getBytes(StandardCharsets.UTF_8));
            Message m = pc.connection().request("$JS.API.DIRECT.GET.PCTL_" + topic + "_" + md.partition() + "." + subj, new byte[0], Duration.ofSeconds(5));
            assertTrue(m != null && m.getHeaders() != null && m.getHeaders().getFirst("Status") == null, subj);
            assertEquals("true", m.getHeaders().getFirst("Pctl-Tombstone"));
            assertEquals("trsj-p", m.getHeaders().getFirst("Pctl-Producer"));
            assertEquals("2", m.getHeaders().getFirst("Pctl-Seq"));
            assertEquals("3153600000", m.getHeaders().getFirst("Nats-TTL"),
                    "the TTL of the descriptor the tombstone was re-sent under (the hold), not the 60 s it was made with");
        }
    }
}
