"""The producer's sticky-ambiguity rule (spec/protocol.md §5.1.2) as an I/O-free state machine,
the same as the Go core's proto.Sticky: events in (a record produced, records acknowledged, an
anomaly on a sink, a sink's settling decided, records failed before transmit, a newer epoch,
close), actions out
(``{"send": [{"seq", "epoch", "partition"}], "acked": [seq], "failed": [seq]}``). No I/O, no
clock, no partitioner: ``f(epoch, key)`` gives a key's partition. tests/test_protocol_vectors.py
replays spec/vectors/protocol/sticky-ambiguity.jsonl and sticky-permanent-failures.jsonl against
it.

The rule: an anomaly makes every record a sink has in flight ambiguous; while any is, the sink
sends nothing more (of any key); other partitions' sinks of the epoch go on. Nothing a sink holds
moves to another partition or epoch before the sink settled: after a newer epoch every old sink's
records, and those produced since, are re-sent in send order once every old sink settled. A
record settled as stored is acknowledged where it is; one not stored is re-sent, ahead of every
later record; one failed for good (in settling, or before it is transmitted) fails where it is and
is never sent again. Only settling ends an ambiguity; close fails what is left."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pctl._rules import resend_order


@dataclass
class _Rec:
    seq: int
    key: str
    sent: bool = False  # transmitted, fate not yet known
    ambiguous: bool = False  # an anomaly left its fate unknown; only settling ends it


@dataclass
class _Sink:
    epoch: int
    partition: int
    recs: list = field(default_factory=list)  # unacknowledged, in send order


def _none() -> dict:
    return {"send": [], "acked": [], "failed": []}


class Sticky:
    """The state machine: one method per event, each returning the actions."""

    def __init__(self, epoch: int, f: Callable[[int, str], int]) -> None:
        self.epoch = epoch
        self.next = 0  # a newer epoch waiting for the old sinks
        self.f = f
        self.sinks: list = []  # in creation order
        self.held: list = []  # produced while moving to epoch next
        self.closed = False

    def _sink(self, epoch: int, partition: int) -> _Sink | None:
        return next((k for k in self.sinks if k.epoch == epoch and k.partition == partition), None)

    def _ambiguous(self, k: _Sink) -> bool:
        return any(r.ambiguous for r in k.recs)

    def _place(self, r: _Rec, a: dict) -> None:
        q = self.f(self.epoch, r.key)
        k = self._sink(self.epoch, q)
        if k is None:
            k = _Sink(self.epoch, q)
            self.sinks.append(k)
        k.recs.append(r)
        if not self._ambiguous(k):
            r.sent = True
            a["send"].append({"seq": r.seq, "epoch": k.epoch, "partition": q})

    def produce(self, seq: int, key: str) -> dict:
        """The application sent record seq with key."""
        a = _none()
        r = _Rec(seq, key)
        if self.closed:
            a["failed"].append(seq)
        elif self.next:
            self.held.append(r)
        else:
            self._place(r, a)
        return a

    def acked(self, seqs: list) -> dict:
        """A clean acknowledgement covers these records in flight (never an ambiguous one)."""
        a = _none()
        for seq in seqs:
            for k in self.sinks:
                i = next((i for i, r in enumerate(k.recs) if r.seq == seq and r.sent and not r.ambiguous), None)
                if i is not None:
                    del k.recs[i]
                    a["acked"].append(seq)
                    break
        return a

    def anomaly(self, epoch: int, partition: int) -> dict:
        """The sink's open batch had an anomaly: its records in flight are ambiguous. Nothing moves."""
        k = self._sink(epoch, partition)
        for r in k.recs if k else []:
            if r.sent:
                r.ambiguous = True
        return _none()

    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        """Settling decided the sink's ambiguous records: those in stored are stored, those in failed
        failed for good (never sent again; a record in both is stored), the rest not stored."""
        k = self._sink(epoch, partition)
        if k is None or not self._ambiguous(k):
            raise ValueError(f"sink (epoch {epoch}, partition {partition}) has no ambiguous record to settle")
        a = _none()
        keep = []
        for r in k.recs:
            if r.ambiguous and r.seq in stored:
                a["acked"].append(r.seq)
                continue
            if r.ambiguous and r.seq in failed:
                a["failed"].append(r.seq)
                continue
            if r.ambiguous:
                r.ambiguous = r.sent = False
            keep.append(r)
        k.recs = keep
        if self.next:
            self._regather(a)
            return a
        for r in k.recs:
            if not r.sent:
                r.sent = True
                a["send"].append({"seq": r.seq, "epoch": epoch, "partition": partition})
        return a

    def drop(self, seqs: list) -> dict:
        """The producer failed these records for good before transmitting them, wherever they wait
        (told to be sent, behind an ambiguous record, held for a newer epoch): each one the machine
        holds fails; nothing else changes. An ambiguous record is not failed this way: settling
        decides it."""
        a = _none()
        for seq in seqs:
            gone = False
            for k in self.sinks:
                r = next((r for r in k.recs if r.seq == seq), None)
                if r is not None:
                    if not r.ambiguous:
                        k.recs.remove(r)
                        gone = True
                    break
            h = next((r for r in self.held if r.seq == seq), None)
            if h is not None:
                self.held.remove(h)
                gone = True
            if gone:
                a["failed"].append(seq)
        return a

    def new_epoch(self, current: int) -> dict:
        """The descriptor shows epoch current: old sinks' records in flight are ambiguous until settled."""
        a = _none()
        if current <= self.epoch or current <= self.next:
            return a
        self.next = current
        for k in self.sinks:
            for r in k.recs:
                if r.sent:
                    r.ambiguous = True
        self._regather(a)
        return a

    def _regather(self, a: dict) -> None:
        if any(self._ambiguous(k) for k in self.sinks):
            return
        left = [r for k in self.sinks for r in k.recs] + self.held
        self.sinks, self.held, self.epoch, self.next = [], [], self.next, 0
        for i in resend_order([r.seq for r in left]):
            r = left[i]
            r.sent = r.ambiguous = False
            self._place(r, a)

    def close(self) -> dict:
        """The producer is closed: every unacknowledged record fails, in send order."""
        a = _none()
        a["failed"] = sorted(r.seq for r in [r for k in self.sinks for r in k.recs] + self.held)
        self.sinks, self.held, self.closed = [], [], True
        return a
