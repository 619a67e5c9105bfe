"""The rule for JetStream's "duplicate message id is in process" (API error 10158),
spec/protocol.md §5.1.5.

On a cluster the stream leader marks a publish's ``Nats-Msg-Id`` as being stored when it proposes
the message; a proposal a leader change dropped is never applied, and the id stays marked until
the stream's duplicate window (2 minutes) forgets it: every publish with that id is refused with
10158 meanwhile, although nothing of it may be stored. The producer's sink counts each record's
10158 answers with :class:`InProcess`; at :data:`IN_PROCESS_LIMIT` the id is stuck, and since a
fast batch has no expected-sequence guard to renew the id under, the sink fails the record with
:class:`pctl.MsgIdInProcess` unless settling finds it stored. It never renews an id on 10158 alone
(a hole's new token after a read-back, §5.1.2, is no such renewal: the new id counts afresh). The
Go reference is internal/produce/inprocess.go."""

from __future__ import annotations

from .errors import MsgIdInProcess

ERR_MSG_ID_IN_PROCESS = 10158
"""JetStream's API error code "duplicate message id is in process"."""

IN_PROCESS_LIMIT = 4
"""How many 10158 answers for one message id make the id stuck (spec/protocol.md §5.1.5)."""


class InProcess:
    """Counts one message id's 10158 answers. Other answers in between (a wrong last sequence, no
    answer) do not start the count again: a stuck id can be answered 10158 and something else by
    turns, and neither says that the proposal is decided. A new id (:meth:`renewed`) starts a count
    of its own: the rule counts per message id."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0  # the id's 10158 answers so far

    def note(self, code: int) -> bool:
        """Takes one answer for the id (code: its JetStream API error code; 0 for no answer, a
        timeout or a lost connection) and returns whether the id is now stuck."""
        if code == ERR_MSG_ID_IN_PROCESS:
            self.count += 1
        return self.stuck

    def renewed(self) -> None:
        """The id was replaced by a new one: its count starts again."""
        self.count = 0

    @property
    def stuck(self) -> bool:
        """Whether the id is stuck: IN_PROCESS_LIMIT 10158 answers or more."""
        return self.count >= IN_PROCESS_LIMIT


def in_process_error(pseq: int, msg_id: str, partition: int, answers: int) -> MsgIdInProcess:
    """The error of a record failed by the rule: code ``unavailable`` (its fate is unknown), and a
    message that says what failed and what to do."""
    return MsgIdInProcess(
        f"JetStream keeps answering 'duplicate message id is in process' ({ERR_MSG_ID_IN_PROCESS}): record {pseq} "
        f"(id {msg_id}) refused {answers} times by partition {partition} as 'in process'; a raft proposal with this id "
        f"is undecided (its stream leader cannot reach its followers) or was lost in a leader change, and the server "
        f"refuses the id until its duplicate window (2 minutes) ends. "
        f"The record's fate is unknown (it may be stored): read partition {partition} to check before producing it again",
        msg_id=msg_id, partition=partition, answers=answers)
