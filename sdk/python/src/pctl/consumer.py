"""A consumer-group member (spec/protocol.md §6): membership and assignment, leases and commits,
fence markers, per-key gating across epochs with the topic's own WebAssembly partitioners, retired
partitions, seeks, and KIP-253's key-level callbacks.

Data path: every owned partition has a task that reads its stream (reader.py: a pull consumer
that recovers from lost pulls and reconnects), parses records, holds a keyed record of a newer
epoch at its gate until the group has committed the key's partition of every undrained older
epoch past that epoch's boundary, and queues it. The iterator (`async for record in consumer`)
takes records from that queue in the application's task; rebalances, seeks and every callback
also run there, between two records, so callbacks never race the application's processing.
Commits and lease renewals run on their own timer.

Acknowledgement (§6.7): with ``auto_commit`` a record is acknowledged when the iterator is asked
for the next one (or the consumer is closed without an error); otherwise by ``commit``. The
committed position of a partition only covers records and fence markers that are all acknowledged,
and gates open on committed positions only."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import secrets
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Awaitable, Callable, NoReturn, Optional, Union

from . import _nats, _rules, wire
from . import compact as compaction
from ._server import require_server
from .errors import BadRequest, Conflict, InternalError, NotFound, PctlError, PermissionDenied, Unavailable, Unsupported, is_topic_creating
from .reader import RawRecord, ReaderClosed, StreamReader
from .record import HEADER_FENCE, HEADER_TIME, KeyChange, Misplacement, Record, decode_key, parse_time
from .state import KeySet, StateHandler, StateReason

if TYPE_CHECKING:
    from .client import Client
    from .partitioner import Partitioner

GROUPS_BUCKET = "pctl-groups"

Callback = Callable[..., Union[None, Awaitable[None]]]
SeekTarget = Union[str, datetime]


class MisplacedRecord(PctlError):
    """A record is stored outside its key's partition (spec/protocol.md §6.8) and the member's
    policy is "stop": the member stopped before it (everything before it was delivered; nothing
    after it in that partition is, until the group runs with ``misplaced="deliver"`` or
    ``"skip"``). Names the topic, partition, sequence, epoch, key and `misplacement`."""
    code = "internal"

    def __init__(self, topic: str, partition: int, seq: int, epoch: int, key: Optional[bytes], mp: Misplacement):
        super().__init__(f"misplaced record in topic {topic} partition {partition} at sequence {seq} (epoch {epoch}, key {key!r}): "
                         f"{mp.reason}. A producer bypassed the partitioner; the group stopped before this record. To go on, "
                         f"consume with misplaced=\"deliver\" (flagged) or \"skip\" (consume --misplaced deliver|skip)")
        self.topic, self.partition, self.seq, self.epoch, self.key, self.misplacement = topic, partition, seq, epoch, key, mp


class CommitFailed(Conflict):
    """A commit could not be written because the partition is no longer this member's (taken over
    after its lease expired, revoked by a rebalance, or reset by a seek): its records will be
    delivered again, in order, by its next owner."""


JOIN_TIMEOUT = 30.0
# _own_unanswered's answer when the key could not be read (spec/protocol.md §6.3: decides nothing).
_UNREAD = object()
"""How long a member waits, at join, for a state of its group that holds g.created (seconds)."""


async def read_group_keys(kv: _nats.KV, prefix: str, group: str,
                          timeout: float = JOIN_TIMEOUT) -> tuple[Optional[_nats.KVEntry], Optional[_nats.KVEntry]]:
    """The group's g.start and g.assignor (None for a key that does not exist), read together with
    g.created from one server's state (spec/protocol.md §6.1, "Reading the group's keys at join"):
    the initial values of a watch of the group's g.* keys (`prefix` is ``<topic id>.<group>.``). A
    direct get may be answered by a follower that lags, and its "not found" proves nothing; the
    creator writes g.created last, so a state that holds it holds the others if they exist.
    Without g.created among the initial values it reads again (back-off 20 ms doubling to
    500 ms), and raises Unavailable once `timeout` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    wait = 0.02
    while True:
        try:
            vals = await kv.initial_values(prefix + "g.*")
        except PermissionDenied:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to read is "unavailable" (the join is retried)
            raise Unavailable(f"consumer group {group}: read its keys: {e}") from None
        if prefix + "g.created" in vals:
            return vals.get(prefix + "g.start"), vals.get(prefix + "g.assignor")
        left = deadline - loop.time()
        if left <= 0:
            raise Unavailable(f"consumer group {group}: its g.created key exists but no server's state that was read "
                              f"holds it yet (waited {timeout:g}s)")
        await asyncio.sleep(min(wait, left))
        wait = min(2 * wait, 0.5)


@dataclass
class ConsumerStats:
    """What a member did: records delivered, records that waited at a gate and how long."""
    delivered: int = 0
    gated: int = 0
    total_wait: float = 0.0
    max_wait: float = 0.0
    commits: int = 0
    lost: int = 0
    resets: int = 0
    misplaced: int = 0
    # Sticky groups (spec/protocol.md §6.2.1): the assignment records this member wrote as the
    # leader, and the fractions of keys that changed member at the last one, under sticky and
    # under modulo (§6.2.2).
    assignments: int = 0
    moved: Optional[float] = None
    moved_modulo: Optional[float] = None


# The assignors of spec/protocol.md §6.2 this SDK implements.
ASSIGNORS = ("modulo", "sticky")


class _PState:
    __slots__ = ("rev", "position", "gen", "owner", "lease_end")

    def __init__(self, rev: int, position: int, gen: int, owner: str, lease_end: int):
        self.rev, self.position, self.gen, self.owner, self.lease_end = rev, position, gen, owner, lease_end


def _pstate_json(owner: str, lease_end: int, position: int, gen: int) -> bytes:
    d: dict[str, Any] = {}
    if owner:
        d["owner"] = owner
    if lease_end:
        d["lease_end"] = lease_end
    d["position"] = position
    if gen:
        d["generation"] = gen
    return json.dumps(d, separators=(",", ":")).encode()


def _parse_pstate(rev: int, data: bytes) -> Optional[_PState]:
    try:
        d = json.loads(data)
        return _PState(rev, int(d.get("position") or 0), int(d.get("generation") or 0), str(d.get("owner") or ""),
                       int(d.get("lease_end") or 0))
    except (ValueError, TypeError, AttributeError):
        return None


class _Item:
    """A queued record, fence marker (record None, parent: the epoch it starts; 0 for a skipped
    misplaced record) or stop (error set) of an owned partition."""
    __slots__ = ("part", "seq", "record", "parent", "error")

    def __init__(self, part: "_Part", seq: int, record: Optional[Record], parent: int, error: Optional[BaseException] = None):
        self.part, self.seq, self.record, self.parent, self.error = part, seq, record, parent, error


class _Stop(Exception):
    """The partition task must stop (revoked, lost, reset, closing)."""


_tokens = iter(range(1, 1 << 62))


class _Part:
    """An owned partition (one ownership: a partition acquired again is a new _Part)."""

    def __init__(self, q: int, rev: int, position: int, gen: int, lease_until: float):
        self.q = q
        self.token = next(_tokens)
        self.rev = rev
        self.gen = gen
        self.lease_until = lease_until  # monotonic; measured from before the write that set it
        self.start = position
        self.handled = position  # every record and marker up to here is acknowledged
        self.committed = position
        self.delivered = position  # the last item the iterator processed (record yielded or marker)
        self.last_record = position  # the last record yielded
        self.marks_after: dict[int, int] = {}  # manual commit: record seq -> marker seq right after it
        self.lost = False
        self.stopped = False
        self.queued = 0
        self.space = asyncio.Event()
        self.lock = asyncio.Lock()  # one KV write at a time
        self.task: Optional[asyncio.Task] = None
        self.reader: Optional[StreamReader] = None
        self.next_boundary = 0  # the smallest boundary above `handled` whose keys-revoked step is owed
        # The last state write whose answer never came: (body, position, lease_until), or None.
        self.unsure: Optional[tuple[bytes, int, float]] = None


