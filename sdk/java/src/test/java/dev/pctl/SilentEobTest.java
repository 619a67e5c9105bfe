package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

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
@Tag("broker")
class SilentEobTest {
    /** The spec's bound (§5.1.2, settle 1): the read-back comes after 3 unanswered EOBs. */
    private static final int SPEC_SILENT_EOBS = 3;

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
    void settleReadsBackWhenTheEobIsNeverAnswered() throws Exception {
        String topic = "silenteob";
        broker.pctlOk(null, "topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2");
        ClientOptions opts = ClientOptions.builder().server(broker.url).creds(broker.producer).ackTimeout(Duration.ofMillis(300)).build();
        try (PctlClient pc = PctlClient.connect(opts);
                PctlClient admin = PctlClient.connect(broker.options(broker.admin));
                Producer p = pc.producer(topic, ProducerOptions.builder().id(topic + "-p").build())) {
            int epoch = pc.topic(topic).current().number();
            String stream = "PCTL_" + topic + "_0";
            String subject = "pctl.data." + topic + "." + epoch + ".0";
            // The EOB subject: a real subscriber takes every EOB and answers none.
            String silent = "pctl.data." + topic + ".silent.0";
            AtomicInteger eobs = new AtomicInteger();
            Dispatcher dispatcher = admin.connection().createDispatcher(m -> eobs.incrementAndGet());
            dispatcher.subscribe(silent);
            admin.connection().flush(Duration.ofSeconds(5));

            long floor = publish(pc.connection(), subject, "someone else's".getBytes(StandardCharsets.UTF_8), null);
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
                at[i] = publish(pc.connection(), subject, ("value " + (i + 1)).getBytes(StandardCharsets.UTF_8), Producer.headerBlockForTest(recs.get(i)));
            }

            long start = System.nanoTime();
            Producer.SettledForTest r = p.settleForTest(epoch, 0, floor, silent, recs, Duration.ofSeconds(15));
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
}
