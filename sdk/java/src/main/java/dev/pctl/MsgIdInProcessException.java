package dev.pctl;

/**
 * One record: JetStream kept refusing its message id as "duplicate message id is in process" (API
 * error 10158, spec/protocol.md §5.1.5), so the producer stopped re-sending it. Its fate is unknown
 * (it may be stored): read the partition before producing it again. Its code is
 * {@code unavailable}: it is an {@link UnavailableException}, and crosses the wire (from the
 * produce service) as {@code unavailable}.
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
