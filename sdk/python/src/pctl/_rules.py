"""The consumer group's decisions (spec/protocol.md §6.2 to §6.5) as pure functions of the
descriptor, the group's positions, the leases and a time passed in: no I/O, no clock, no
partitioner (a key's partition in an epoch is a function argument). consumer.py decides through
them, and tests/test_protocol_vectors.py replays spec/vectors/protocol/*.jsonl against them, the
same traces the Go core (internal/proto) and the other SDKs replay.

Times are unix milliseconds (any common origin for the holder's own lease), positions stream
sequences; ``pos(q)`` is the group's effective committed position of partition q."""

from __future__ import annotations

from typing import Callable, Optional

from . import wire

Pos = Callable[[int], int]


def ended(ep: Optional[wire.Epoch]) -> bool:
    """The epoch has ended: a boundary for each of its partitions."""
    return ep is not None and ep.boundaries is not None and len(ep.boundaries) == ep.partitions


def max_partitions(t: wire.Topic) -> int:
    m = max((e.partitions for e in t.epochs), default=0)
    ch = t.change or {}
    try:
        m = max(m, int(ch.get("partitions") or 0))
    except (TypeError, ValueError):
        pass
    return m


def final_boundary(t: wire.Topic, q: int) -> int:
    """Partition q's boundary in the last ended epoch that had it (0 if none)."""
    last = 0
    for e in t.epochs[:-1]:
        if e.boundaries is not None and q < len(e.boundaries):
            last = e.boundaries[q]
    return last


def assignable(t: wire.Topic, pos: Pos) -> list:
    """§6.2: the current epoch's partitions, and those shrunk away below their final boundary."""
    n = t.current.partitions
    return [q for q in range(max_partitions(t)) if q < n or pos(q) < final_boundary(t, q)]


def retired(t: wire.Topic, q: int, pos: Pos) -> bool:
    """Partition q was shrunk away and is drained to its final boundary: no one reads it again."""
    return q >= t.current.partitions and pos(q) >= final_boundary(t, q)


def drained_through(t: wire.Topic, start: int, pos: Pos) -> int:
    """The newest ended epoch through which every epoch's every partition is at its boundary,
    searching after ``start`` (a cached answer); the first epoch - 1 when none."""
    d = max(start, t.epochs[0].epoch - 1)
    while True:
        ep = t.epoch(d + 1)
        if not ended(ep):
            return d
        assert ep is not None and ep.boundaries is not None
        if any(pos(q) < b for q, b in enumerate(ep.boundaries)):
            return d
        d += 1


def gate_record(t: wire.Topic, drained: int, x: int, p: int, f: Callable[[wire.Epoch], int], pos: Pos) -> dict:
    """§6.5, §6.7: the gate of a keyed record of epoch x read from partition p: ``refresh`` when the
    descriptor does not show epoch x-1 ended and epoch x; else ``waits`` (unmet conditions
    {epoch, partition, boundary}, newest epoch first), ``parent`` (the key's partition in x-1, -1 in
    the first epoch) and ``assigned`` (keys assigned's condition when parent != p, else None).
    f(ep) is the key's partition in ep."""
    out: dict = {"refresh": False, "waits": [], "parent": -1, "assigned": None}
    first = t.epochs[0].epoch
    if x <= first:
        return out
    prev = t.epoch(x - 1)
    if not ended(prev) or t.epoch(x) is None:
        out["refresh"] = True
        return out
    assert prev is not None and prev.boundaries is not None
    for e in range(x - 1, first - 1, -1):
        if e <= drained and e != x - 1:
            break
        ep = t.epoch(e)
        assert ep is not None and ep.boundaries is not None
        q = f(ep)
        if e == x - 1:
            out["parent"] = q
        if e <= drained or q == p:
            continue
        if pos(q) < ep.boundaries[q]:
            out["waits"].append({"epoch": e, "partition": q, "boundary": ep.boundaries[q]})
    if out["parent"] != p:
        out["assigned"] = {"epoch": x - 1, "partition": out["parent"], "boundary": prev.boundaries[out["parent"]]}
    return out


def past_boundary(t: wire.Topic, q: int, b: int, pos: Pos, leased: bool) -> bool:
    """§6.5 keys assigned may go on: q's position is past b, or at b while q is retired and no live
    lease holds it."""
    at = pos(q)
    if at != b:
        return at > b
    return not leased and retired(t, q, pos)


