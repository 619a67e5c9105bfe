package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A group whose recorded assignor this SDK does not implement (spec/protocol.md §6.1) is refused
 * with the error of code {@code unsupported} (§3), as its own class, against a real broker: the
 * group's {@code g.assignor} key names "round-robin" before any member joins. Before, Java raised
 * it as an internal error.
 */
@Tag("broker")
class UnknownAssignorTest {
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
    void aGroupWithAnUnknownAssignorIsUnsupported() throws Exception {
        String topic = "rr";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "2", "--partitioner", "kafka-murmur2");
        try (PctlClient c = PctlClient.connect(broker.options(broker.consumer))) {
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            kv.create(c.topic(topic).id() + ".rr.g.assignor", "{\"assignor\":\"round-robin\"}".getBytes(StandardCharsets.UTF_8));
            UnsupportedException e = assertThrows(UnsupportedException.class,
                    () -> c.consumer(topic, ConsumerOptions.builder("rr").member("a").build()).close());
            assertEquals(ErrorCode.UNSUPPORTED, e.code());
            assertTrue(e.getMessage().contains("round-robin") && e.getMessage().contains("another group"), e.getMessage());
        }
    }
}
