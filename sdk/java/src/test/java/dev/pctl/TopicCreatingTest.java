package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.Message;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A topic whose creation has not finished is answered {@code unavailable} with the detail
 * {@code {"creating": true, "topic": T}} (spec/protocol.md §3), and the SDK waits for such a topic
 * by that detail, never by the message's words. The unfinished creation is a real descriptor with
 * {@code creating} set, written into the topics bucket with jnats, as a broker that died half way
 * leaves it; the real broker finishes it with its retry loop (every 2 s), and a producer started
 * meanwhile waits, then produces. Mutant shown failing: the producer's fetch not waiting on
 * {@link PctlException#topicCreating()} (the producer fails with UnavailableException).
 */
class TopicCreatingTest {
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

    @Test
    @SuppressWarnings("unchecked")
    void aTopicBeingCreatedHasItsDetailAndAProducerWaits() throws Exception {
        broker.pctlOk(null, "topic", "create", "done", "--partitions", "2", "--partitioner", "kafka-murmur2");
        try (PctlClient admin = PctlClient.connect(broker.options(broker.admin));
                PctlClient prod = PctlClient.connect(broker.options(broker.producer))) {
            Message m = admin.connection().request("pctl.api.topic.get", "{\"topic\":\"done\"}".getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(5));
            Map<String, Object> desc = (Map<String, Object>) ((Map<String, Object>) Json.parse(new String(m.getData(), StandardCharsets.UTF_8))).get("topic");
            String name = null;
            // The broker's retry loop may finish a creation between the write and the read: try
            // again under another name then.
            for (int i = 0; i < 5 && name == null; i++) {
                String n = "half" + i;
                Map<String, Object> half = new LinkedHashMap<>(desc);
                half.put("name", n);
                half.put("id", desc.get("id") + "h" + i);
                half.put("creating", true);
                admin.connection().jetStream().publish("$KV.pctl-topics." + n, Json.write(half).getBytes(StandardCharsets.UTF_8));
                try {
                    admin.topic(n);
                } catch (UnavailableException e) {
                    assertEquals(Map.of("creating", true, "topic", n), Json.parse(e.detail()), "the creating detail of spec/protocol.md §3");
                    assertTrue(e.topicCreating());
                    name = n;
                }
            }
            assertNotNull(name, "the topic was never seen being created");
            // Not by the words: an unavailable error that only says so is not a topic being created.
            assertFalse(new UnavailableException("topic " + name + " is being created; retry in a moment").topicCreating());
            try (Producer p = prod.producer(name, ProducerOptions.builder().id("java-creating").build())) {
                RecordMetadata r = p.send(ProducerRecord.keyed("k", "v")).get();
                assertEquals(1, r.epoch());
            }
        }
    }
}
