package dev.pctl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.pctl.internal.Json;
import io.nats.client.Connection;
import io.nats.client.Dispatcher;
import io.nats.client.Message;
import io.nats.client.Nats;
import io.nats.client.Options;
import io.nats.client.impl.Headers;
import io.nats.client.impl.NatsMessage;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * A record whose Nats-Msg-Id is stuck "in process" (spec/protocol.md §5.1.5) is answered by the
 * produce service with code {@code unavailable} and the detail {@code {"in_process": true,
 * "partition", "epoch", "msg_id"}} (§3), as an error reply or as a record's {@code error} in a
 * batched reply (§5.2). A thin client MUST NOT re-send it under the same identity and fails it with
 * its in-process error (§5.2 step 5): here the SDK's request path ({@code PctlClient.request}) and
 * {@link PctlException#fromReply} (what decodes a batched result's error) must give a {@link
 * MsgIdInProcessException}. The replies come from a peer implementation of the produce service's
 * wire on a real broker's NATS: a responder on the produce subject of a broker id of its own
 * ({@code pctl.produce.<topic>.<B>}, which only broker B serves) sending the spec's reply bytes,
 * written here by hand. Mutant shown failing: fromReply ignoring the detail (a plain
 * UnavailableException, which a thin client retries).
 */
class ThinInProcessTest {
    private static final String SUBJECT = "pctl.produce.t.PEER1";
    private static final String MSG_ID = "p-7-00112233445566778899aabbccddeeff";
    private static final String DETAIL = "{\"in_process\":true,\"partition\":2,\"epoch\":1,\"msg_id\":\"" + MSG_ID + "\"}";
    private static final String ERROR = "{\"code\":\"unavailable\",\"message\":\"record 7 (id " + MSG_ID
            + ") refused 4 times by partition 2 as 'in process' (10158)\",\"detail\":" + DETAIL + "}";
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

    private static void checkStuck(Throwable e, String what) throws Exception {
        MsgIdInProcessException ip = assertInstanceOf(MsgIdInProcessException.class, e, what + ": want MsgIdInProcessException (§5.2 step 5)");
        assertInstanceOf(UnavailableException.class, e);
        assertEquals(ErrorCode.UNAVAILABLE, ip.code());
        assertEquals(2, ip.partition());
        assertEquals(MSG_ID, ip.msgId());
        assertEquals(Json.parse(DETAIL), Json.parse(ip.detail()));
        assertTrue(ip.getMessage().contains("read partition 2") && ip.getMessage().contains("before producing it again"), ip.getMessage());
    }

    @Test
    @Tag("broker")
    void aStuckRecordFromTheProduceServiceIsMsgIdInProcess() throws Exception {
        String seed = Files.readString(broker.admin).lines().filter(l -> l.startsWith("S")).findFirst().orElseThrow();
        Options o = new Options.Builder().server(broker.url).authHandler(Nats.staticCredentials(null, seed.toCharArray())).build();
        try (Connection peer = Nats.connect(o);
                PctlClient pc = PctlClient.connect(broker.options(broker.producer))) {
            Dispatcher d = peer.createDispatcher(m -> {
                Headers h = new Headers().put("Pctl-Broker", "PEER1");
                String body;
                if (m.getHeaders() != null && m.getHeaders().getFirst("Pctl-Batch") != null) {
                    body = "{\"results\":[{\"partition\":2,\"epoch\":1,\"seq\":5,\"duplicate\":false},{\"error\":" + ERROR
                            + "},{\"partition\":2,\"epoch\":1,\"seq\":6,\"duplicate\":false}],\"broker\":\"PEER1\"}";
                } else {
                    h.put("Pctl-Error", "unavailable");
                    body = ERROR;
                }
                peer.publish(NatsMessage.builder().subject(m.getReplyTo()).headers(h).data(body.getBytes(StandardCharsets.UTF_8)).build());
            });
            d.subscribe(SUBJECT);
            peer.flush(Duration.ofSeconds(5));

            // A single request's error reply.
            PctlException e = assertThrows(PctlException.class, () -> pc.request(SUBJECT, "v".getBytes(StandardCharsets.UTF_8)));
            checkStuck(e, "error reply");

            // A batched request: record 2 of 3 is stuck.
            Headers h = new Headers().put("Pctl-Batch", "3").put("Pctl-Producer", "p");
            Message r = pc.connection().request(NatsMessage.builder().subject(SUBJECT).headers(h).data(new byte[] {1}).build(), Duration.ofSeconds(10));
            Map<?, ?> rep = (Map<?, ?>) Json.parse(new String(r.getData(), StandardCharsets.UTF_8));
            List<?> results = (List<?>) rep.get("results");
            assertEquals(3, results.size());
            for (int i = 0; i < 3; i++) {
                Map<?, ?> res = (Map<?, ?>) results.get(i);
                Map<?, ?> err = (Map<?, ?>) res.get("error");
                if (i != 1) {
                    assertNull(err, "record " + i);
                    continue;
                }
                checkStuck(PctlException.fromReply((String) err.get("code"), (String) err.get("message"), Json.write(err.get("detail"))), "batched result");
            }
        }
    }

    @Test
    void anUnavailableWithoutTheDetailStaysRetryable() {
        PctlException e = PctlException.fromReply("unavailable", "no stream", "{\"in_process\":false}");
        assertSame(UnavailableException.class, e.getClass());
    }
}