def max_clock_skew_ms(session_ms: int) -> int:
    """§6.3 the clock-skew bound of leases: min(1 s, session / 6), whole milliseconds."""
    return int(min(1000, session_ms // 6))


def lease_live(owner: str, lease_end: int, now: int, skew: int) -> bool:
    """A lease (by its holder's clock) is live to another member at now (its own clock)."""
    return bool(owner) and now < (lease_end or 0) + skew


def may_acquire(me: str, owner: str, lease_end: int, now: int, skew: int) -> bool:
    """§6.3: no owner, our own, or expired past the skew bound."""
    return not owner or owner == me or not lease_live(owner, lease_end, now, skew)


def may_deliver(lease_until: float, now: float, session_ms: float) -> bool:
    """§6.3: the holder delivers only while more than a quarter of the session is left."""
    return lease_until - now > session_ms / 4


def revokes(t: wire.Topic, q: int, at: int, done: Callable[[int], bool]) -> list:
    """Ended epochs (with a successor) whose boundary in q is at or below ``at`` and whose
    keys-revoked step has not run (done), oldest first."""
    out = []
    for i in range(len(t.epochs) - 1):
        e = t.epochs[i]
        if e.boundaries is None or q >= len(e.boundaries) or at < e.boundaries[q] or done(e.epoch):
            continue
        out.append(e.epoch)
    return out


def passed(t: wire.Topic, q: int, start: int) -> list:
    """Epochs whose boundary in q is below start: an owner acquiring q at start counts their
    keys-revoked steps as run (one exactly at start is not)."""
    return [e.epoch for e in t.epochs if e.boundaries is not None and q < len(e.boundaries) and e.boundaries[q] < start]


def marker_needs_descriptor(t: wire.Topic, fence: int) -> bool:
    """A fence marker ``Pctl-Fence: fence`` waits for a descriptor showing epoch fence-1 ended and epoch fence."""
    return fence > 1 and not (ended(t.epoch(fence - 1)) and t.epoch(fence) is not None)


def fence_marker(t: wire.Topic, q: int, seq: int, fence: int, done: Callable[[int], bool]) -> dict:
    """§6.4: refresh the descriptor first; or run keys revoked for ``revoke``, move to ``position``
    (seq) and commit at once."""
    if marker_needs_descriptor(t, fence):
        return {"refresh": True, "revoke": [], "position": 0, "commit": False}
    ran: set = set()
    rv: list = []
    for at in (seq - 1, seq):
        for e in revokes(t, q, at, lambda x: x in ran or done(x)):
            ran.add(e)
            rv.append(e)
    return {"refresh": False, "revoke": rv, "position": seq, "commit": True}


# ---- the producer's decisions (spec/protocol.md §5.1.2) ----

def resend_order(seqs: list) -> list:
    """The order (indices into seqs) in which a fenced epoch's unacknowledged records are re-sent:
    their original send order (Pctl-Seq ascending), whatever sink they came from."""
    return sorted(range(len(seqs)), key=lambda i: seqs[i])


def search_floor(sink_floor: int, first_sent: list) -> int:
    """A search reads down to (exclusive) the sink's floor, or the lowest floor any of the records
    was first sent to this stream above."""
    return min([sink_floor, *first_sent])


def search_top(fenced: bool, boundary: int) -> tuple:
    """(top, read_last): a fenced partition is searched from its epoch's boundary (if > 0), else
    from the stream's last sequence (read_last)."""
    return (boundary, False) if fenced and boundary > 0 else (0, True)


def admits(per_key: bool, keyless: bool, in_batch: bool) -> bool:
    """The per-key rule: a record may join the open batch unless the rule holds (a cluster), it
    is keyed and its key is in the batch."""
    return not per_key or keyless or not in_batch


def batches(recs: list, per_key: bool, size: int) -> list:
    """How a queue of (key, keyless) records is cut into batches by the per-key rule and the batch
    size: each batch's record indices."""
    out: list = []
    cur: list = []
    keys: set = set()
    for i, (k, keyless) in enumerate(recs):
        if len(cur) >= size or not admits(per_key, keyless, k in keys):
            out.append(cur)
            cur, keys = [], set()
        cur.append(i)
        if not keyless:
            keys.add(k)
    if cur:
        out.append(cur)
    return out
