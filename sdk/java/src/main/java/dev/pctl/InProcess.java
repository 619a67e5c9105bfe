package dev.pctl;

/**
 * The rule for JetStream's "duplicate message id is in process" (API error 10158),
 * spec/protocol.md §5.1.5. On a cluster the stream leader marks a publish's Nats-Msg-Id as being
 * stored when it proposes the message; a proposal a leader change dropped is never applied, and
 * the id stays marked until the stream's duplicate window (2 minutes) forgets it: every publish
 * with that id is refused with 10158 meanwhile, although nothing of it may be stored. The
 * producer's sink counts each record's 10158 answers with one of these; at {@link #LIMIT} the id
 * is stuck, and since a fast batch has no expected-sequence guard to renew the id under, the sink
 * fails the record with {@link MsgIdInProcessException} unless settling finds it stored. It never
 * renews an id on 10158 alone (a hole's new token after a read-back, §5.1.2, is no such renewal:
 * the new id counts afresh). The Go reference is internal/produce/inprocess.go.
 *
 * <p>Other answers in between (a wrong last sequence, no answer) do not start the count again: a
 * stuck id can be answered 10158 and something else by turns, and neither says that the proposal
 * is decided. A new id ({@link #renewed}) starts a count of its own: the rule counts per message
 * id. Not thread-safe: the sink's thread owns it.
 */
final class InProcess {
    /** JetStream's API error code "duplicate message id is in process". */
    static final int ERR_MSG_ID_IN_PROCESS = 10158;
    /** How many 10158 answers for one message id make the id stuck (spec/protocol.md §5.1.5). */
    static final int LIMIT = 4;

    private int n;

    /**
     * Takes one answer for the id (code: its JetStream API error code; 0 for no answer, a timeout
     * or a lost connection) and returns whether the id is now stuck.
     */
    boolean note(int code) {
        if (code == ERR_MSG_ID_IN_PROCESS) {
            n++;
        }
        return stuck();
    }

    /** The id was replaced by a new one: its count starts again. */
    void renewed() {
        n = 0;
    }

    /** The number of 10158 answers for the id so far. */
    int count() {
        return n;
    }

    /** Whether the id is stuck: {@link #LIMIT} 10158 answers or more. */
    boolean stuck() {
        return n >= LIMIT;
    }

    /**
     * The error of a record failed by the rule: code {@code unavailable} (its fate is unknown), and
     * a message that says what failed and what to do.
     */
    static MsgIdInProcessException error(long pseq, String msgId, int partition, int answers) {
        return new MsgIdInProcessException(String.format(
                "JetStream keeps answering 'duplicate message id is in process' (%d): record %d (id %s) refused %d times by partition %d as 'in process'; a raft proposal with this id is undecided (its stream leader cannot reach its followers) or was lost in a leader change, and the server refuses the id until its duplicate window (2 minutes) ends. The record's fate is unknown (it may be stored): read partition %d to check before producing it again",
                ERR_MSG_ID_IN_PROCESS, pseq, msgId, answers, partition, partition), msgId, partition, answers);
    }
}
