package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.nats.client.Connection;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
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
 * The read-back's end (spec/protocol.md §5.1.2, "the read-back's end"): a batch read back after a
 * leader change (confirm) gives every record it does not find a new deduplication id, so a stored
 * record the read misses is stored a second time. The read must not end at the stream info's last
 * sequence: while a stream has no leader, nats-server answers STREAM.INFO from every member with
 * its own state, and a member that lags names a last sequence below records already stored. Here
 * the read (the sink's readBack) is given such a last sequence against a real broker, whose
 * STREAM.MSG.GET answers stand for the leader's: the record stored above it must be found. The
 * same when the stream's last message is gone (the leader names no last message: the read goes on
 * with next_by_subj), and a record that is not stored must not be found. As the Go producer's
 * TestReadBackReachesTheLeadersEnd (internal/produce/holepath_test.go).
 */
class ReadBackTest {
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

    /**
     * before: other messages stored before the record; stored: whether the record is stored
     * (after them); after: messages stored after it, deleted when gone; infoLast: the last
     * sequence the stream info named (a lagging member's), counted from the stream's start.
     */
    private record Case(String name, int before, boolean stored, int after, boolean gone, long infoLast) {}

    @Test
    @Tag("broker")
    void readBackReachesTheStreamLeadersEnd() throws Exception {
        List<Case> cases = List.of(
                new Case("info-lags-behind-the-record", 3, true, 0, false, 3),
                new Case("info-lags-last-message-gone", 3, true, 2, true, 3),
                new Case("empty-stream-info-lags", 0, true, 0, false, 0),
                new Case("not-stored", 3, false, 1, true, 3),
                new Case("info-current", 3, true, 1, false, 5));
        List<String> failures = new ArrayList<>();
        try (PctlClient pc = PctlClient.connect(broker.options(broker.producer));
                PctlClient admin = PctlClient.connect(broker.options(broker.admin))) {
            for (int n = 0; n < cases.size(); n++) {
                Case tc = cases.get(n);
                String topic = "rbj" + n;
                broker.pctlOk(null, "topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2");
                try (Producer p = pc.producer(topic, ProducerOptions.builder().id(topic + "-p").build())) {
                    int epoch = pc.topic(topic).current().number();
                    String stream = "PCTL_" + topic + "_0";
                    String subject = "pctl.data." + topic + "." + epoch + ".0";
                    long start = lastSeq(pc.connection(), stream);
                    for (int i = 0; i < tc.before(); i++) {
                        publish(pc.connection(), subject, ("other " + i).getBytes(StandardCharsets.UTF_8), null);
                    }
                    long floor = start + tc.before();
                    Object pd = p.recordForTest(ProducerRecord.keyed("k7", "value 7"));
                    long at = -1;
                    if (tc.stored()) {
                        at = publish(pc.connection(), subject, "value 7".getBytes(StandardCharsets.UTF_8), Producer.headerBlockForTest(pd));
                    }
                    List<Long> afters = new ArrayList<>();
                    for (int i = 0; i < tc.after(); i++) {
                        afters.add(publish(pc.connection(), subject, ("after " + i).getBytes(StandardCharsets.UTF_8), null));
                    }
                    if (tc.gone()) {
                        for (long seq : afters) {
                            Map<String, Object> r = request(admin.connection(), "$JS.API.STREAM.MSG.DELETE." + stream, "{\"seq\":" + seq + ",\"no_erase\":true}");
                            assertEquals(Boolean.TRUE, r.get("success"), "delete message " + seq + " of " + stream + ": " + r);
                        }
                        // The case this stands for: the leader names no last message, so the read goes on.
                        Map<String, Object> last = request(pc.connection(), "$JS.API.STREAM.MSG.GET." + stream, "{\"last_by_subj\":\">\"}");
                        assertEquals(10037L, JsApi.num(JsApi.obj(last.get("error")).get("err_code")), tc.name() + ": the stream leader still names a last message: " + last);
                    }
                    long known = start + tc.infoLast();
                    long got = p.readBackForTest(epoch, 0, floor, known, pd);
                    if (tc.stored() && got < 0) {
                        failures.add(tc.name() + ": the record stored at " + at + " was not found by a read whose stream info named last sequence " + known
                                + ": confirm would give it a new id and it would be stored twice");
                    } else if (tc.stored() && got != at) {
                        failures.add(tc.name() + ": the record stored at " + at + " was found at " + got);
                    } else if (!tc.stored() && got >= 0) {
                        failures.add(tc.name() + ": a record that is not stored was found at " + got);
                    }
                }
            }
        }
        assertTrue(failures.isEmpty(), String.join("\n", failures));
    }

    private static long lastSeq(Connection nc, String stream) throws Exception {
        return JsApi.num(JsApi.obj(request(nc, "$JS.API.STREAM.INFO." + stream, "").get("state")).get("last_seq"));
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

    private static Map<String, Object> request(Connection nc, String subject, String body) throws Exception {
        Message m = nc.request(subject, body.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(5));
        assertTrue(m != null, "no answer to " + subject);
        return JsApi.parseObject(m.getData(), subject);
    }
}
