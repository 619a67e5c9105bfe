package produce

import (
	"fmt"

	"pctl.dev/pctl/broker/wire"
)

// ErrCodeMsgIDInProcess is JetStream's "duplicate message id is in process" (API error 10158):
// the stream leader holds the publish's Nats-Msg-Id as being stored, without a stream sequence.
// On a cluster that is a raft proposal with the id still in flight (a leader cut off from its
// followers holds it so until it gives up its leadership, about 10 s), or one that a leader
// change dropped: the leader then refuses every re-send with that id until its duplicate window
// (2 minutes by default) forgets it (spec/protocol.md §5.1.5).
const ErrCodeMsgIDInProcess = 10158

// InProcessLimit is how many 10158 answers for one id make the id stuck (spec/protocol.md
// §5.1.5): a proposal in flight is decided in milliseconds, so after this many answers, with the
// back-off between them, the proposal is taken as lost.
const InProcessLimit = 4

// ErrMsgIDInProcess marks a record that the producer stopped re-sending because JetStream kept
// answering 10158 for its id (spec/protocol.md §5.1.5). Its fate is unknown: errors.Is(err,
// wire.ErrUnavailable) holds as well. It is wire.ErrMsgIDInProcess, so that the produce service's
// reply (code unavailable, detail in_process: spec/protocol.md §3) matches it at a thin client.
var ErrMsgIDInProcess = wire.ErrMsgIDInProcess

// InProcess is the one rule for 10158 that the producer engine and the broker's backfill share
// (spec/protocol.md §5.1.5). It counts one message id's 10158 answers; Note says when
// the id is stuck. A stuck id may then be renewed (re-sent under a new Nats-Msg-Id) only by a
// sender whose publish carries a guard that makes a second copy impossible: an expected last
// (subject) sequence the original publish was also sent with. If the lost-looking original is
// stored after all, the renewed publish is refused for the wrong last sequence, and the sender's
// usual wrong-last-sequence path reads what is stored and finds the original (the backfill's
// refused): no record stored twice, none lost, order kept. Without such a guard (the producer's
// fast batches: records are pipelined and other producers write to the same partition, so no
// expected sequence holds for a record) a new id could store the record twice; such a sender
// fails the record with ErrMsgIDInProcess instead of re-sending it until the duplicate window
// ends. The zero value is ready to use.
type InProcess struct {
	n int
}

// Note takes one answer for the id (code: its JetStream API error code; 0 for no answer, a
// timeout or a lost connection) and reports whether the id is now stuck: InProcessLimit 10158
// answers for it. Other answers in between do not start the count again: a stuck id whose
// expected sequence is also out of date can be answered 10158 and "wrong last sequence" by
// turns, and neither says the proposal is decided.
func (c *InProcess) Note(code int) bool {
	if code == ErrCodeMsgIDInProcess {
		c.n++
	}
	return c.n >= InProcessLimit
}

// Renewed starts the count again for a new id.
func (c *InProcess) Renewed() { c.n = 0 }

// Count is the number of 10158 answers for the id so far.
func (c *InProcess) Count() int { return c.n }

// InProcessError is the error of a record failed by the rule (no guard to renew it under): it
// matches ErrMsgIDInProcess and wire.ErrUnavailable (errors.Is), and says which id and partition.
// The produce service turns it into its reply's in_process detail (spec/protocol.md §3).
type InProcessError struct {
	Seq       uint64 // the record's sequence at its producer
	MsgID     string // its Nats-Msg-Id
	Partition int    // the partition that refused it
	Answers   int    // the 10158 answers it got
}

func (e *InProcessError) Error() string {
	return fmt.Sprintf("%v: %v: record %d (id %s) refused %d times by partition %d as 'in process'; a raft proposal with this id is undecided (its stream leader cannot reach its followers) or was lost in a leader change, and the server refuses the id until its duplicate window (2 minutes) ends. The record's fate is unknown (it may be stored): read partition %d to check before producing it again",
		wire.ErrUnavailable, ErrMsgIDInProcess, e.Seq, e.MsgID, e.Answers, e.Partition, e.Partition)
}

// Unwrap gives the two sentinels the error matches.
func (e *InProcessError) Unwrap() []error { return []error{wire.ErrUnavailable, ErrMsgIDInProcess} }

// inProcessError is the error of a record failed by the rule.
func inProcessError(seq uint64, id string, partition, answers int) error {
	return &InProcessError{Seq: seq, MsgID: id, Partition: partition, Answers: answers}
}
