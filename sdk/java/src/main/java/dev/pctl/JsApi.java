package dev.pctl;

import dev.pctl.internal.Json;
import io.nats.client.Message;
import io.nats.client.impl.Headers;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The few JetStream API requests the consumer makes, on raw NATS requests (so that every subject
 * is the one spec/protocol.md §8.2 lets a scoped credential use, and every request has its own
 * time limit). Internal.
 */
final class JsApi {
    static final int STREAM_NOT_FOUND = 10059;
    static final int CONSUMER_NOT_FOUND = 10014;
    static final int NO_MESSAGE = 10037;
    static final int WRONG_LAST_SEQ = 10071;
    /** "wrong last sequence" without the sequence: a replicated stream's leader refusing a
     *  compare-and-set while a write of the subject it checks is in flight. */
    static final int WRONG_LAST_SEQ_CONSTANT = 10164;

    private JsApi() {}

    /** An error reply of the JetStream API: {@code code} (HTTP-like) and {@code errCode} (JetStream's). */
    static final class JsError extends Exception {
        private static final long serialVersionUID = 1L;
        final int code;
        final int errCode;
        final String description;

        JsError(String subject, int code, int errCode, String description) {
            super(subject + ": JetStream error " + errCode + ": " + description);
            this.code = code;
            this.errCode = errCode;
            this.description = description;
        }
    }

    /**
     * A JetStream API request with a JSON (or raw) body; returns the JSON reply. An error reply is
     * a {@link JsError}; a subject the credentials may not use a {@link PermissionDeniedException};
     * no answer in time an {@link UnavailableException}.
     */
    static Map<String, Object> request(PctlClient c, String subject, Headers h, byte[] body, Duration timeout) throws JsError {
        Message m = c.rawRequest(subject, h, body, timeout);
        if (m.isStatusMessage()) {
            throw new UnavailableException(subject + ": status " + m.getStatus().getMessageWithCode());
        }
        Map<String, Object> r = parseObject(m.getData(), subject);
        Object err = r.get("error");
        if (err instanceof Map) {
            Map<?, ?> e = (Map<?, ?>) err;
            throw new JsError(subject, (int) num(e.get("code")), (int) num(e.get("err_code")), String.valueOf(e.get("description")));
        }
        return r;
    }

    static Map<String, Object> request(PctlClient c, String subject, Map<String, Object> body, Duration timeout) throws JsError {
        return request(c, subject, null, Json.write(body).getBytes(StandardCharsets.UTF_8), timeout);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> parseObject(byte[] data, String what) {
        if (data == null || data.length == 0) {
            return Collections.emptyMap();
        }
        Object v;
        try {
            v = Json.parse(new String(data, StandardCharsets.UTF_8));
        } catch (Json.JsonException e) {
            throw new InternalException(what + ": a reply that is not JSON: " + e.getMessage());
        }
        if (!(v instanceof Map)) {
            throw new InternalException(what + ": a reply that is not a JSON object");
        }
        return (Map<String, Object>) v;
    }

    /** A JSON number as a long (0 when absent or not a number). */
    static long num(Object o) {
        if (o instanceof Long) {
            return (Long) o;
        }
        if (o instanceof Double) {
            return (long) (double) (Double) o;
        }
        return 0;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object o) {
        return o instanceof Map ? (Map<String, Object>) o : Collections.emptyMap();
    }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object o) {
        return o instanceof List ? (List<Object>) o : Collections.emptyList();
    }

    /** The last sequence of a stream (0 for a stream that does not exist). */
    static long lastSeq(PctlClient c, String stream, Duration timeout) {
        try {
            Map<String, Object> info = request(c, "$JS.API.STREAM.INFO." + stream, null, new byte[0], timeout);
            return num(obj(info.get("state")).get("last_seq"));
        } catch (JsError e) {
            if (e.errCode == STREAM_NOT_FOUND) {
                return 0;
            }
            throw new UnavailableException("read the state of " + stream + ": " + e.getMessage());
        }
    }

    /**
     * Creates a short-lived consumer of our own on {@code stream}: no acknowledgements, in memory,
     * one replica, gone after {@code inactiveNanos} unused, reading {@code filter} (sent in the
     * create subject too, as scoped credentials require, spec/protocol.md §8.2) from where {@code
     * deliver} says ({@code deliver_policy} and its options). Returns JetStream's reply.
     */
    static Map<String, Object> createEphemeral(PctlClient c, String stream, String name, String filter, Map<String, Object> deliver,
            long inactiveNanos, Duration timeout) throws JsError {
        Map<String, Object> cfg = new LinkedHashMap<>();
        cfg.put("name", name);
        cfg.put("ack_policy", "none");
        cfg.putAll(deliver);
        cfg.put("mem_storage", true);
        cfg.put("num_replicas", 1);
        cfg.put("inactive_threshold", inactiveNanos);
        cfg.put("filter_subject", filter);
        Map<String, Object> req = new LinkedHashMap<>();
        req.put("stream_name", stream);
        req.put("config", cfg);
        req.put("action", "create");
        return request(c, "$JS.API.CONSUMER.CREATE." + stream + "." + name + "." + filter, req, timeout);
    }

    /** Now as RFC 3339 (UTC, nanoseconds as Go writes them, trailing zeros dropped). */
    static String now() {
        return Instant.now().toString();
    }
}
