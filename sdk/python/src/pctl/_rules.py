"""The consumer group's decisions (spec/protocol.md §6.2 to §6.5) as pure functions of the
descriptor, the group's positions, the leases and a time passed in: no I/O, no clock, no
partitioner (a key's partition in an epoch is a function argument). consumer.py decides through
them, and tests/test_protocol_vectors.py replays spec/vectors/protocol/*.jsonl against them, the
same traces the Go core (internal/proto) and the other SDKs replay.

Times are unix milliseconds (any common origin for the holder's own lease), positions stream
sequences; ``pos(q)`` is the group's effective committed position of partition q."""

from __future__ import annotations

import json
from functools import cmp_to_key
from typing import Any, Callable, Optional, Sequence

from . import wire
from .errors import BadRequest

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


# --- the sticky assignor (spec/protocol.md §6.2.1, §6.2.2) -------------------------------------------
#
# Pure: the partitioners are a function argument, place(epoch) -> the partitions (a sequence of
# 4096 ints) of STICKY_SAMPLE under that epoch of the topic. Records are the dicts of g.assignment,
# with Go's field names (client/assign.go, broker/wire).

STICKY_SAMPLE: tuple = tuple(str(i).encode() for i in range(4096))
"""§6.2.1 step 1: the keys whose bytes are the ASCII decimal digits of 0..4095."""

ASSIGNMENT_HISTORY = 16
"""How many records' summaries a record's history keeps (§6.2.1)."""

MAX_ASSIGNMENT_RECORD = 60 << 10
"""The largest record (bytes of JSON) pctl's clients write: under the bucket's 64 KiB (§8.5)."""

Place = Callable[[int], Sequence[int]]


def modulo_assignment(members: Sequence[str], partitions: Sequence[int], epoch: int) -> dict:
    """§6.2's modulo assignor as a record: the i-th partition to member i mod m."""
    return {"assignor": "modulo", "epoch": epoch, "members": list(members), "partitions": list(partitions),
            "owners": [j % len(members) for j in range(len(partitions))]}


def _owner_map(a: dict) -> dict:
    ms, owners = a.get("members") or [], a.get("owners") or []
    out = {}
    for j, q in enumerate(a.get("partitions") or []):
        o = owners[j] if j < len(owners) else None
        if isinstance(o, int) and 0 <= o < len(ms):
            out[q] = ms[o]
    return out


def moved_keys(frm: dict, to: dict, place: Place) -> float:
    """§6.2.2: the fraction of the sample whose owner differs between two records (keys either
    leaves out do not count)."""
    pf, pt = place(frm["epoch"]), place(to["epoch"])
    of, ot = _owner_map(frm), _owner_map(to)
    moved = total = 0
    for k in range(len(STICKY_SAMPLE)):
        a, b = of.get(pf[k]), ot.get(pt[k])
        if a is None or b is None:
            continue
        total += 1
        if a != b:
            moved += 1
    return 0.0 if total == 0 else moved / total


def _strictly_sorted(xs: Sequence) -> bool:
    return all(xs[i - 1] < xs[i] for i in range(1, len(xs)))


