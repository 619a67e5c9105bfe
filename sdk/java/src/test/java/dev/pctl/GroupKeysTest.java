package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.KeyValue;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A member takes its group's g.start and g.assignor only from a state that holds g.created
 * (spec/protocol.md §6.1, "Reading the group's keys at join"), against a real broker: while only
 * g.start and g.assignor exist (a creator between its writes, or a replica that lags behind them)
 * the read goes on; once g.created exists it returns both; a deleted key reads as absent; with no
 * keys at all it gives up with unavailable. The keys are written with jnats's own KeyValue, not
 * the SDK's GroupKv. The same three cases as the Go client's TestReadGroupKeysWaitsForTheMarker.
 * The cluster failure this guards against (a lagging follower answering "not found" for a g.start
 * that exists) needs a lagging replica at the right moment; the rule that prevents it is what is
 * checked here.
 */
@Tag("broker")
class GroupKeysTest {
    private static final byte[] START = "{\"from\":\"current-epoch\",\"epoch\":3}".getBytes(StandardCharsets.UTF_8);
    private static final byte[] ASSIGNOR = "{\"assignor\":\"sticky\"}".getBytes(StandardCharsets.UTF_8);
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

    private static String tid() {
        return "T" + UUID.randomUUID().toString().replace("-", "").substring(0, 8);
    }

    @Test
    void waitsForGCreatedThenReturnsBoth() throws Exception {
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            KeyValue nkv = c.connection().keyValue(GroupKv.BUCKET);
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            // A first read of a complete group (not timed): the classes loaded, the connection warm.
            String w = tid() + ".g0.";
            nkv.put(w + "g.created", "now".getBytes(StandardCharsets.UTF_8));
            Consumer.readGroupKeys(kv, w, "g0", Duration.ofSeconds(30));
            String p = tid() + ".g1.";
            nkv.put(p + "g.start", START);
            nkv.put(p + "g.assignor", ASSIGNOR);
            AtomicLong doneAt = new AtomicLong();
            CompletableFuture<Consumer.GroupKeys> f = CompletableFuture.supplyAsync(() -> {
                Consumer.GroupKeys r = Consumer.readGroupKeys(kv, p, "g1", Duration.ofSeconds(30));
                doneAt.set(System.nanoTime());
                return r;
            });
            Thread.sleep(300); // several reads, each without g.created
            assertFalse(f.isDone(), () -> "returned " + (f.isCompletedExceptionally() ? "an error" : f.join()) + " while g.created did not exist");
            long before = System.nanoTime();
            nkv.put(p + "g.created", "now".getBytes(StandardCharsets.UTF_8));
            Consumer.GroupKeys gk = f.get(10, TimeUnit.SECONDS);
            assertTrue(doneAt.get() > before, "the read returned before g.created was written");
            assertNotNull(gk.start(), "g.start");
            assertArrayEquals(START, gk.start().value());
            assertNotNull(gk.assignor(), "g.assignor");
            assertArrayEquals(ASSIGNOR, gk.assignor().value());
        }
    }

    @Test
    void aDeletedAssignorAndNoStartReadAsAbsent() throws Exception {
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            KeyValue nkv = c.connection().keyValue(GroupKv.BUCKET);
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            String p = tid() + ".g2.";
            nkv.put(p + "g.assignor", ASSIGNOR);
            nkv.delete(p + "g.assignor");
            nkv.put(p + "g.created", "now".getBytes(StandardCharsets.UTF_8));
            Consumer.GroupKeys gk = Consumer.readGroupKeys(kv, p, "g2", Duration.ofSeconds(30));
            assertNull(gk.start(), "g.start");
            assertNull(gk.assignor(), "g.assignor");
        }
    }

    @Test
    void noKeysGivesUpWithUnavailable() throws Exception {
        try (PctlClient c = PctlClient.connect(broker.options(broker.admin))) {
            GroupKv kv = new GroupKv(c, Duration.ofSeconds(5));
            String p = tid() + ".g3.";
            UnavailableException e = assertThrows(UnavailableException.class, () -> Consumer.readGroupKeys(kv, p, "g3", Duration.ofMillis(500)));
            assertEquals("unavailable", e.code().wire(), e.getMessage());
        }
    }
}
