package dev.pctl;

import dev.pctl.internal.Json;

/**
 * One record: JetStream kept refusing its message id as "duplicate message id is in process" (API
 * error 10158, spec/protocol.md §5.1.5), so the producer stopped re-sending it. Its fate is unknown
 * (it may be stored): read the partition before producing it again. Its code is
 * {@code unavailable}: it is an {@link UnavailableException}; it crosses the wire (from the
 * produce service) as {@code unavailable} with the detail {@code "in_process": true}
 * (spec/protocol.md §3), which {@link PctlException#fromReply} maps back to this class. A thin
 * client does not re-send such a record under the same identity (§5.2 step 5).
 */
public class MsgIdInProcessException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    private final String msgId;
    private final int partition;
    private final int answers;

    /** An error for the record with Nats-Msg-Id msgId that partition refused answers times. */
    public MsgIdInProcessException(String message, String msgId, int partition, int answers) {
        super(message, null, null);
        this.msgId = msgId;
        this.partition = partition;
        this.answers = answers;
    }

    private MsgIdInProcessException(String message, String msgId, int partition, String detail) {
        super(message, detail, null);
        this.msgId = msgId;
        this.partition = partition;
        this.answers = 0;
    }

    /**
     * The error of a produce service's reply (or a batched record's error) with code
     * {@code unavailable} whose raw JSON detail has {@code "in_process": true}, else null. Its
     * {@link #answers()} is 0: the wire does not say.
     */
    static MsgIdInProcessException fromReply(String message, String detail) {
        if (detail == null) {
            return null;
        }
        Object v;
        try {
            v = Json.parse(detail);
        } catch (Json.JsonException e) {
            return null;
        }
        if (!(v instanceof java.util.Map<?, ?> d) || !Boolean.TRUE.equals(d.get("in_process"))) {
            return null;
        }
        int partition = d.get("partition") instanceof Long n ? n.intValue() : -1;
        String msgId = d.get("msg_id") instanceof String s ? s : "";
        Object epoch = d.get("epoch");
        return new MsgIdInProcessException(message + " (not to be re-sent under the same identity, spec/protocol.md §5.2: the stream refuses its id "
                + msgId + " for its duplicate window, 2 minutes; the record's fate is unknown: read partition " + partition + " of epoch " + epoch
                + " before producing it again, as a new record)", msgId, partition, detail);
    }

    /** The record's Nats-Msg-Id. */
    public String msgId() {
        return msgId;
    }

    /** The partition that refused the record. */
    public int partition() {
        return partition;
    }

    /** How many 10158 answers the record's id got. */
    public int answers() {
        return answers;
    }
}
