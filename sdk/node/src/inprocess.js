// The rule for JetStream's "duplicate message id is in process" (API error 10158), spec/protocol.md
// §5.1.5. On a cluster the stream leader marks a publish's Nats-Msg-Id as being stored when it
// proposes the message; a proposal a leader change dropped is never applied, and the id stays
// marked until the stream's duplicate window (2 minutes) forgets it: every publish with that id is
// refused with 10158 meanwhile, although nothing of it may be stored. The sink counts each
// record's 10158 answers with InProcess; at IN_PROCESS_LIMIT the id is stuck, and since a fast
// batch has no expected-sequence guard to renew the id under, the sink fails the record with
// MsgIdInProcessError unless settling finds it stored. It never renews an id on 10158 alone (a
// hole's new token after a read-back, §5.1.2, is no such renewal: the new id counts afresh). The
// Go reference is internal/produce/inprocess.go.

import { MsgIdInProcessError } from './errors.js';

/** JetStream's API error code "duplicate message id is in process". */
export const ERR_MSG_ID_IN_PROCESS = 10158;

/** How many 10158 answers for one message id make the id stuck (spec/protocol.md §5.1.5). */
export const IN_PROCESS_LIMIT = 4;

/**
 * Counts one message id's 10158 answers. Other answers in between (a wrong last sequence, no
 * answer) do not start the count again: a stuck id can be answered 10158 and something else by
 * turns, and neither says that the proposal is decided. A new id (renewed) starts a count of its
 * own: the rule counts per message id.
 */
export class InProcess {
  constructor() { this.n = 0; }

  /**
   * Takes one answer for the id (code: its JetStream API error code; 0 for no answer, a timeout
   * or a lost connection) and returns whether the id is now stuck.
   */
  note(code) {
    if (code === ERR_MSG_ID_IN_PROCESS) this.n++;
    return this.stuck;
  }

  /** The id was replaced by a new one: its count starts again. */
  renewed() { this.n = 0; }

  /** The number of 10158 answers for the id so far. */
  get count() { return this.n; }

  /** Whether the id is stuck: IN_PROCESS_LIMIT 10158 answers or more. */
  get stuck() { return this.n >= IN_PROCESS_LIMIT; }
}

/**
 * The error of a record failed by the rule: code `unavailable` (its fate is unknown), and a
 * message that says what failed and what to do.
 */
export function inProcessError(pseq, msgId, partition, answers) {
  return new MsgIdInProcessError(
    `JetStream keeps answering 'duplicate message id is in process' (${ERR_MSG_ID_IN_PROCESS}): record ${pseq} (id ${msgId}) refused ${answers} times by partition ${partition} as 'in process'; a raft proposal with this id is undecided (its stream leader cannot reach its followers) or was lost in a leader change, and the server refuses the id until its duplicate window (2 minutes) ends. The record's fate is unknown (it may be stored): read partition ${partition} to check before producing it again`,
    { msgId, partition, answers },
  );
}