def next_assignment(prev: Optional[dict], members: Sequence[str], partitions: Sequence[int], epoch: int,
                    place: Place, at: str = "") -> dict:
    """§6.2.1: the sticky assignor's next record from the previous one (None for the first), the
    sorted live members, the sorted assignable partitions and the current epoch; ``at`` is the
    RFC 3339 time it records. Raises BadRequest for no member or unsorted input."""
    m, n = len(members), len(partitions)
    if m == 0:
        raise BadRequest("an assignment needs at least one member")
    if not _strictly_sorted(members) or not _strictly_sorted(partitions):
        raise BadRequest("members and partitions must be sorted, without duplicates")
    nxt: dict = {"assignor": "sticky", "round": 1, "epoch": epoch, "members": list(members),
                 "partitions": list(partitions), "owners": [0] * n}
    index = {x: i for i, x in enumerate(members)}
    slot = {q: j for j, q in enumerate(partitions)}
    cands: list = []  # (j, x, num, den): w(partitions[j], members[x]) = num/den > 0
    if prev is not None:
        nxt["round"] = int(prev["round"]) + 1
        prev_owner = {q: index[who] for q, who in _owner_map(prev).items() if who in index}

        def direct(j: int) -> None:
            if partitions[j] in prev_owner:
                cands.append((j, prev_owner[partitions[j]], 1, 1))

        if prev["epoch"] == epoch:
            for j in range(n):
                direct(j)
        else:
            old_p, new_p = place(prev["epoch"]), place(epoch)
            den = [0] * n
            num: dict = {}
            for k in range(len(STICKY_SAMPLE)):
                j = slot.get(new_p[k])
                if j is None:
                    continue
                den[j] += 1
                x = prev_owner.get(old_p[k])
                if x is not None:
                    num[(j, x)] = num.get((j, x), 0) + 1
            cands = [(j, x, c, den[j]) for (j, x), c in num.items()]
            for j in range(n):
                if den[j] == 0:
                    direct(j)

    def order(a: tuple, b: tuple) -> int:
        # Weights compared exactly, as fractions: a/b > c/d iff a*d > c*b; then q, then x ascending.
        l, r = a[2] * b[3], b[2] * a[3]
        if l != r:
            return -1 if l > r else 1
        return (a[0] - b[0]) or (a[1] - b[1])

    cands.sort(key=cmp_to_key(order))
    base, extra = divmod(n, m)
    count = [0] * m
    big = 0
    done = [False] * n

    def may_take(x: int) -> bool:
        return count[x] < base or (count[x] == base and big < extra)

    def give(j: int, x: int) -> None:
        nonlocal big
        nxt["owners"][j] = x
        done[j] = True
        count[x] += 1
        if count[x] == base + 1:
            big += 1

    for j, x, _, _ in cands:
        if not done[j] and may_take(x):
            give(j, x)
    for j in range(n):
        if done[j]:
            continue
        best = -1
        for x in range(m):
            if may_take(x) and (best < 0 or count[x] < count[best]):
                best = x
        give(j, best)
    summary: dict = {"round": nxt["round"], "epoch": epoch, "members": m, "partitions": n}
    if prev is not None:
        nxt["moved"] = moved_keys(prev, nxt, place)
        nxt["moved_modulo"] = moved_keys(modulo_assignment(prev["members"], prev["partitions"], prev["epoch"]),
                                         modulo_assignment(nxt["members"], nxt["partitions"], epoch), place)
        summary["moved"], summary["moved_modulo"] = nxt["moved"], nxt["moved_modulo"]
    if at:
        nxt["at"] = summary["at"] = at
    nxt["history"] = (list(prev.get("history") or []) if prev is not None else []) + [summary]
    nxt["history"] = nxt["history"][-ASSIGNMENT_HISTORY:]
    return nxt


def encode_assignment(rec: dict, group: str = "") -> bytes:
    """A record's JSON, or BadRequest when it exceeds MAX_ASSIGNMENT_RECORD (§6.2.1: the group
    cannot use sticky on this topic)."""
    body = json.dumps(rec, separators=(",", ":")).encode()
    if len(body) > MAX_ASSIGNMENT_RECORD:
        raise BadRequest(f"group {group}: the sticky assignment of {len(rec['partitions'])} partitions over "
                         f"{len(rec['members'])} members takes {len(body)} bytes, more than the group bucket holds "
                         f"({MAX_ASSIGNMENT_RECORD}): use the modulo assignor for this topic")
    return body


def needs_assignment(rec: Optional[dict], members: Sequence[str], partitions: Sequence[int], epoch: int) -> bool:
    """§6.2.1, who writes: the record is missing or has other members, partitions or epoch."""
    return (rec is None or rec.get("epoch") != epoch or list(rec.get("members") or []) != list(members)
            or list(rec.get("partitions") or []) != list(partitions))


def sticky_writes(record: Optional[dict], members: Sequence[str], partitions: Sequence[int], epoch: int, me: str,
                  complete: bool, previous_view: Optional[Sequence[str]]) -> bool:
    """§6.2.1: this member writes the next record: it is the leader (first of the sorted live
    members), its view is whole, the record no longer matches, and a member the record has and
    the view lacks was missed by the previous rebalance's view too."""
    if not complete or not members or members[0] != me or not needs_assignment(record, members, partitions, epoch):
        return False
    if record is None:
        return True
    if (record.get("epoch") or 0) > epoch:
        return False  # a record newer than this view (one view per rebalance)
    live = set(members)
    drops = any(x not in live for x in record.get("members") or [])
    return not drops or (previous_view is not None and list(previous_view) == list(members))


def sticky_wants(rec: Optional[dict], me: str, assignable: Sequence[int]) -> list:
    """The partitions a record gives member ``me`` among the assignable ones, sorted (none
    without a record)."""
    if rec is None:
        return []
    ok = set(assignable)
    return sorted(q for q, who in _owner_map(rec).items() if who == me and q in ok)