class Consumer:
    """A member of consumer group `group` on one topic. Create it with ``await client.consumer(...)``
    and iterate::

        async with await client.consumer("orders", "billing") as consumer:
            async for record in consumer:
                handle(record)

    Records of one key come in the order they were produced, across epoch changes, in every member
    of the group. Use it from one asyncio event loop and iterate from one task; callbacks run in
    that task, between two records, and may be plain functions or coroutines:

    - ``on_assigned(partitions)`` / ``on_revoked(partitions)``: the member gained or is giving up
      partitions (revoked runs before the final commit, so a manual committer can commit in it;
      it also runs for partitions lost to another member and at a seek);
    - ``on_keys_revoked(change)`` / ``on_keys_assigned(change)``: :class:`pctl.KeyChange`, KIP-253's
      key-level handover at an epoch change (spec/protocol.md §6.5);
    - ``state``: a :class:`pctl.StateHandler` (``load(ks)`` / ``flush(ks)``), the per-key state
      handover of spec/protocol.md §6.9 (see :class:`pctl.StateHandler` for when each runs).

    Rebalances and seeks take effect while the application iterates (or waits in the iterator);
    a member that stops iterating without closing keeps its partitions."""

    def __init__(self, client: "Client", topic: wire.Topic, group: str, member: str, *, from_beginning: bool,
                 auto_commit: bool, heartbeat: float, session_timeout: float, commit_interval: float, gating: bool,
                 max_buffered: int, on_assigned: Optional[Callback], on_revoked: Optional[Callback],
                 on_keys_assigned: Optional[Callback], on_keys_revoked: Optional[Callback],
                 logf: Optional[Callable[[str], None]], misplaced: str = "stop", on_misplaced: Optional[Callback] = None,
                 start: Optional[str] = None, assignor: Optional[str] = None, state: Optional[StateHandler] = None):
        self._c = client
        # State handovers (spec/protocol.md §6.9): _home maps every key this member holds to the
        # partition it holds it for. Every call runs in the iterator's task: one at a time.
        self._state = state
        self._home: dict[bytes, int] = {}
        self._assignor_asked = assignor
        self._assignor = "modulo"  # the group's (_check_assignor)
        self._record: Optional[dict] = None  # sticky: the last g.assignment read, and its revision
        self._record_rev = 0
        self._last_view: Optional[list] = None  # sticky: the live members of the previous rebalance
        self._samples: dict = {}  # sticky: (digest, config, n) -> the key sample's partitions
        self._start_from = start
        self._start_epoch = 0  # the group reads the current epoch alone from this epoch on (g.start, §10.5)
        self._misplaced = misplaced
        self._on_misplaced = on_misplaced
        self.topic = topic.name
        self.topic_id = topic.id
        self.group = group
        self.member = member
        self._from_beginning = from_beginning
        self.auto_commit = auto_commit
        self._hb = heartbeat
        self._session = session_timeout
        self._commit_every = commit_interval
        self._gating = gating
        self._max_buffered = max_buffered
        self._on_assigned, self._on_revoked = on_assigned, on_revoked
        self._on_keys_assigned, self._on_keys_revoked = on_keys_assigned, on_keys_revoked
        self._logf = logf or (lambda s: None)
        # Test hook: called after each stored commit; True makes the member take that commit as
        # unanswered (stored, its answer lost on the way), as a leader change can.
        self._lose_commit_answer: Optional[Callable[[], bool]] = None
        # Tests only: when it answers True, the read-back after a refused commit fails.
        self._fail_read_back: Optional[Callable[[], bool]] = None
        # Test hook: called with the rebalance's number and each parent-first group of partitions
        # ([(partition, position)], spec/protocol.md §6.7) before the member acquires it.
        self._on_take: Optional[Callable[[int, list], None]] = None
        self._take_round = 0
        self._desc = topic
        # Group-state requests time out after the session timeout (at least 2 s), as the Go member's
        # do: one lost in a broker restart must not hold a heartbeat or a commit for long.
        self._kv = _nats.KV(client, GROUPS_BUCKET, timeout=max(2.0, session_timeout))
        self._prefix = f"{topic.id}.{group}."
        self._subj_prefix = f"$KV.{GROUPS_BUCKET}.{self._prefix}"
        self.stats = ConsumerStats()

        self._pstate: dict[int, _PState] = {}
        self._members: dict[str, int] = {}  # member -> stored time of its last heartbeat (ns)
        self._gen = 0  # the group generation this member follows (§6.6)
        self._reset_positions: list = []
        self._reset_rev = 0
        self._pending_reset: Optional[tuple] = None  # (revision, generation, positions) seen, not applied
        self._drained = (0, 0)  # (generation, epoch): every epoch up to it fully drained
        self._revoked_done: set = set()  # (partition, epoch) whose keys-revoked step ran here
        self._assigned_done: set = set()  # (partition, epoch, parent) whose keys-assigned step ran here
        self._parts: dict[int, _Part] = {}
        self._ready: deque[_Item] = deque()
        self._wake = asyncio.Event()
        self._pos_event = asyncio.Event()
        self._rebalance = True
        self._in_hand: Optional[_Item] = None
        self._fatal: Optional[BaseException] = None
        self._closed = False
        self._started = False
        self._tasks: list[asyncio.Task] = []
        self._watch: Optional[StreamReader] = None
        self._events_sub: Any = None
        self._stop_listening: Optional[Callable[[], None]] = None
        self._parts_cache: dict[tuple, "Partitioner"] = {}
        self._refreshing: Optional[asyncio.Task] = None
        self._started_at = _now_rfc3339()

    # --- creation -------------------------------------------------------------------------------------

    @classmethod
    async def create(cls, client: "Client", topic: str, group: str, *, member: Optional[str] = None,
                     from_beginning: bool = False, auto_commit: bool = True, heartbeat: float = 1.0,
                     session_timeout: float = 6.0, commit_interval: float = 0.2, gating: bool = True,
                     max_buffered: int = 512, on_assigned: Optional[Callback] = None,
                     on_revoked: Optional[Callback] = None, on_keys_assigned: Optional[Callback] = None,
                     on_keys_revoked: Optional[Callback] = None,
                     logf: Optional[Callable[[str], None]] = None, misplaced: str = "stop",
                     on_misplaced: Optional[Callback] = None, start: Optional[str] = None,
                     assignor: Optional[str] = None, state: Optional[StateHandler] = None) -> "Consumer":
        """Joins `group` on `topic` (see :meth:`pctl.Client.consumer`)."""
        if state is not None:
            if not callable(getattr(state, "load", None)) or not callable(getattr(state, "flush", None)):
                raise BadRequest("state: give an object with load(ks) and flush(ks) methods (pctl.StateHandler, spec/protocol.md §6.9)")
            if not gating:
                raise BadRequest("state: a state handler needs the epoch gate (a key's state is loaded after it): drop gating=False (spec/protocol.md §6.9)")
        if start is not None and start not in STARTS:
            raise BadRequest(f"start={start!r}: give \"now\", \"beginning\" or \"current-epoch\" (spec/protocol.md §6.1, §10.5)")
        if assignor is not None and assignor not in ASSIGNORS:
            raise BadRequest(f"assignor={assignor!r}: give \"modulo\" or \"sticky\" (spec/protocol.md §6.2)")
        if misplaced not in ("stop", "deliver", "skip"):
            raise BadRequest(f"misplaced={misplaced!r}: give \"stop\", \"deliver\" or \"skip\" (spec/protocol.md §6.8)")
        wire.valid_name("topic name", topic)
        wire.valid_name("consumer group", group)
        if member is None:
            member = "py-" + secrets.token_hex(8)
        wire.valid_name("member id", member)
        if heartbeat <= 0 or session_timeout <= heartbeat or commit_interval <= 0:
            raise BadRequest(f"heartbeat {heartbeat:g}s, session timeout {session_timeout:g}s, commit interval "
                             f"{commit_interval:g}s: all positive, and the session timeout longer than the heartbeat")
        if max_buffered < 1:
            raise BadRequest("max_buffered must be at least 1")
        # Before any group key is written: a server older than 2.11 ignores the condition that
        # proves a group absent (spec/protocol.md §6.1, "The server version a consumer needs").
        require_server(client, "pctl's consumer", "a member proves a new group absent with a conditioned write, spec/protocol.md §6.1")
        t = await _fetch_topic(client, topic)
        cn = cls(client, t, group, member, from_beginning=from_beginning, auto_commit=auto_commit, heartbeat=heartbeat,
                 session_timeout=session_timeout, commit_interval=commit_interval, gating=gating,
                 max_buffered=max_buffered, on_assigned=on_assigned, on_revoked=on_revoked,
                 on_keys_assigned=on_keys_assigned, on_keys_revoked=on_keys_revoked, logf=logf, misplaced=misplaced,
                 on_misplaced=on_misplaced, start=start, assignor=assignor, state=state)
        await cn._start()
        return cn

    async def _start(self) -> None:
        self._stop_listening = self._c._on_violation(self._on_violation)
        await self._ensure_group()
        start, assignor = await read_group_keys(self._kv, self._prefix, self.group)
        self._take_start(start)
        # The descriptor read after the group's keys exist (spec/protocol.md §10.4: a retirement
        # that does not show in it checked this group's positions after they were written).
        t = await _fetch_topic(self._c, self.topic)
        if t.id == self.topic_id and len(t.epochs) >= len(self._desc.epochs):
            self._desc = t
        self._check_assignor(assignor)
        self._watch = StreamReader(self._c, self._kv.stream, filter_subject=self._subj_prefix + ">", last_per_subject=True,
                                   heartbeat=self._hb, batch=512, max_buffer=1 << 20, logf=self._logf)
        self._tasks.append(asyncio.ensure_future(self._watch_loop()))
        try:
            self._events_sub = await self._c.nc.subscribe(f"pctl.events.topic.{self.topic}", cb=self._on_event)
        except Exception:  # noqa: BLE001 - best effort: the heartbeat refreshes the descriptor anyway
            self._events_sub = None
        # The first assignment needs the group's members and positions.
        try:
            await asyncio.wait_for(self._watch.caught_up.wait(), max(10.0, self._session))
        except asyncio.TimeoutError:
            pass
        self._check_fatal()
        await self._heartbeat_once()
        self._tasks.append(asyncio.ensure_future(self._heartbeat_loop()))
        self._tasks.append(asyncio.ensure_future(self._commit_loop()))
        self._started = True

    def _start_of(self) -> str:
        """Where a new group starts (§6.1, §10.5): `start`; else beginning with from_beginning; on a
        compacted topic current-epoch when no backfill runs (beginning while one does); else now."""
        if self._start_from:
            return self._start_from
        if self._from_beginning:
            return "beginning"
        raw = self._desc.raw
        if raw.get("compact"):
            return "beginning" if compaction.backfilling(raw) else "current-epoch"
        return "now"

    async def _ensure_group(self) -> None:
        """§6.1: the first member creates a key for every existing partition stream (position 0,
        the stream's last sequence, or where the current epoch starts), then ``g.created``. First
        writer wins each key. A group that reads the current epoch alone writes ``g.start``
        (§10.5). A get that finds no ``g.created`` proves nothing (a lagging follower answers
        direct gets), so the create path starts with a write that proves the group absent (§6.1,
        "Proving that the group does not exist"): ``g.assignor``, stored only while ``g.created``
        has no message. Refused: the group exists (or another member is creating it), and nothing
        is created. The descriptor was read before that write: every stream in it predates the
        group."""
        marker = self._prefix + "g.created"
        raw = self._desc.raw
        if await self._kv.get(marker) is not None:
            return
        try:
            absent = await self._kv.put_if_absent(self._prefix + "g.assignor",
                                                  json.dumps({"assignor": self._assignor_asked or "modulo"}).encode(), marker)
        except Unavailable as e:
            raise Unavailable(f"consumer group {self.group}: could not learn whether it exists (its assignor written on the "
                              f"condition that it does not: {e}): retry the join") from None
        if not absent:
            return
        frm = self._start_of()
        if frm == "current-epoch":
            bf = compaction.backfilling(raw)
            if bf is not None:
                self._logf(f"member {self.member}: group {self.group} starts at the current epoch {bf.get('epoch')} while its "
                           f"backfill runs: keys not yet copied arrive as their copies do")
            try:
                await self._kv.create(self._prefix + "g.start", json.dumps({"from": "current-epoch", "epoch": self._desc.current.epoch},
                                                                            separators=(",", ":")).encode())
            except _nats.KVConflict:
                pass
        for q in range(_rules.max_partitions(self._desc)):
            start = 0
            if frm == "current-epoch":
                start = compaction.current_epoch_start(raw, q)
            elif frm == "now":
                start = await _last_seq(self._c, wire.stream_name(self.topic, q))
            try:
                await self._kv.create(self._prefix + f"p.{q}", _pstate_json("", 0, start, 0))
            except _nats.KVConflict:
                pass
        try:
            await self._kv.create(marker, datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ").encode())
        except _nats.KVConflict:
            pass

    def _take_start(self, e: Optional[_nats.KVEntry]) -> None:
        """The group's g.start (§10.5): the epoch it started reading the current epoch at. `e` is
        the key as read_group_keys read it (None: no such key)."""
        if e is None:
            return
        data = e.value
        try:
            st = json.loads(data)
            epoch = int(st["epoch"])
        except (ValueError, TypeError, KeyError):
            epoch = 0
        if epoch < 1:
            raise InternalError(f"consumer group {self.group}: its start key holds {bytes(data)[:80]!r}")
        self._start_epoch = epoch

    def _skips_copy(self, rec: Record) -> bool:
        """§10.4: a backfilled copy is skipped unless the group cannot have delivered its origin
        (it started at the current epoch after the origin's epoch, or that epoch is retired)."""
        o = rec.backfill
        if o is None:
            return False
        return not ((self._start_epoch > 0 and o[0] < self._start_epoch) or compaction.origin_retired(self._desc.raw, o[0]))

    def _check_assignor(self, e: Optional[_nats.KVEntry]) -> None:
        """§6.1: join only a group whose assignor this SDK implements (modulo, sticky; no key:
        modulo), and that is the one asked for, if any. `e` is the group's g.assignor as
        read_group_keys read it (None: no such key)."""
        a: Any = "modulo"
        if e is not None:
            try:
                a = json.loads(e.value).get("assignor")
            except (ValueError, AttributeError):
                a = e.value
        if a not in ASSIGNORS:
            raise Unsupported(f"group {self.group} of topic {self.topic} uses the assignor {a!r}, which this client does "
                              "not implement (it knows modulo and sticky): use a client that implements it, or another group")
        if self._assignor_asked is not None and self._assignor_asked != a:
            raise Conflict(f"group {self.group} of topic {self.topic} uses the assignor {a}, not the {self._assignor_asked} "
                           f"this consumer asked for: ask for {a}, or use another group")
        self._assignor = a

    # --- public API -------------------------------------------------------------------------------------

    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> Record:
        rec = await self.next()
        if rec is None:
            raise StopAsyncIteration
        return rec

    async def next(self, timeout: Optional[float] = None) -> Optional[Record]:
        """The next record (acknowledging the previous one with auto_commit); None when the
        consumer is closed, or after `timeout` seconds without one. Raises the member's fatal
        error (for example :class:`pctl.PermissionDenied`, or :class:`pctl.NotFound` when the topic
        was deleted)."""
        passed = self._finish_in_hand()
        if passed is not None:
            await self._passed_boundaries(passed)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                return None
            self._check_fatal()
            if self._pending_reset is not None or self._rebalance:
                await self._control()
                continue
            if self._ready:
                item = self._ready.popleft()
                part: _Part = item.part
                part.queued -= 1
                if part.queued < self._max_buffered:
                    part.space.set()
                if part.stopped or self._parts.get(part.q) is not part:
                    continue
                if item.error is not None:
                    self._fail(item.error)
                    self._check_fatal()
                if item.record is None:
                    if item.parent > 1:
                        # The marker says that epoch parent-1 ended here: make sure the descriptor
                        # knows it, so that the keys-revoked step runs before the position moves
                        # past the marker (children wait for that, see _gate).
                        await self._ended_epoch(item.parent - 1)
                        self._compute_next_boundary(part)
                    await self._pass_marker(part, item.seq)
                    continue
                if not await self._hold_lease(part):
                    continue
                if item.parent >= 0:
                    await self._keys_assigned(part, item)
                    if part.stopped:
                        continue
                rec = item.record
                if self._state is not None and rec.key is not None and rec.misplaced is None:
                    # The key's state, after its gate: every older record of it is committed (§6.9).
                    if not await self._state_ensure(part, rec.key) or part.stopped:
                        continue
                part.delivered = part.last_record = item.seq
                self._in_hand = item
                self.stats.delivered += 1
                return item.record
            now = time.monotonic()
            wait = self._hb
            if deadline is not None:
                if now >= deadline:
                    return None
                wait = min(wait, deadline - now)
            self._wake.clear()
            if self._ready or self._rebalance or self._pending_reset is not None or self._closed or self._fatal:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def run(self, handler: Callable[[Record], Union[None, Awaitable[None]]]) -> None:
        """Calls `handler` for every record until the consumer is closed; a record is acknowledged
        when its handler returns. An exception from the handler closes the member (the record is
        not acknowledged: the group delivers it again) and is raised."""
        try:
            async for rec in self:
                r = handler(rec)
                if inspect.isawaitable(r):
                    await r
        except BaseException:
            await self.close(clean=False)
            raise

    async def commit(self, record: Optional[Record] = None) -> None:
        """Acknowledges `record` and every record of its partition delivered before it (or, with no
        argument, every record delivered so far) and writes the position at once. Raises
        :class:`CommitFailed` when the partition is no longer this member's. With auto_commit the
        consumer commits by itself; this makes it write at once."""
        if record is not None:
            part = self._parts.get(record.partition)
            if part is None or part.lost or part.token != record._owner:
                self._raise_commit_failed(record.partition)
            if record.seq > part.delivered:
                raise BadRequest(f"commit: record {record.seq} of partition {record.partition} was not delivered yet")
            if self._in_hand is not None and self._in_hand.part is part and self._in_hand.seq <= record.seq:
                self._in_hand = None
            new = max(record.seq, part.marks_after.pop(record.seq, 0))
            for s in [s for s in part.marks_after if s < record.seq]:
                del part.marks_after[s]
            await self._advance(part, new)
            await self._commit_part(part)
            if part.lost:
                self._raise_commit_failed(part.q)
            return
        self._in_hand = None
        for part in list(self._parts.values()):
            if part.lost:
                continue
            await self._advance(part, part.delivered)
            await self._commit_part(part)

    async def seek(self, to: SeekTarget) -> None:
        """Moves the whole group (spec/protocol.md §6.6) to the ``"beginning"``, the ``"end"``, or
        an aware `datetime` (the first records stored at or after it), in every partition stream of
        every epoch. Per-key order holds among the records delivered afterwards: the gates close
        again and the key-level callbacks run again. Records this member fetched and had not
        delivered are dropped; other members follow within a heartbeat."""
        kind, tms = _seek_target(to)
        # Stop our own deliveries before writing (§6.6).
        for part in list(self._parts.values()):
            self._stop_part(part)
        self._ready.clear()
        self._in_hand = None
        rev, gen, positions = await reset_group(self._c, self.topic, self.group, kind, tms, by=self.member)
        self._pending_reset = (rev, gen, positions)
        self._wake.set()
        await self._control()

    @property
    def assignment(self) -> list:
        """The partitions this member owns now."""
        return sorted(q for q, p in self._parts.items() if not p.lost)

    @property
    def generation(self) -> int:
        """The group generation (number of seeks) this member follows."""
        return self._gen

    async def close(self, clean: bool = True) -> None:
        """Leaves the group: commits what was acknowledged (with auto_commit and `clean`, the record
        in hand counts as acknowledged), hands the partitions back and deletes the member key.
        Idempotent."""
        if self._closed:
            return
        if clean and self.auto_commit:
            passed = self._finish_in_hand()
            if passed is not None:
                await self._passed_boundaries(passed)
        self._in_hand = None
        self._closed = True
        self._wake.set()
        for t in self._tasks:
            t.cancel()
        parts = [p for p in self._parts.values()]
        for part in parts:
            self._stop_part(part)
        for part in parts:
            if part.task is not None:
                try:
                    await part.task
                except BaseException:  # noqa: BLE001 - cancelled
                    pass
        revoked = sorted(p.q for p in parts if not p.lost)
        if revoked:
            await self._callback(self._on_revoked, revoked)
        flushed = []
        for part in sorted(parts, key=lambda p: p.q):
            if part.lost:
                continue
            try:
                await self._state_partition(part.q)
                flushed.append(part)
            except PctlError as e:
                self._logf(f"member {self.member}: {e} (partition {part.q} not released: its lease expires)")
        async def release(part: _Part) -> None:
            try:
                await self._release(part)
            except PctlError:
                pass
        try:
            await asyncio.wait_for(asyncio.gather(*(release(p) for p in flushed if not p.lost)), self._session)
        except asyncio.TimeoutError:
            pass  # the broker is away: the leases expire by themselves
        self._parts = {}
        try:
            await asyncio.wait_for(self._kv.delete(self._prefix + f"m.{self.member}"), 5.0)
        except (PctlError, asyncio.TimeoutError):
            pass
        if self._watch is not None:
            await self._watch.close()
        if self._events_sub is not None:
            try:
                await self._events_sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        if self._stop_listening:
            self._stop_listening()
        for t in self._tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled
                pass

    async def __aenter__(self) -> "Consumer":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        await self.close(clean=exc_type is None)

    # --- acknowledgement, boundaries and commits ------------------------------------------------------

    def _finish_in_hand(self) -> Optional[_Part]:
        """auto_commit: the record in hand is acknowledged. Returns its partition when that passed
        a boundary (the caller then runs _passed_boundaries)."""
        item = self._in_hand
        if item is None or not self.auto_commit:
            return None
        self._in_hand = None
        part = item.part
        if part.lost or self._parts.get(part.q) is not part:
            return None
        if item.seq > part.handled:
            part.handled = item.seq
            if part.handled >= part.next_boundary > 0:
                return part
        return None

    async def _pass_marker(self, part: _Part, seq: int) -> None:
        part.delivered = seq
        if part.handled >= part.last_record:
            await self._advance(part, seq)
        else:
            part.marks_after[part.last_record] = seq

    async def _advance(self, part: _Part, pos: int) -> None:
        if pos > part.handled:
            part.handled = pos
        if part.handled >= part.next_boundary > 0:
            await self._passed_boundaries(part)

    def _compute_next_boundary(self, part: _Part) -> None:
        """The smallest boundary of this partition whose keys-revoked step is still owed (0: none;
        an epoch in which the partition stayed empty owes none)."""
        nb = 0
        for e, _ in _ended(self._desc):
            if part.q < len(e.boundaries):
                b = e.boundaries[part.q]
                if b > 0 and (part.q, e.epoch) not in self._revoked_done and (nb == 0 or b < nb):
                    nb = b
        part.next_boundary = nb

    async def _passed_boundaries(self, part: _Part) -> None:
        """Runs the keys-revoked step for every ended epoch whose boundary in this partition is now
        acknowledged, then commits at once so that the children's gates open (§6.5)."""
        t = self._desc
        todo = _rules.revokes(t, part.q, part.handled, lambda e: (part.q, e) in self._revoked_done)
        self._revoked_done.update((part.q, e) for e in todo)
        ran = bool(todo)
        for en in todo:
            e, nxt = t.epoch(en), t.epoch(en + 1)
            assert e is not None and nxt is not None
            if self._on_keys_revoked is not None:
                ch = await self._key_change(e, nxt, part.q, part.q, revoked=True)
                if ch is not None:
                    await self._callback(self._on_keys_revoked, ch)
            # After the application's keys-revoked callback (which may still write the state),
            # before the member commits past the boundary.
            if self._state is not None and not await self._state_keys_revoked(part, e, nxt):
                return
        self._compute_next_boundary(part)
        if ran and not part.lost and not part.stopped:
            await self._commit_part(part)

    async def _key_change(self, old: wire.Epoch, new: wire.Epoch, partition: int, parent: int, revoked: bool) -> Optional[KeyChange]:
        try:
            f_old = await self._partitioner(old)
            f_new = await self._partitioner(new)
        except PctlError as e:
            self._logf(f"member {self.member}: key change of partition {partition}: {e}")
            return None
        n_old, n_new = old.partitions, new.partitions
        if revoked:
            def moved(k: bytes) -> bool:
                return f_old.partition(k, n_old) == partition and f_new.partition(k, n_new) != partition
        else:
            def moved(k: bytes) -> bool:
                return f_old.partition(k, n_old) == parent and f_new.partition(k, n_new) == partition
        return KeyChange(self.topic, old.epoch, new.epoch, partition, parent, moved)

    async def _keys_assigned(self, part: _Part, item: _Item) -> None:
        rec = item.record
        assert rec is not None
        k = (part.q, rec.epoch, item.parent)
        if k in self._assigned_done:
            return
        self._assigned_done.add(k)
        if self._on_keys_assigned is None:
            return
        old, new = self._desc.epoch(rec.epoch - 1), self._desc.epoch(rec.epoch)
        if old is None or new is None:
            return
        ch = await self._key_change(old, new, part.q, item.parent, revoked=False)
        if ch is not None:
            await self._callback(self._on_keys_assigned, ch)

    async def _hold_lease(self, part: _Part) -> bool:
        """§6.3: no delivery with less than a quarter of the session left on the lease."""
        session_ms = self._session * 1000
        while True:
            if part.lost or part.stopped or self._closed:
                return False
            if _rules.may_deliver(part.lease_until * 1000, time.monotonic() * 1000, session_ms):
                return True
            await self._commit_part(part)
            if part.lost or part.stopped:
                return False
            if _rules.may_deliver(part.lease_until * 1000, time.monotonic() * 1000, session_ms):
                return True
            await asyncio.sleep(0.02)

    async def _commit_part(self, part: _Part) -> None:
        """Writes the partition's acknowledged position (when it moved) and renews its lease (when a
        third of it is used up), by compare-and-set on the last revision written; a lost
        compare-and-set means the partition was taken."""
        if part.lost:
            return
        async with part.lock:
            if part.lost:
                return
            pos = part.handled
            if pos == part.committed and part.lease_until - time.monotonic() > self._session * 2 / 3:
                return
            start = time.monotonic()
            body = _pstate_json(self.member, int(time.time() * 1000 + self._session * 1000), pos, part.gen)
            key = self._prefix + f"p.{part.q}"
            try:
                try:
                    rev = await self._kv.update(key, body, part.rev)
                    if self._lose_commit_answer is not None and self._lose_commit_answer():
                        raise Unavailable("commit answer lost (test hook)")
                except _nats.KVConflict:
                    unsure, cur = part.unsure, await self._own_unanswered(part, key)
                    if cur is _UNREAD:
                        # Ours or a takeover, unknown yet: not lost; the unanswered write stays
                        # and the next commit asks again (the lease still bounds delivery).
                        self._logf(f"member {self.member}: partition {part.q}: commit refused, and the key could not be read back; retrying")
                        return
                    if unsure is None or cur is None:
                        raise
                    part.rev = cur.revision
                    part.committed = max(part.committed, unsure[1])
                    part.lease_until = max(part.lease_until, unsure[2])
                    part.unsure = None
                    self._logf(f"member {self.member}: partition {part.q}: the commit whose answer was lost was stored "
                               f"(revision {cur.revision}); committing again")
                    rev = await self._kv.update(key, body, cur.revision)
            except _nats.KVConflict:
                self._lose(part, "compare-and-set lost")
                return
            except PctlError as e:
                part.unsure = (body, pos, start + self._session)  # stored or not: the next compare-and-set tells
                self._logf(f"member {self.member}: commit of partition {part.q} failed ({e}); retrying")
                return
            part.unsure = None
            part.rev = rev
            part.committed = pos
            part.lease_until = start + self._session
            self.stats.commits += 1
            self._set_pstate(part.q, _PState(rev, pos, part.gen, self.member, 0))

    def _lose(self, part: _Part, why: str) -> None:
        if part.lost:
            return
        self._logf(f"member {self.member}: partition {part.q}: lost ({why}); acknowledged {part.handled}, committed {part.committed}")
        part.lost = True
        self.stats.lost += 1
        self._stop_part(part)
        self._rebalance = True
        self._wake.set()

    def _raise_commit_failed(self, q: int) -> NoReturn:
        raise CommitFailed(f"partition {q} of topic {self.topic} is no longer member {self.member}'s (taken over, revoked "
                           f"or reset): its records will be delivered again by its next owner")

    async def _commit_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._commit_every)
            for part in list(self._parts.values()):
                try:
                    await self._commit_part(part)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - next tick retries
                    self._logf(f"member {self.member}: commit: {e}")

    async def _own_unanswered(self, part: _Part, key: str) -> Any:  # an entry, None or _UNREAD
        """After a failed compare-and-set: the key's entry when it holds exactly the bytes of the
        partition's last write whose answer never came (that write was stored, and the revision is
        ours: spec/protocol.md §6.3); else None (a takeover, or nothing unanswered)."""
        if part.unsure is None:
            return None
        try:
            if self._fail_read_back is not None and self._fail_read_back():
                raise Unavailable("read-back lost (test hook)")
            cur = await self._kv.get(key)
        except PctlError:
            return _UNREAD  # decides nothing (spec §6.3): the caller asks again later
        if cur is None or cur.op not in ("", "PUT") or cur.value != part.unsure[0]:
            return None
        return cur

    async def _release(self, part: _Part) -> None:
        """§6.3: final position, owner empty."""
        async with part.lock:
            if part.lost:
                return
            body = _pstate_json("", 0, part.handled, part.gen)
            key = self._prefix + f"p.{part.q}"
            try:
                try:
                    rev = await self._kv.update(key, body, part.rev)
                except _nats.KVConflict:
                    # The last commit's answer was lost: the release goes on from its revision.
                    # Otherwise the partition stayed leased to this member until its lease
                    # expired, and the member it went to waited for that.
                    cur = await self._own_unanswered(part, key)
                    if cur is _UNREAD:
                        cur = await self._own_unanswered(part, key)  # read once more
                    if cur is _UNREAD:
                        self._logf(f"member {self.member}: partition {part.q}: not released: its key could not be read back (its lease expires)")
                        return
                    if cur is None:
                        raise
                    part.unsure = None
                    self._logf(f"member {self.member}: partition {part.q}: the commit whose answer was lost was stored "
                               f"(revision {cur.revision}); releasing from it")
                    rev = await self._kv.update(key, body, cur.revision)
            except _nats.KVConflict:
                part.lost = True
                return
            part.committed = part.handled
            self._set_pstate(part.q, _PState(rev, part.handled, part.gen, "", 0))

    # --- group state: positions, members, resets --------------------------------------------------------

    def _set_pstate(self, q: int, st: _PState) -> None:
        cur = self._pstate.get(q)
        if cur is not None and cur.rev >= st.rev:
            return
        self._pstate[q] = st
        self._pos_event.set()
        self._pos_event = asyncio.Event()

    def _position(self, q: int) -> int:
        """The effective position of partition q at the member's generation (§6.6)."""
        st = self._pstate.get(q)
        g = self._gen
        if st is not None and st.gen == g:
            return st.position
        if g == 0:
            return 0 if st is None else st.position
        rp = self._reset_positions
        return rp[q] if q < len(rp) else 0

    async def _watch_loop(self) -> None:
        w = self._watch
        assert w is not None
        plen = len(self._subj_prefix)
        try:
            while not self._closed:
                batch = await w.next_batch()
                for raw in batch:
                    self._on_group_msg(raw, plen)
        except ReaderClosed:
            return
        except (NotFound, PermissionDenied) as e:
            self._fail(e)

    def _on_group_msg(self, raw: RawRecord, plen: int) -> None:
        name = raw.subject[plen:].decode("utf-8", "replace")
        kind, _, rest = name.partition(".")
        op = ""
        if raw.headers and b"KV-Operation" in raw.headers:
            _, _, hs = _nats.parse_header_block(raw.headers)
            op = next((v for n, v in hs if n == "KV-Operation"), "")
        if kind == "m":
            if op in ("DEL", "PURGE"):
                self._members.pop(rest, None)
            else:
                self._members[rest] = raw.time_ns
            return
        if kind == "g" and rest == "assignment":
            if self._assignor == "sticky":  # the leader's new record
                self._rebalance = True
                self._wake.set()
            return
        if kind == "p":
            try:
                q = int(rest)
            except ValueError:
                return
            if op:
                return
            st = _parse_pstate(raw.seq, raw.data)
            if st is None:
                return
            self._set_pstate(q, st)
            part = self._parts.get(q)
            if part is not None and not part.lost and st.rev > part.rev and (st.owner != self.member or st.gen != part.gen):
                self._lose(part, f"taken by {st.owner or 'a seek'}")
            return
        if kind == "g" and rest == "reset" and not op:
            self._see_reset(raw.seq, raw.data)

    def _see_reset(self, rev: int, data: bytes) -> None:
        try:
            d = json.loads(data)
            gen = int(d.get("generation") or 0)
            positions = [int(x) for x in d.get("positions") or []]
        except (ValueError, TypeError, AttributeError):
            return
        if gen > self._gen and (self._pending_reset is None or gen > self._pending_reset[1]):
            self._pending_reset = (rev, gen, positions)
            # Drop what was fetched and not delivered, at once (§6.6).
            for part in list(self._parts.values()):
                self._stop_part(part)
            self._ready.clear()
            self._wake.set()

    async def _read_reset(self) -> None:
        e = await self._kv.get(self._prefix + "g.reset")
        if e is not None and not e.deleted:
            self._see_reset(e.revision, e.value)

    async def _apply_reset(self) -> None:
        pending = self._pending_reset
        assert pending is not None
        rev, gen, positions = pending
        self._pending_reset = None
        if gen <= self._gen:
            return
        self._logf(f"member {self.member}: group {self.group}: generation {gen} (seek)")
        self.stats.resets += 1
        parts = list(self._parts.values())
        for part in parts:
            self._stop_part(part)
        self._ready.clear()
        self._in_hand = None
        for part in parts:
            if part.task is not None:
                try:
                    await part.task
                except BaseException:  # noqa: BLE001
                    pass
        owned = sorted(p.q for p in parts if not p.lost)
        if owned:
            await self._callback(self._on_revoked, owned)
        unflushed = set()
        for q in owned:
            try:
                await self._state_partition(q)
            except PctlError as e:
                self._fail(e)
                unflushed.add(q)
        self._home.clear()  # lost partitions' keys too: every key is loaded again after a reset
        self._gen, self._reset_positions, self._reset_rev = gen, positions, rev
        self._drained = (gen, 0)
        self._revoked_done.clear()
        self._assigned_done.clear()
        for part in parts:
            if part.lost or part.q in unflushed:
                continue
            pos = positions[part.q] if part.q < len(positions) else 0
            try:
                r = await self._kv.update(self._prefix + f"p.{part.q}", _pstate_json("", 0, pos, gen), part.rev)
                self._set_pstate(part.q, _PState(r, pos, gen, "", 0))
            except PctlError:
                pass  # the resetter or another member was first
        self._parts = {}
        self._rebalance = True
        self._pos_event.set()
        self._pos_event = asyncio.Event()

    # --- membership and rebalancing -----------------------------------------------------------------

    async def _heartbeat_once(self) -> None:
        body = json.dumps({"id": self.member, "started": self._started_at, "heartbeat": _now_rfc3339(),
                           "owns": self.assignment}).encode()
        try:
            # Short: a heartbeat held up by a lost reply would make the others think us gone.
            await self._kv.put(self._prefix + f"m.{self.member}", body, timeout=max(1.0, self._hb))
        except PermissionDenied as e:
            self._fail(e)
        except PctlError:
            pass  # transient: the next heartbeat retries
        self._members[self.member] = time.time_ns()

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._hb)
            await self._heartbeat_once()
            await self._refresh()
            self._rebalance = True
            self._wake.set()

    async def _refresh(self) -> None:
        try:
            t = await _fetch_topic(self._c, self.topic, timeout=max(1.0, 2 * self._hb))
        except NotFound:
            self._fail(NotFound(f"topic {self.topic} was deleted; member {self.member} of group {self.group} stops"))
            return
        except PctlError:
            return
        if t.id != self.topic_id:
            self._fail(NotFound(f"topic {self.topic} was deleted and created again (id {self.topic_id} is now {t.id}); "
                                f"member {self.member} stops: join the new topic's group with a new consumer"))
            return
        if len(t.epochs) >= len(self._desc.epochs):
            changed = len(t.epochs) != len(self._desc.epochs) or (t.epochs and t.epochs[-1].boundaries != self._desc.epochs[-1].boundaries)
            self._desc = t
            if changed:
                for part in self._parts.values():
                    self._compute_next_boundary(part)
                self._pos_event.set()
                self._pos_event = asyncio.Event()

    async def _on_event(self, _msg: Any) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())

    def _live_members(self) -> list:
        now = time.time_ns()
        limit = int(self._session * 1e9)
        live = {m for m, ts in self._members.items() if now - ts < limit}
        live.add(self.member)
        return sorted(live)

    async def _wanted(self) -> set:
        """§6.2: the partitions this member should read: by modulo, or by the sticky record, which
        the leader rewrites when it no longer matches the group (§6.2.1).

        One view of the descriptor for the whole rebalance (§6.2.1, "One view per rebalance"):
        the assignable partitions, the epoch the record is compared with and written with, and
        the samples all come from ``desc``, taken here before any await; a descriptor the watch
        delivers meanwhile (an epoch change while the record is read) is the next rebalance's."""
        desc = self._desc
        members = self._live_members()
        parts = _rules.assignable(desc, self._position)
        epoch = desc.current.epoch
        if self._assignor != "sticky":
            me = members.index(self.member)
            return {q for i, q in enumerate(parts) if i % len(members) == me}
        key = self._prefix + "g.assignment"
        rec, rev, read_ok = self._record, self._record_rev, True
        try:
            e = await self._kv.get(key)
            rec, rev = None, 0
            if e is not None:
                rev = e.revision
                if not e.deleted:
                    rec = json.loads(e.value)
        except (PctlError, ValueError) as err:
            if isinstance(err, PermissionDenied):
                raise
            read_ok = False
            rec, rev = self._record, self._record_rev
            self._logf(f"member {self.member}: read the group's assignment: {err} (keeping the last one)")
        previous_view, self._last_view = self._last_view, members
        # The view is whole once the group watch has delivered every member key (its snapshot).
        complete = read_ok and self._watch is not None and self._watch.caught_up.is_set()
        if _rules.sticky_writes(rec, members, parts, epoch, self.member, complete, previous_view):
            samples: dict = {}
            for ep in desc.epochs:
                if rec is not None and ep.epoch in (rec.get("epoch"), epoch):
                    samples[ep.epoch] = await self._sample_partitions(ep)
            def place(e: int) -> list:
                if e not in samples:
                    raise NotFound(f"topic {self.topic} has no epoch {e}")
                return samples[e]

            nxt = _rules.next_assignment(rec, members, parts, epoch, place,
                                         datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            body = _rules.encode_assignment(nxt, self.group)  # BadRequest: no retry mends it
            try:
                rev = await (self._kv.update(key, body, rev) if rec is not None else self._kv.create(key, body))
                rec = nxt
                self.stats.assignments += 1
                if "moved" in nxt:
                    self.stats.moved, self.stats.moved_modulo = nxt["moved"], nxt["moved_modulo"]
                self._logf(f"member {self.member}: wrote assignment round {nxt['round']} (epoch {epoch}, {len(members)} members, "
                           f"{len(parts)} partitions, moved {nxt.get('moved', '-')}, modulo would move {nxt.get('moved_modulo', '-')})")
            except PermissionDenied:
                raise
            except (PctlError, _nats.KVConflict) as err:
                self._logf(f"member {self.member}: write the group's assignment: {err} (the next rebalance reads the winner)")
        self._record, self._record_rev = rec, rev
        return set(_rules.sticky_wants(rec, self.member, parts))

    async def _sample_partitions(self, ep: wire.Epoch) -> list:
        """§6.2.1 step 1: the partitions of the sticky assignor's key sample under epoch ep."""
        k = (ep.partitioner.digest, ep.partitioner.config, ep.partitions)
        out = self._samples.get(k)
        if out is None:
            p = await self._partitioner(ep)
            out = p.partition_many(list(_rules.STICKY_SAMPLE), ep.partitions)
            self._samples[k] = out
        return out

    async def _control(self) -> None:
        """Seeks and rebalances, in the iterator's task (between two records)."""
        if self._pending_reset is not None:
            await self._apply_reset()
        if not self._rebalance or self._closed:
            return
        self._rebalance = False
        try:
            want = await self._wanted()
        except BadRequest as e:  # a sticky record over the bucket's limit: this group cannot use sticky here
            self._fail(e)
            return
        drop = [p for p in self._parts.values() if p.lost or p.q not in want]
        if drop:
            for part in drop:
                self._stop_part(part)
            for part in drop:
                if part.task is not None:
                    try:
                        await part.task
                    except BaseException:  # noqa: BLE001
                        pass
            for part in drop:
                if part.lost:
                    # Its new owner loads its keys itself: what this member holds of them may be
                    # stale, and is loaded again if the partition comes back (§6.9).
                    self._state_forget(part.q)
            await self._callback(self._on_revoked, sorted(p.q for p in drop))
            for part in drop:
                if not part.lost:
                    try:
                        await self._state_partition(part.q)
                    except PctlError as e:
                        self._fail(e)  # not released: its lease expires, the next owner loads what is durable
                        if self._parts.get(part.q) is part:
                            del self._parts[part.q]
                        continue
                    try:
                        await self._release(part)
                    except PctlError as e:
                        self._logf(f"member {self.member}: release of partition {part.q}: {e}")
                if self._parts.get(part.q) is part:
                    del self._parts[part.q]
        # Parents first (spec/protocol.md §6.7): the partitions whose next records are of the oldest
        # epoch, acquired together, then the next epoch's; their tasks start in that order.
        self._take_round += 1
        gained = []
        for group in _parent_first(self._desc, [q for q in want if q not in self._parts], self._position):
            if self._closed:
                break
            if self._pending_reset is not None:
                self._rebalance = True
                break
            if self._on_take is not None:
                self._on_take(self._take_round, [(q, self._position(q)) for q in group])
            results = await asyncio.gather(*(self._acquire_key(q) for q in group), return_exceptions=True)
            bug: Optional[BaseException] = None
            got = []
            for q, r in zip(group, results):
                if isinstance(r, PctlError):
                    self._logf(f"member {self.member}: acquire partition {q}: {r}")
                elif isinstance(r, BaseException):
                    bug = bug or r
                elif r is not None:
                    self._parts[q] = r
                    got.append(r)
            for part in got:
                # One at a time, in the iterator's task: a partition acquired at a boundary may
                # owe its keys-revoked callback (§6.5).
                try:
                    await self._acquired(part)
                except PctlError as e:
                    self._logf(f"member {self.member}: acquire partition {part.q}: {e}")
                    del self._parts[part.q]
                    continue
                self._start_part(part)
                gained.append(part.q)
            if bug is not None:
                raise bug
        if gained:
            await self._callback(self._on_assigned, sorted(gained))

    async def _acquire_key(self, q: int) -> Optional[_Part]:
        """§6.3 acquire, with §6.6's check for a seek: a key of a newer generation, or a newer
        g.reset, is read (and applied) first. Only the group's bucket: several run at once."""
        key = self._prefix + f"p.{q}"
        e = await self._kv.get(key)
        g = await self._kv.get(self._prefix + "g.reset")
        if g is not None and not g.deleted and g.revision > self._reset_rev:
            self._see_reset(g.revision, g.value)
            if self._pending_reset is not None:
                self._rebalance = True
                return None
        now_ms = int(time.time() * 1000)
        start = time.monotonic()
        lease_end = now_ms + int(self._session * 1000)
        if e is None or e.deleted:
            pos = 0  # §6.6: a partition without a key is at 0 (a resetter creates the keys it finds missing)
            body = _pstate_json(self.member, lease_end, pos, self._gen)
            try:
                rev = await (self._kv.create(key, body))
            except _nats.KVConflict:
                return None
        else:
            st = _parse_pstate(e.revision, e.value)
            if st is None:
                self._logf(f"member {self.member}: partition {q}: unreadable group state {e.value[:80]!r}")
                return None
            self._set_pstate(q, st)
            if st.gen > self._gen:
                await self._read_reset()
                self._rebalance = True
                return None
            if not _rules.may_acquire(self.member, st.owner, st.lease_end, now_ms, _rules.max_clock_skew_ms(int(self._session * 1000))):
                return None  # someone else's, still leased (§6.3, with the clock-skew bound)
            pos = st.position if st.gen == self._gen else self._position(q)
            if st.owner and st.owner != self.member:
                self._logf(f"member {self.member}: partition {q}: lease of {st.owner} expired; taking over at {pos}")
            body = _pstate_json(self.member, lease_end, pos, self._gen)
            try:
                rev = await self._kv.update(key, body, e.revision)
            except _nats.KVConflict:
                return None
        self._set_pstate(q, _PState(rev, pos, self._gen, self.member, lease_end))
        return _Part(q, rev, pos, self._gen, start + self._session)

    async def _acquired(self, part: _Part) -> None:
        """After _acquire_key: the boundaries behind the partition's start position."""
        q, pos = part.q, part.start
        # Boundaries behind the start position were passed by an earlier owner; one right at it
        # (the position is the boundary or its fence marker) may still owe its keys-revoked step,
        # when the member that reached it stopped or crashed before running it.
        for ep, _ in _ended(self._desc):
            if q < len(ep.boundaries) and ep.boundaries[q] + 1 < pos:
                self._revoked_done.add((q, ep.epoch))
        self._compute_next_boundary(part)
        if part.next_boundary and pos >= part.next_boundary:
            await self._passed_boundaries(part)
        self._logf(f"member {self.member}: partition {q}: acquired at {pos}")

    # --- partition tasks -------------------------------------------------------------------------------

    def _start_part(self, part: _Part) -> None:
        part.reader = StreamReader(self._c, wire.stream_name(self.topic, part.q), part.start + 1, heartbeat=self._hb,
                                   batch=256, max_buffer=1024, logf=self._logf,
                                   filter_subject=f"{wire.DATA_PREFIX}.{self.topic}.>", whole_stream=True)
        part.task = asyncio.ensure_future(self._run_part(part))

    def _stop_part(self, part: _Part) -> None:
        if part.stopped:
            return
        part.stopped = True
        part.space.set()
        if part.task is not None and not part.task.done():
            part.task.cancel()
        if part.reader is not None:
            asyncio.ensure_future(part.reader.close())

    async def _run_part(self, part: _Part) -> None:
        reader = part.reader
        assert reader is not None
        topic = self.topic
        q = part.q
        token = part.token
        try:
            while not part.stopped:
                batch = await reader.next_batch()
                keys = compaction.key_subjects(self._desc.raw)
                items = [_parse(raw, topic, q, token, keys) for raw in batch]
                await self._place(items, q)
                parents = await self._parents(items) if (self._gating or self._on_keys_assigned) else None
                for i, it in enumerate(items):
                    if part.stopped:
                        return
                    err = None
                    if isinstance(it, tuple):
                        (seq, parent), rec = it, None  # a fence marker: parent carries its epoch
                    else:
                        seq, rec, parent = it.seq, it, -1
                        if rec.misplaced is not None:
                            rec, err = await self._misplaced_record(part, rec)  # err: nothing after it here
                        elif self._skips_copy(rec):
                            rec = None  # passed like a fence marker
                        elif parents is not None and rec.key is not None and parents[i] is not None:
                            parent = await self._gate(part, rec, parents[i])
                    while part.queued >= self._max_buffered and not part.stopped:
                        part.space.clear()
                        await part.space.wait()
                    if part.stopped and err is None:
                        return
                    part.queued += 1
                    self._ready.append(_Item(part, seq, rec, parent, err))
                    self._wake.set()
                    if err is not None:
                        return
        except (asyncio.CancelledError, ReaderClosed, _Stop):
            return
        except (NotFound, PermissionDenied) as e:
            self._fail(e)
        except PctlError as e:
            self._fail(e)
        except Exception as e:  # noqa: BLE001 - a bug: fail the member loudly rather than stall
            self._fail(e)

    async def _place(self, items: list, q: int) -> None:
        """§6.8: marks every keyed record that is not in its key's partition for its own epoch
        (one batch call into each epoch's module), or that has no usable key or epoch."""
        by_epoch: dict[int, list] = {}
        for it in items:
            if isinstance(it, tuple) or it.misplaced is not None or it.key is None:
                continue
            if it.epoch not in by_epoch:
                by_epoch[it.epoch] = []
            by_epoch[it.epoch].append(it)
        for e, recs in by_epoch.items():
            ep = await self._known_epoch(e)
            if ep is None:
                for r in recs:
                    r.misplaced = Misplacement(-1, f"the topic has no epoch {e}")
                continue
            f = await self._partitioner(ep)
            for r, want in zip(recs, f.partition_many([r.key for r in recs], ep.partitions)):
                if want != q:
                    r.misplaced = Misplacement(want, f"epoch {e}'s partitioner ({ep.partitions} partitions) puts the key in partition {want}")

    async def _known_epoch(self, e: int) -> Optional[wire.Epoch]:
        """Epoch e of the descriptor; a record of an epoch newer than the descriptor waits for it
        (its streams are bound before it is active). None: the topic has no such epoch."""
        while True:
            ep = self._desc.epoch(e)
            if ep is not None:
                return ep
            if not self._desc.epochs or e <= self._desc.current.epoch:
                return None
            await self._refresh()
            self._check_fatal()
            if self._desc.epoch(e) is None:
                await asyncio.sleep(0.05)

    async def _misplaced_record(self, part: _Part, rec: Record) -> tuple:
        """Applies the misplaced policy: (record to queue or None for a skip, stop error or None)."""
        mp = rec.misplaced
        assert mp is not None
        self.stats.misplaced += 1
        self._logf(f"member {self.member}: partition {part.q}: misplaced record at {rec.seq} (epoch {rec.epoch}, key {rec.key!r}): {mp.reason}")
        await self._callback(self._on_misplaced, rec)
        if self._misplaced == "deliver":
            return rec, None
        if self._misplaced == "skip":
            return None, None
        return None, MisplacedRecord(self.topic, part.q, rec.seq, rec.epoch, rec.key, mp)

    async def _parents(self, items: list) -> Optional[list]:
        """For the keyed records of a batch: their partitions in the older epochs that matter,
        {epoch: partition}, one batch call into each epoch's module (None for a record that needs
        none). Those are the epochs the group has not fully drained (for the gate) and, when there
        is a keys-assigned callback, the previous epoch (to know where the key came from)."""
        t = self._desc
        first = t.epochs[0].epoch if t.epochs else 1
        drained = self._drained_through() if self._gating else 1 << 62
        announce = self._on_keys_assigned is not None
        need: dict[int, list] = {}
        out: list = [None] * len(items)
        for i, it in enumerate(items):
            if isinstance(it, tuple) or it.key is None or it.misplaced is not None or it.epoch <= first:
                continue
            lo = max(drained + 1, first)
            if announce:
                lo = min(lo, it.epoch - 1)
            if lo >= it.epoch:
                continue
            out[i] = {}
            for e in range(lo, it.epoch):
                need.setdefault(e, []).append(i)
        for e, idx in need.items():
            ep = await self._ended_epoch(e)
            f = await self._partitioner(ep)
            qs = f.partition_many([items[i].key for i in idx], ep.partitions)
            for i, pq in zip(idx, qs):
                out[i][e] = pq
        return out

    async def _ended_epoch(self, e: int) -> wire.Epoch:
        """Epoch e with its boundaries: a record of a newer epoch exists, so it has ended; the
        descriptor is read again until it says so."""
        while True:
            ep = self._desc.epoch(e)
            if ep is not None and ep.boundaries is not None and len(ep.boundaries) == ep.partitions and self._desc.epoch(e + 1) is not None:
                return ep
            await self._refresh()
            self._check_fatal()
            ep = self._desc.epoch(e)
            if ep is not None and ep.boundaries is not None and self._desc.epoch(e + 1) is not None:
                return ep
            await asyncio.sleep(0.05)

    async def _gate(self, part: _Part, rec: Record, parents: dict) -> int:
        """§6.5: waits until, for every older epoch the group has not fully drained, the key's
        partition there is committed past the epoch's boundary (the decision: _rules.gate_record).
        Returns the key's partition in the previous epoch when the key moved here from another
        partition (for keys-assigned), else -1."""
        # Epochs below those computed in _parents were drained then (positions only grow).
        drained = max(self._drained_through(), min(parents) - 1) if self._gating else rec.epoch - 1
        if drained >= rec.epoch - 1 and self._on_keys_assigned is None:
            # Every older epoch is drained (since _parents ran): nothing to wait for, and no
            # keys-assigned step to run. Once a replay's parents drained, this is all it costs.
            return -1
        await self._ended_epoch(rec.epoch - 1)
        started = 0.0
        waited = False
        g = _rules.gate_record(self._desc, drained, rec.epoch, part.q, lambda ep: parents[ep.epoch], self._position)
        prev = g["parent"]
        for w in g["waits"]:
            qe, boundary, e = w["partition"], w["boundary"], w["epoch"]
            last_fetch = time.monotonic()
            logged = False
            while self._position(qe) < boundary:
                if part.stopped or part.gen != self._gen:
                    raise _Stop()
                if not waited:
                    waited, started = True, time.monotonic()
                ev = self._pos_event
                try:
                    await asyncio.wait_for(ev.wait(), self._hb)
                except asyncio.TimeoutError:
                    pass
                now = time.monotonic()
                if now - last_fetch >= self._hb and self._position(qe) < boundary:
                    # The watch brings positions as they are committed; in case it lags, read the
                    # parent's key directly once a heartbeat while waiting.
                    last_fetch = now
                    await self._fetch_pstate(qe)
                if not logged and now - started > 3 * self._session:
                    logged = True
                    self._logf(f"member {self.member}: partition {part.q}: record {rec.seq} (epoch {rec.epoch}) still waits "
                               f"for partition {qe} to reach {boundary} (epoch {e} boundary); the group is at {self._position(qe)}"
                               + ("; with auto_commit off, gates open only when the parents' records are committed" if not self.auto_commit else ""))
        a = g["assigned"]
        if self._on_keys_assigned is not None and a is not None and (part.q, rec.epoch, prev) not in self._assigned_done:
            # KIP-253's handover: the old owner runs keys-revoked before it moves past the fence
            # marker (boundary + 1), so keys-assigned here waits until the group is past the
            # boundary (§6.5: > b, or = b on a retired partition no live lease holds). It used to
            # go on after a session timeout at b, before the old owner's keys revoked returned.
            last_fetch = time.monotonic()
            while not self._past_boundary(prev, a["boundary"]):
                if part.stopped or part.gen != self._gen:
                    raise _Stop()
                try:
                    await asyncio.wait_for(self._pos_event.wait(), self._hb)
                except asyncio.TimeoutError:
                    pass
                if time.monotonic() - last_fetch >= self._hb and not self._past_boundary(prev, a["boundary"]):
                    last_fetch = time.monotonic()
                    await self._fetch_pstate(prev)
        if waited:
            d = time.monotonic() - started
            self.stats.gated += 1
            self.stats.total_wait += d
            self.stats.max_wait = max(self.stats.max_wait, d)
        return prev if a is not None else -1

    def _past_boundary(self, q: int, b: int) -> bool:
        st = self._pstate.get(q)
        leased = st is not None and _rules.lease_live(st.owner, st.lease_end, int(time.time() * 1000),
                                                      _rules.max_clock_skew_ms(int(self._session * 1000)))
        return _rules.past_boundary(self._desc, q, b, self._position, leased)

    async def _fetch_pstate(self, q: int) -> None:
        """Reads partition q's group state directly (the watch may lag)."""
        try:
            en = await self._kv.get(self._prefix + f"p.{q}")
            if en is not None and not en.deleted:
                st = _parse_pstate(en.revision, en.value)
                if st is not None:
                    self._set_pstate(q, st)
        except PctlError:
            pass

    def _drained_through(self) -> int:
        """The newest ended epoch e such that every partition of every epoch up to e has an
        effective position at or past its boundary; cached per generation (positions only grow
        within one, §6.6)."""
        t = self._desc
        if not t.epochs:
            return 0
        g, d = self._drained
        if g != self._gen:
            d = 0
        d = _rules.drained_through(t, d, self._position)
        self._drained = (self._gen, d)
        return d

    async def _partitioner(self, ep: wire.Epoch) -> "Partitioner":
        return await self._c.partitioner(ep.partitioner)

    # --- state handover (spec/protocol.md §6.9) ---------------------------------------------------------

    async def _state_call(self, what: str, ks: KeySet) -> None:
        assert self._state is not None
        r = getattr(self._state, what)(ks)
        if inspect.isawaitable(r):
            await r

    async def _state_ensure(self, part: _Part, key: bytes) -> bool:
        """Loads a key's state before its record is delivered from `part`, unless the member holds
        it; it then holds it for that partition. False when the load failed (the member stops)."""
        h = self._home.get(key)
        if h is not None:
            if h != part.q:
                self._home[key] = part.q  # it moved here from a partition of ours
            return True
        try:
            await self._state_call("load", KeySet(self.topic, StateReason.KEY_ARRIVES, part.q, [key]))
        except Exception as e:  # noqa: BLE001 - the application's error stops the member
            err = InternalError(f"state load of key {key!r} (partition {part.q}) failed: {e}")
            err.__cause__ = e
            self._fail(err)
            return False
        self._home[key] = part.q
        return True

    async def _state_keys_revoked(self, part: _Part, e: wire.Epoch, nxt: wire.Epoch) -> bool:
        """Keys revoked (q, e): the held keys of q that move to a partition this member does not
        own are flushed; the others stay, held for their new partition. False when it failed."""
        q = part.q
        try:
            f_old, f_new = await self._partitioner(e), await self._partitioner(nxt)
            leave = []
            for k, h in list(self._home.items()):
                if h != q or f_old.partition(k, e.partitions) != q:
                    continue
                p = f_new.partition(k, nxt.partitions)
                if p == q:
                    continue
                if p in self._parts:
                    self._home[k] = p
                else:
                    leave.append(k)
            if not leave:
                return True
            await self._state_call("flush", KeySet(self.topic, StateReason.KEYS_REVOKED, q, leave, e.epoch, nxt.epoch))
        except Exception as ex:  # noqa: BLE001
            err = InternalError(f"state flush (keys revoked from partition {q}, epoch {e.epoch}) failed: {ex}")
            err.__cause__ = ex
            self._fail(err)
            return False
        for k in leave:
            if self._home.get(k) == q:
                del self._home[k]
        return True

    async def _state_partition(self, q: int) -> None:
        """Flushes the keys held for partition q (its reading has stopped); raises InternalError
        when the flush fails."""
        if self._state is None:
            return
        keys = [k for k, h in self._home.items() if h == q]
        if not keys:
            return
        try:
            await self._state_call("flush", KeySet(self.topic, StateReason.PARTITION_REVOKED, q, keys))
        except Exception as e:  # noqa: BLE001
            err = InternalError(f"state flush of partition {q} failed: {e}")
            err.__cause__ = e
            raise err from e
        for k in keys:
            if self._home.get(k) == q:
                del self._home[k]

    def _state_forget(self, q: int) -> None:
        """Stops holding the keys held for q without flushing them (q's lease was lost)."""
        for k in [k for k, h in self._home.items() if h == q]:
            del self._home[k]

    # --- errors and callbacks ---------------------------------------------------------------------------

    def _fail(self, e: BaseException) -> None:
        if self._fatal is None:
            self._fatal = e
        self._wake.set()

    def _check_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    def _on_violation(self, op: str, subject: str) -> None:
        low = subject.lower()  # nats-py reports it in lower case
        if low.startswith("$js.api") or low.startswith(f"$kv.{GROUPS_BUCKET}"):
            self._fail(self._c.permission_error(subject, op))

    async def _callback(self, cb: Optional[Callback], arg: Any) -> None:
        if cb is None:
            return
        r = cb(arg)
        if inspect.isawaitable(r):
            await r


# --- helpers --------------------------------------------------------------------------------------------


_HEADER_LINE = re.compile(rb"([^:\r\n]*):([^\r\n]*)")
STARTS = ("now", "beginning", "current-epoch")
"""Where a new group may start (Consumer's `start`, spec/protocol.md §6.1, §10.5)."""

_B_KEY, _B_PRODUCER, _B_SEQ = wire.HEADER_KEY.encode(), wire.HEADER_PRODUCER.encode(), wire.HEADER_SEQ.encode()
_B_TIME, _B_FENCE = HEADER_TIME.encode(), HEADER_FENCE.encode()
# pctl's own headers, by their exact names: 1 key, 2 producer, 3 seq, 4 time, 5 fence, 0 ignored.
_B_TOMBSTONE, _B_BACKFILL = compaction.HEADER_TOMBSTONE.encode(), compaction.HEADER_BACKFILL.encode()
_KNOWN = {_B_KEY: 1, _B_PRODUCER: 2, _B_SEQ: 3, _B_TIME: 4, _B_FENCE: 5, _B_TOMBSTONE: 6, _B_BACKFILL: 7,
          wire.HEADER_MSG_ID.encode(): 0}
_subjects: dict = {}  # record subject -> (epoch, partition, "") or None: few distinct ones, parsed once


def _subject(subject: bytes) -> Optional[tuple]:
    """(epoch, partition, key token) of pctl.data.<topic>.<epoch>.<partition>[.<kt>] (as Go's
    wire.SplitRecordSubject; token "" without the sixth), or None. Compacted topics' subjects
    (one per key) are not cached."""
    r = _subjects.get(subject, False)
    if r is False:
        r = None
        parts = subject.split(b".")
        if (len(parts) == 5 or (len(parts) == 6 and parts[5])) and parts[0] == b"pctl" and parts[1] == b"data":
            e, p = _atoi(parts[3]), _atoi(parts[4])
            if e is not None and p is not None:
                r = (e, p, parts[5].decode("ascii", "replace") if len(parts) == 6 else "")
        if len(parts) == 6:
            return r
        if len(_subjects) > 4096:
            _subjects.clear()
        _subjects[subject] = r
    return r


def _parse(raw: RawRecord, topic: str, q: int, owner: int, compact: bool = False) -> Union[Record, tuple]:
    """A record from a stream message, or (sequence, epoch it starts) for a fence marker. A keyed
    record whose key header or subject is unusable comes out marked misplaced (§6.8)."""
    key = None
    key_hdr: Optional[str] = None
    producer = ""
    pseq = 0
    ts = -1
    tomb = False
    origin = None
    headers: dict = {}
    h = raw.headers
    if h:
        for bn, bv in _HEADER_LINE.findall(h, h.find(b"\r\n") + 2):
            k = _KNOWN.get(bn)
            if k is None:
                bn = bn.strip()
                k = _KNOWN.get(bn)
                if k is None:
                    low = bn[:5].lower()
                    if low == b"pctl-" or low == b"nats-":
                        continue  # another protocol header: not the application's
                    n = bn.decode("ascii", "replace")
                    if not n or any(c.isspace() for c in n):
                        continue
                    v = bv.strip().decode("utf-8", "replace")
                    lst = headers.get(n)
                    if lst is None:
                        headers[n] = [v]
                    else:
                        lst.append(v)
                    continue
            if k == 1:
                if key_hdr is None:
                    key_hdr = bv.strip().decode("utf-8", "replace")
            elif k == 2:
                producer = bv.strip().decode("utf-8", "replace")
            elif k == 3:
                v = bv.strip()
                pseq = int(v) if v.isdigit() else 0
            elif k == 4:
                t = parse_time(bv.strip().decode("ascii", "replace"))
                ts = -1 if t is None else t
            elif k == 5:
                v = bv.strip()
                return raw.seq, (int(v) if v.isdigit() else 0)
            elif k == 6:
                tomb = tomb or bool(bv.strip())
            elif k == 7:
                if origin is None:
                    origin = compaction.parse_origin(bv.strip().decode("ascii", "replace"))
    sub = _subject(raw.subject)
    epoch = sub[0] if sub else 0
    if ts < 0:
        ts = raw.time_ns // 1_000_000
    mp = None
    if key_hdr is not None:
        key = decode_key(key_hdr)
        if key is None:
            mp = Misplacement(-1, f"its {wire.HEADER_KEY} header {_go_quote(key_hdr[:40])} is not b64:<standard base64>")
        elif sub is None:
            mp = Misplacement(-1, f"its subject {_go_quote(raw.subject.decode('utf-8', 'replace'))} is not an epoch's record subject")
        elif sub[1] != q:
            mp = Misplacement(-1, f"its subject {_go_quote(raw.subject.decode('utf-8', 'replace'))} names partition {sub[1]}")
        elif compact and sub[2] != compaction.key_token(key):
            mp = Misplacement(-1, f"its subject {_go_quote(raw.subject.decode('utf-8', 'replace')[:80])} does not end with its key's "
                                  f"token (a compacted or backfilled topic's record subject names its key, spec/protocol.md §10.1)")
        elif not compact and sub[2]:
            mp = Misplacement(-1, f"its subject {_go_quote(raw.subject.decode('utf-8', 'replace')[:80])} has a key token, but the "
                                  f"topic has no key subjects (neither compacted nor backfilled)")
    r = Record(topic, q, epoch, raw.seq, key, raw.data, headers, ts, raw.time_ns, producer, pseq, owner)
    r.tombstone = tomb
    if mp is not None:
        r.misplaced = mp
    elif origin is not None and origin[0] < epoch:
        r.backfill = origin
    return r


def _atoi(b: bytes) -> Optional[int]:
    """Go's strconv.Atoi on a subject token."""
    s = b.decode("ascii", "replace")
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body.isdigit() or not body.isascii():
        return None
    return int(s)


def _go_quote(s: str) -> str:
    """Go's %q of a string (printable characters as they are)."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _read_epoch(t: wire.Topic, q: int, pos: int) -> int:
    """The epoch of the record after position pos in partition q (spec/protocol.md §6.7): the
    oldest epoch in which q exists and whose boundary in q is above pos; the current epoch once q is
    past every ended epoch's. A hint for the order partitions are taken in: the gate decides."""
    for ep in t.epochs:
        if q >= ep.partitions:
            continue
        if not _rules.ended(ep) or pos < ep.boundaries[q]:
            return ep.epoch
    return t.current.epoch


def _parent_first(t: wire.Topic, qs: list, pos: Callable[[int], int]) -> list:
    """The partitions qs grouped by the epoch each reads next, oldest first, each group ascending
    (as the Go client's parentFirst, client/parentfirst.go)."""
    by: dict[int, list] = {}
    for q in qs:
        by.setdefault(_read_epoch(t, q, pos(q)), []).append(q)
    return [sorted(by[e]) for e in sorted(by)]


def _ended(t: wire.Topic):
    """(epoch, next epoch) for every ended epoch of the descriptor."""
    es = t.epochs
    for i in range(len(es) - 1):
        if es[i].boundaries is not None:
            yield es[i], es[i + 1]


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


async def _fetch_topic(client: "Client", topic: str, timeout: Optional[float] = None) -> wire.Topic:
    deadline = time.monotonic() + client.timeout
    while True:
        try:
            t = await client.topic(topic, timeout=timeout)
        except Unavailable as e:
            if is_topic_creating(e) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                continue
            raise
        if (t.creating or not t.epochs) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            continue
        return t


async def _last_seq(client: "Client", stream: str) -> int:
    try:
        info = await _nats.js_request(client, f"$JS.API.STREAM.INFO.{stream}", {})
    except _nats.JSError as e:
        if e.err_code == _nats.ERR_STREAM_NOT_FOUND:
            return 0
        raise Unavailable(f"read {stream}: {e}") from None
    return int((info.get("state") or {}).get("last_seq") or 0)


def _seek_target(to: SeekTarget) -> tuple:
    if isinstance(to, str):
        v = to.lower()
        if v in ("beginning", "earliest"):
            return "beginning", 0
        if v in ("end", "latest"):
            return "end", 0
        raise BadRequest(f"seek to {to!r}: give \"beginning\", \"end\" or an aware datetime")
    if isinstance(to, datetime):
        if to.tzinfo is None:
            raise BadRequest("seek: a naive datetime has no time zone; give an aware one (e.g. datetime.now(timezone.utc))")
        return "time", int(to.timestamp() * 1000)
    raise BadRequest(f"seek to {type(to).__name__}: give \"beginning\", \"end\" or an aware datetime")


async def _target(client: "Client", topic: str, q: int, kind: str, tms: int) -> int:
    """A seek's target in partition stream q (§6.6): 0, the last sequence, or one below the first
    message stored at or after tms. For a time, a reader created to start there tells: the server
    reports it as delivered up to the sequence before its start (this needs only what a consumer
    credential scoped to the topic may do, §8.2)."""
    stream = wire.stream_name(topic, q)
    if kind == "beginning":
        return 0
    last = await _last_seq(client, stream)
    if kind == "end" or last == 0:
        return last
    when = datetime.fromtimestamp(tms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    name = "pctl_seek_" + secrets.token_hex(8)
    filt = f"{wire.DATA_PREFIX}.{topic}.>"
    cfg = {"name": name, "ack_policy": "none", "deliver_policy": "by_start_time", "opt_start_time": when,
           "mem_storage": True, "num_replicas": 1, "inactive_threshold": int(10e9), "filter_subject": filt}
    try:
        r = await _nats.js_request(client, f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{filt}",
                                   {"stream_name": stream, "config": cfg, "action": "create"})
    except _nats.JSError as e:
        if e.err_code == _nats.ERR_STREAM_NOT_FOUND:
            return 0
        raise Unavailable(f"seek {stream} to {when}: {e}") from None
    try:
        await _nats.js_request(client, f"$JS.API.CONSUMER.DELETE.{stream}.{name}", {})
    except (PctlError, _nats.JSError):
        pass  # removed by its inactive threshold anyway
    return min(last, int((r.get("delivered") or {}).get("stream_seq") or 0))


async def reset_group(client: "Client", topic: str, group: str, kind: str, tms: int = 0, *,
                      by: str = "pctl-python") -> tuple:
    """Resets consumer group `group` of `topic` (spec/protocol.md §6.6, the resetter's side): to
    ``"beginning"``, ``"end"`` or ``"time"`` (`tms`, unix milliseconds: the first records stored at
    or after it), in every partition stream the topic has ever had. Writes ``g.reset`` with the
    next generation (the commit point), then every partition key. Members follow by themselves.
    Returns (revision of g.reset, generation, positions). Needs the consumer or admin role."""
    # A reset writes group keys (and creates a missing group): the members' server (§6.1, §6.6).
    require_server(client, "pctl's group reset", "it writes the group's keys that members read, spec/protocol.md §6.1, §6.6")
    kv = _nats.KV(client, GROUPS_BUCKET)
    while True:
        desc = await _fetch_topic(client, topic)
        prefix = f"{desc.id}.{group}."
        g = await kv.get(prefix + "g.reset")
        gen, rev = 0, 0
        if g is not None and not g.deleted:
            rev = g.revision
            try:
                gen = int(json.loads(g.value).get("generation") or 0)
            except (ValueError, TypeError, AttributeError):
                gen = 0
        m = _rules.max_partitions(desc)
        positions = list(await asyncio.gather(*(_target(client, topic, q, kind, tms) for q in range(m))))
        body: dict[str, Any] = {"generation": gen + 1, "to": kind, "positions": positions, "by": by, "at": _now_rfc3339()}
        if kind == "time":
            body["time"] = tms
        data = json.dumps(body).encode()
        try:
            if rev:
                rev = await kv.update(prefix + "g.reset", data, rev)
            else:
                rev = await kv.create(prefix + "g.reset", data)
        except _nats.KVConflict:
            continue  # another reset won: go on top of it
        break
    gen += 1
    for q in range(m):
        key = prefix + f"p.{q}"
        while True:
            e = await kv.get(key)
            body_q = _pstate_json("", 0, positions[q], gen)
            try:
                if e is None or e.deleted:
                    await kv.create(key, body_q)
                else:
                    st = _parse_pstate(e.revision, e.value)
                    if st is not None and st.gen >= gen:
                        break
                    await kv.update(key, body_q, e.revision)
            except _nats.KVConflict:
                continue
            break
    try:
        await kv.create(prefix + "g.created", _now_rfc3339().encode())
    except _nats.KVConflict:
        pass
    return rev, gen, positions
