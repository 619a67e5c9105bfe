package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The nativeBuiltins switch against a real broker: off by default; on, a topic of the built-in
 * partitions natively and a topic of another module computing the same function does not; the
 * records land where {@code pctl partition} says.
 */
@Tag("broker")
class NativeBuiltinsBrokerTest {
    private static Broker broker;

    @BeforeAll
    static void start() throws Exception {
        broker = Broker.start();
        broker.pctlOk(null, "topic", "create", "nat", "--partitions", "5", "--partitioner", "kafka-murmur2");
        String up = broker.pctlOk(null, "plugin", "upload", Repo.path("plugins/murmur2/kafka-murmur2-rust.wasm").toString(), "--json");
        @SuppressWarnings("unchecked")
        String digest = (String) ((java.util.Map<String, Object>) Json.parse(up)).get("digest");
        broker.pctlOk(null, "topic", "create", "usr", "--partitions", "5", "--partitioner", digest);
    }

    @AfterAll
    static void stop() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    @Test
    void offByDefaultAndOnlyForTheBuiltinsDigest() throws Exception {
        ClientOptions on = ClientOptions.builder().server(broker.url).creds(broker.producer).nativeBuiltins(true).build();
        assertFalse(ClientOptions.defaults().nativeBuiltins(), "off by default");
        List<String> keys = new ArrayList<>();
        List<CompletableFuture<RecordMetadata>> fs = new ArrayList<>();
        try (PctlClient off = PctlClient.connect(broker.options(broker.producer)); PctlClient c = PctlClient.connect(on)) {
            assertFalse(off.partitioner(off.topic("nat").current().partitioner()).isNative(), "default: the module runs");
            assertTrue(c.partitioner(c.topic("nat").current().partitioner()).isNative(), "nativeBuiltins and the built-in's digest: native");
            assertFalse(c.partitioner(c.topic("usr").current().partitioner()).isNative(), "another module of the same function: still the module");
            try (Producer p = c.producer("nat", ProducerOptions.builder().id("native-1").build())) {
                for (int i = 0; i < 100; i++) {
                    keys.add("user-" + i);
                    fs.add(p.send(ProducerRecord.keyed("user-" + i, "v")));
                }
                p.flush();
            }
        }
        String[] want = broker.pctlOffline(String.join("\n", keys) + "\n", "partition", "--plugin", "kafka-murmur2", "--partitions", "5").trim().split("\n");
        for (int i = 0; i < keys.size(); i++) {
            assertEquals(Integer.parseInt(want[i]), fs.get(i).join().partition(), keys.get(i));
        }
    }
}
