"""The producer: client-side partitioning and publishing with fencing (spec/protocol.md §5.1).

Data path: `send` numbers a record (Pctl-Seq), partitions it with the current epoch's module and
queues it on the sink of its partition. A sink publishes its partition's records in order, up to
`max_in_flight` unacknowledged, and completes their futures in order. A sink that meets a failure
stops sending, waits for its publishes in flight, and hands every unacknowledged record to the
control task, which re-reads the descriptor: a newer epoch means the old one was fenced, so every
sink is stopped and drained and every unacknowledged record is re-partitioned and re-sent in its
original order under the new epoch; the same epoch means a transient failure, so the sink retries
the same records, in order, with the same Nats-Msg-Id."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

if TYPE_CHECKING:
    from datetime import datetime

import nats.errors

from . import _nats, wire
from .errors import BadRequest, NotFound, PctlError, PermissionDenied, PluginFailed, Unavailable
from .record import HEADER_TIME, HeadersArg, check_headers, check_time

if TYPE_CHECKING:
    from .client import Client
    from .partitioner import Partitioner

Data = Union[bytes, bytearray, memoryview, str]


@dataclass(frozen=True)
class RecordMetadata:
    """Where an acknowledged record is stored: it will be delivered to every consumer group."""
    partition: int
    epoch: int
    seq: int  # stream sequence in the partition's stream
    producer_seq: int  # the record's Pctl-Seq: this producer's count, from 1, in send order
    duplicate: bool = False  # a retry found the record already stored (no second copy was written)


class _NoResponders(Exception):
    """No stream is bound to the subject: fenced, or briefly unavailable."""


class _AckTimeout(Exception):
    """No acknowledgement within ack_timeout: the publish is ambiguous."""


class _JSError(Exception):
    """A JetStream error in a publish acknowledgement."""

    def __init__(self, code: int, err_code: int, description: str):
        super().__init__(f"JetStream error {err_code}: {description}")
        self.code, self.err_code, self.description = code, err_code, description


def _permanent(e: BaseException) -> bool:
    """A publish error that no retry can cure: the stream refused the message itself."""
    if isinstance(e, _JSError):
        d = e.description.lower()
        return e.err_code == 10054 or "maximum message size" in d or "exceeds" in d
    return isinstance(e, nats.errors.MaxPayloadError)


class _Pending:
    __slots__ = ("seq", "key", "value", "future", "epoch", "partition", "subject", "msg_id", "block", "ambiguous", "tries",
                 "floor")

    def __init__(self, seq: int, key: Optional[bytes], value: bytes, future: asyncio.Future, msg_id: str, block: bytes):
        self.seq, self.key, self.value, self.future = seq, key, value, future
        self.epoch = self.partition = 0
        self.subject = ""
        self.msg_id = msg_id
        self.block = block  # the record's NATS header block: its identity, the same on every re-send
        self.ambiguous = False  # from its first lost acknowledgement until a search clears it
        self.tries = 0
        # The partition's last acknowledged sequence when the record was first published there:
        # if stored, it is above this (spec/protocol.md §5.1, the ambiguous search's floor).
        self.floor: Optional[int] = None


class _Event:
    __slots__ = ("sink", "left", "cause", "final")

    def __init__(self, sink: "_Sink", left: list, cause: Optional[BaseException], final: bool = False):
        self.sink, self.left, self.cause, self.final = sink, left, cause, final


async def _max_record(client: "Client", topic: str) -> int:
    """The largest message the topic's partition streams take (their max_msg_size; every partition
    stream of a topic has the same), else the server's max payload."""
    try:
        info = await _nats.js_request(client, f"$JS.API.STREAM.INFO.{wire.stream_name(topic, 0)}", {})
        m = int((info.get("config") or {}).get("max_msg_size") or 0)
    except (PctlError, _nats.JSError):
        m = 0
    mp = int(client.nc.max_payload or 0)
    if m <= 0:
        return mp
    return min(m, mp) if mp else m


def _data(v: Data, what: str) -> bytes:
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise BadRequest(f"a record's {what} is bytes or str, not {type(v).__name__}")


class Producer:
    """Produces records to one topic, partitioning them on the client with the topic's own
    WebAssembly module, so that a key lands in the same partition from every language.

    Order: records with the same key are stored in the order `send` was called, and every
    consumer group delivers them in that order, across epoch changes (a fenced epoch makes the
    producer re-send every unacknowledged record, in order, under the new one). A publish whose
    acknowledgement was lost is retried with the same Nats-Msg-Id, so a retry never stores a
    second copy.

    Use it from one asyncio event loop; records sent by different tasks are ordered by the order
    their `send` calls took effect. Create it with ``await client.producer(topic)``."""

    def __init__(self, client: "Client", topic: str, producer_id: str, max_in_flight: int, max_buffered: int):
        self._c = client
        self.topic = topic
        self.id = producer_id
        self._max_in_flight = max_in_flight
        self._max_buffered = max_buffered
        self._desc: Optional[wire.Topic] = None
        self._part: Optional["Partitioner"] = None
        self._sinks: dict[int, _Sink] = {}
        self._held: list[_Pending] = []
        self._unassigned: list[_Pending] = []
        self._switching = False
        self._seq = 0
        self._buffered = 0
        self._rr = 0
        self._fatal: Optional[PctlError] = None
        self._closed = False
        self._space = asyncio.Event()
        self._space.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._events: asyncio.Queue = asyncio.Queue()
        self._replies: dict[str, asyncio.Future] = {}
        self._token = 0
        self._inbox = ""
        self._sub: Any = None
        self._control_task: Optional[asyncio.Task] = None
        self._event_check: Optional[asyncio.Future] = None
        self._events_sub: Any = None
        self._stop_listening: Optional[Callable[[], None]] = None
        self.resent = 0  # records re-sent under a new epoch after a fence
        self._max_record = 0  # the partition streams' max_msg_size (spec/protocol.md §5.3); 0: unknown

    @classmethod
    async def create(cls, client: "Client", topic: str, *, producer_id: Optional[str] = None, max_in_flight: int = 1024,
                     max_buffered: int = 65536) -> "Producer":
        """Fetches the topic's descriptor and partitioner and returns a ready producer.

        `producer_id` identifies the producer in the records' Pctl-Producer header and their
        deduplication ids `<id>-<seq>` (default: random). Sequences start at 1 for every
        producer, so a second producer with the id of one that wrote less than 2 minutes ago
        (JetStream's deduplication window) has its records taken for duplicates of the first's:
        they are acknowledged with ``duplicate=True`` and not stored. Reuse an id only to have
        one producer's retries deduplicated. `max_in_flight` bounds unacknowledged publishes per partition;
        `max_buffered` the records sent and not yet acknowledged (`send` waits beyond it)."""
        wire.valid_name("topic name", topic)
        if producer_id is None:
            producer_id = "py-" + secrets.token_hex(8)
        wire.valid_name("producer id", producer_id)
        if max_in_flight < 1 or max_buffered < 1:
            raise BadRequest("max_in_flight and max_buffered must be at least 1")
        p = cls(client, topic, producer_id, max_in_flight, max_buffered)
        desc = await p._fetch()
        await p._install(desc)
        p._max_record = await _max_record(client, topic)
        nc = client.nc
        p._inbox = nc.new_inbox()
        p._sub = await nc.subscribe(p._inbox + ".*", cb=p._on_reply)
        p._events_sub = await nc.subscribe(f"pctl.events.topic.{topic}", cb=p._on_event)
        p._stop_listening = client._on_violation(p._on_violation)
        p._control_task = asyncio.ensure_future(p._control())
        return p

    # --- public API ------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the producer currently produces to."""
        return self._desc.current.epoch if self._desc else 0

    async def send(self, key: Optional[Data], value: Data = b"", *, headers: HeadersArg = None,
                   timestamp: Union[int, float, "datetime", None] = None) -> "asyncio.Future[RecordMetadata]":
        """Queues a record and returns a future of its :class:`RecordMetadata`.

        `key` is bytes or str (UTF-8); ``None`` makes a keyless record, which the producer spreads
        over the partitions round-robin with no order promised (the empty key ``b""`` is a key like
        any other). `headers` are application headers (spec/protocol.md §5.3): a mapping from name
        to a value or a list of values, or (name, value) pairs. `timestamp` is the record's time
        (``Pctl-Time``): unix milliseconds (int), unix seconds (float) or an aware datetime;
        default: now. Waits while `max_buffered` records are unacknowledged. Raises
        :class:`pctl.BadRequest` at once for a record that can never be sent (key over 64 KiB, a
        reserved or malformed header) and for a closed producer; or the producer's fatal error,
        e.g. :class:`pctl.PermissionDenied`. A record larger than the topic's record limit (the
        partition streams' max message size, headers included) is refused alone, before sending:
        its future fails with :class:`pctl.BadRequest` giving its size, its parts and the limit.
        The future fails with a :class:`pctl.PctlError` when the record cannot be stored
        (:class:`pctl.PluginFailed` if the module failed on its key, :class:`pctl.BadRequest` if
        the stream refused it)."""
        k = None if key is None else _data(key, "key")
        v = _data(value, "value")
        if k is not None and len(k) > 65536:
            raise BadRequest(f"key of {len(k)} bytes; keys are at most 65536 bytes (spec/abi-v1.md §1.1)")
        app = check_headers(headers)
        ms = check_time(timestamp)
        if ms is None:
            ms = time.time_ns() // 1_000_000
        while self._buffered >= self._max_buffered and self._fatal is None and not self._closed:
            self._space.clear()
            await self._space.wait()
        if self._closed:
            raise BadRequest("the producer is closed")
        if self._fatal is not None:
            raise self._fatal
        seq = self._seq + 1
        msg_id = f"{self.id}-{seq}"
        hs = [(wire.HEADER_KEY, wire.encode_key(k))] if k is not None else []
        hs += [(wire.HEADER_PRODUCER, self.id), (wire.HEADER_SEQ, str(seq)), (wire.HEADER_MSG_ID, msg_id), (HEADER_TIME, str(ms))]
        hs += app
        block = _nats.encode_header_block(hs)
        limit = self._max_record
        if limit and len(block) + len(v) > limit:
            app_size = _nats.header_block_size(app) - 12 if app else 0
            # Refused alone, before sending (spec/protocol.md §5.3): the future fails, the producer goes on.
            refused: asyncio.Future = asyncio.get_running_loop().create_future()
            refused.set_exception(BadRequest(f"record of {len(block) + len(v)} bytes (value {len(v)}, key {0 if k is None else len(k)}, "
                             f"application headers {app_size}, headers in all {len(block)}) is larger than topic {self.topic}'s "
                             f"record limit of {limit} bytes: send a smaller value or fewer headers, or run the broker with a "
                             f"larger --max-record-bytes (spec/protocol.md §5.3)"))
            return refused
        self._seq = seq
        fut = asyncio.get_running_loop().create_future()
        pd = _Pending(seq, k, v, fut, msg_id, block)
        self._buffered += 1
        self._idle.clear()
        if self._switching:
            self._held.append(pd)
        else:
            # Partitioned in batches (one crossing into the module for many keys) just after the
            # current run of sends, in send order.
            self._unassigned.append(pd)
            if len(self._unassigned) == 1:
                asyncio.get_running_loop().call_soon(self._assign_unassigned)
        return fut

    async def produce(self, key: Optional[Data], value: Data = b"", *, headers: HeadersArg = None,
                      timestamp: Union[int, float, "datetime", None] = None) -> RecordMetadata:
        """Sends one record (see :meth:`send`) and waits for its acknowledgement."""
        return await (await self.send(key, value, headers=headers, timestamp=timestamp))

    async def flush(self, timeout: Optional[float] = None) -> None:
        """Waits until every record sent so far is acknowledged or failed. Raises the producer's
        fatal error if it has one; :class:`pctl.Unavailable` after `timeout` seconds."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except asyncio.TimeoutError:
            raise Unavailable(f"flush: {self._buffered} records not acknowledged within {timeout:g}s") from None
        if self._fatal is not None:
            raise self._fatal

    async def close(self, timeout: Optional[float] = None) -> None:
        """Waits for every record's fate (up to `timeout` seconds; records still unacknowledged
        then fail with :class:`pctl.Unavailable`) and stops the producer. It does not raise the
        producer's fatal error: every record's future already carries its fate, and `flush`
        raises it."""
        try:
            await self.flush(timeout)
        except PctlError:
            pass
        self._closed = True
        self._space.set()
        if self._buffered:
            self._fail(Unavailable(f"producer {self.id} closed with {self._buffered} records unacknowledged"), fatal=False)
        for s in list(self._sinks.values()):
            s.close()
        if self._control_task:
            self._control_task.cancel()
        if self._stop_listening:
            self._stop_listening()
        for sub in (self._sub, self._events_sub):
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass
        if self._event_check is not None:
            self._event_check.cancel()

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- descriptor and partitioning -------------------------------------------------------------

    async def _fetch(self) -> wire.Topic:
        deadline = time.monotonic() + self._c.timeout
        while True:
            try:
                t = await self._c.topic(self.topic)
            except Unavailable as e:
                if "being created" in str(e) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    continue
                raise
            if (t.creating or not t.epochs) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                continue
            if t.deleting:
                raise Unavailable(f"topic {self.topic} is being deleted")
            return t

    async def _install(self, desc: wire.Topic) -> None:
        self._part = await self._c.partitioner(desc.current.partitioner)
        self._desc = desc
        self._sinks = {}

    def _assign_unassigned(self) -> None:
        pds, self._unassigned = self._unassigned, []
        if pds:
            self._assign_many(pds)

    def _assign_many(self, pds: list) -> None:
        """Partitions records (in send order) under the current epoch and queues each on the
        sink of its partition; a record whose key the module fails on fails alone."""
        assert self._desc is not None and self._part is not None
        cur = self._desc.current
        keyed = [pd for pd in pds if pd.key is not None]
        parts: dict = {}
        if keyed:
            try:
                for pd, q in zip(keyed, self._part.partition_many([pd.key for pd in keyed], cur.partitions)):
                    parts[pd] = q
            except PluginFailed:
                pass  # find the record(s) it failed on, one call each, below
        for pd in pds:
            try:
                self._assign(pd, parts.get(pd))
            except PctlError as e:
                self._finish(pd, error=e)

    def _assign(self, pd: _Pending, part: Optional[int] = None) -> None:
        """Queues a record on the sink of its partition under the current epoch."""
        assert self._desc is not None and self._part is not None
        cur = self._desc.current
        if pd.key is None:
            part = self._rr % cur.partitions
            self._rr += 1
        elif part is None:
            try:
                part = self._part.partition(pd.key, cur.partitions)
            except PluginFailed as e:
                raise PluginFailed(f"record {pd.seq} of producer {self.id}: {e}", plugin=e.plugin, digest=e.digest) from None
        pd.epoch, pd.partition, pd.floor = cur.epoch, part, None
        pd.subject = wire.data_subject(self.topic, cur.epoch, part)
        s = self._sinks.get(part)
        if s is None:
            s = self._sinks[part] = _Sink(self, cur.epoch, part)
        s.push(pd)

    def _finish(self, pd: _Pending, meta: Optional[RecordMetadata] = None, error: Optional[BaseException] = None) -> None:
        if not pd.future.done():
            if error is not None:
                pd.future.set_exception(error)
            else:
                pd.future.set_result(meta)
        self._buffered -= 1
        if self._buffered < self._max_buffered:
            self._space.set()
        if self._buffered == 0:
            self._idle.set()

    def _fail(self, err: PctlError, fatal: bool = True) -> None:
        """Fails every record not yet acknowledged; a fatal error also refuses later sends."""
        if fatal and self._fatal is None:
            self._fatal = err
        held, self._held = self._held + self._unassigned, []
        self._unassigned = []
        for pd in held:
            self._finish(pd, error=err)
        for s in list(self._sinks.values()):
            s.abort(err)
        self._space.set()

    def _check_same_topic(self, desc: wire.Topic) -> None:
        """A topic deleted and created again under the same name is another topic (a new id):
        its subjects would take this producer's records (spec/protocol.md §5.1, known limits)."""
        if self._desc is not None and desc.id and self._desc.id and desc.id != self._desc.id:
            raise NotFound(f"topic {self.topic} was deleted and created again (id {self._desc.id} is now {desc.id}); "
                           f"producer {self.id} stops: create a new producer to write to the new topic")

    async def _on_event(self, _msg: Any) -> None:
        """pctl.events.topic.<topic>: the descriptor changed. Checks that the topic is still the
        same one (epoch changes are found by the fence itself)."""
        if self._event_check is not None and not self._event_check.done():
            return
        self._event_check = asyncio.ensure_future(self._recheck())

    async def _recheck(self) -> None:
        try:
            self._check_same_topic(await self._c.topic(self.topic))
        except NotFound as e:
            self._fail(e if "created again" in str(e) else NotFound(f"topic {self.topic} was deleted: {e}"))
        except PctlError:
            pass  # unreachable for a moment: the next publish failure re-reads the descriptor

    def _on_violation(self, op: str, subject: str) -> None:
        prefix = f"{wire.DATA_PREFIX}.{self.topic}."
        if subject.lower().startswith(prefix.lower()):  # nats-py reports the subject in lower case
            self._fail(self._c.permission_error(prefix + subject[len(prefix):], op))

    # --- publishing ------------------------------------------------------------------------------

    async def _publish(self, pd: _Pending) -> asyncio.Future:
        self._token += 1
        token = str(self._token)
        fut = asyncio.get_running_loop().create_future()
        self._replies[token] = fut
        try:
            await _nats.publish_raw(self._c.nc, pd.subject, pd.value, f"{self._inbox}.{token}", pd.block)
        except BaseException:
            self._replies.pop(token, None)
            raise
        fut.token = token  # type: ignore[attr-defined]
        return fut

    def _forget(self, fut: asyncio.Future) -> None:
        self._replies.pop(getattr(fut, "token", ""), None)

    async def _on_reply(self, msg: Any) -> None:
        fut = self._replies.pop(msg.subject[len(self._inbox) + 1:], None)
        if fut is None or fut.done():
            return
        hdr = msg.headers or {}
        status = hdr.get("Status")
        if status == "503":
            fut.set_exception(_NoResponders())
            return
        try:
            resp = json.loads(msg.data)
        except ValueError:
            fut.set_exception(_JSError(0, 0, f"bad acknowledgement (status {status}): {bytes(msg.data[:80])!r}"))
            return
        if "error" in resp:
            e = resp["error"] or {}
            fut.set_exception(_JSError(int(e.get("code") or 0), int(e.get("err_code") or 0), str(e.get("description") or "")))
            return
        fut.set_result((int(resp.get("seq") or 0), bool(resp.get("duplicate"))))

    # --- control: transient failures and fences ------------------------------------------------

    async def _control(self) -> None:
        while True:
            ev: _Event = await self._events.get()
            if ev.final or ev.cause is None:
                continue
            try:
                fetched = await self._fetch()
                self._check_same_topic(fetched)
                desc: Optional[wire.Topic] = fetched
            except (NotFound, PermissionDenied) as e:
                self._fail(e)
                ev.sink.abort(e)
                continue
            except PctlError:
                desc = None  # broker unreachable: retry in place
            if desc is not None and desc.current.epoch > ev.sink.epoch:
                await self._repartition(ev, desc)
                continue
            # Same epoch: the stream is unavailable for a moment, or an epoch change is between
            # fencing and activation. Retry the same records, in order, on the same subject, after
            # a pause that doubles (50 ms to 1 s) while the sink fails without any acknowledgement.
            await asyncio.sleep(min(0.05 * (1 << min(ev.sink.failures - 1, 5)), 1.0))
            ev.sink.resume(ev.left)

    async def _repartition(self, first: _Event, desc: wire.Topic) -> None:
        """Moves every unacknowledged record to the new epoch, in the original order."""
        self._switching = True
        self._held.extend(self._unassigned)  # sent, not yet partitioned: they follow the rest
        self._unassigned = []
        old = dict(self._sinks)
        left = list(first.left)
        waiting = set(old.values())
        for s in waiting:
            s.request_stop()
        # Every old sink (the failed one too: records may have reached its queue after its
        # failure) stops once its publishes in flight are answered and hands back the rest.
        while waiting:
            ev: _Event = await self._events.get()
            if ev.sink in waiting:
                left.extend(ev.left)
                if ev.final:
                    waiting.discard(ev.sink)
        for s in old.values():
            s.close()
        left = await self._resolve_ambiguous(desc, left)
        try:
            await self._install(desc)
        except PctlError as e:
            self._switching = False
            self._fail(e)
            for pd in left:
                self._finish(pd, error=e)
            return
        self.resent += len(left)
        left.extend(self._held)
        self._held = []
        left.sort(key=lambda pd: pd.seq)
        self._switching = False
        self._assign_many(left)

    async def _resolve_ambiguous(self, desc: wire.Topic, left: list) -> list:
        """A record whose acknowledgement was lost may be stored in its fenced partition: look for
        its Nats-Msg-Id between the last acknowledged sequence and the partition's boundary
        (spec/protocol.md §5.1). Found: it is acknowledged there; not found: it is re-sent."""
        groups: dict = {}
        for pd in left:
            if pd.ambiguous:
                groups.setdefault(pd.partition, []).append(pd)
        found: dict = {}
        for part, pds in groups.items():
            # The floor is taken before each record's first publish, not now: with pipelining a
            # later record's acknowledgement can be above an ambiguous record.
            floor = min(pd.floor or 0 for pd in pds)
            found.update(await self._find_stored(desc, pds[0].epoch, part, floor, {pd.msg_id for pd in pds}))
        out = []
        for pd in left:
            if pd.ambiguous:
                pd.ambiguous = False
                seq = found.get(pd.msg_id)
                if seq:
                    self._finish(pd, RecordMetadata(pd.partition, pd.epoch, seq, pd.seq, duplicate=True))
                    continue
            out.append(pd)
        return out

    async def _find_stored(self, desc: wire.Topic, epoch: int, partition: int, floor: int, ids: set) -> dict:
        """Msg id -> stream sequence of those of `ids` stored in the partition above floor,
        up to the epoch's boundary: direct gets, newest first (an ambiguous record is among the
        last ones), 64 at a time, each sequence read once."""
        e = desc.epoch(epoch)
        if e is None or not e.boundaries or partition >= len(e.boundaries):
            return {}
        subject = f"$JS.API.DIRECT.GET.{wire.stream_name(self.topic, partition)}"
        nc, want, found = self._c.nc, set(ids), {}

        async def get(seq: int):
            try:
                return seq, await nc.request(subject, json.dumps({"seq": seq}).encode(), timeout=self._c.timeout)
            except (nats.errors.Error, asyncio.TimeoutError):
                return seq, None

        seq = e.boundaries[partition]
        while seq > floor and want:
            batch = range(seq, max(floor, seq - 64), -1)
            for n, m in await asyncio.gather(*(get(n) for n in batch)):
                mid = (m.headers or {}).get(wire.HEADER_MSG_ID) if m is not None else None
                if mid in want:
                    want.discard(mid)
                    found[mid] = n
            seq -= len(batch)
        return found


class _Sink:
    """Publishes one partition's records of one epoch, in order, up to max_in_flight at once."""

    def __init__(self, p: Producer, epoch: int, partition: int):
        self.p, self.epoch, self.partition = p, epoch, partition
        self.queue: deque = deque()
        self.stopping = self.closing = self.paused = False
        self.aborted: Optional[BaseException] = None
        self.wake = asyncio.Event()
        self.last_acked = 0
        self.failures = 0  # failure events since the last acknowledgement
        self.task = asyncio.ensure_future(self.run())

    def push(self, pd: _Pending) -> None:
        self.queue.append(pd)
        self.wake.set()

    def request_stop(self) -> None:
        self.stopping = True
        self.wake.set()

    def close(self) -> None:
        self.closing = True
        self.wake.set()

    def abort(self, err: BaseException) -> None:
        if self.aborted is None:
            self.aborted = err
        self.wake.set()

    def resume(self, left: list) -> None:
        """Re-queues records (in order, ahead of newer ones) after a transient failure."""
        self.queue.extendleft(reversed(left))
        self.paused = False
        self.wake.set()

    async def run(self) -> None:
        p = self.p
        loop = asyncio.get_running_loop()
        inflight: deque = deque()  # (pending, future, deadline)
        failed: list = []
        cause: Optional[BaseException] = None
        watched: Optional[asyncio.Future] = None
        timeout = p._c.ack_timeout
        while True:
            if self.aborted is not None:
                self._drain_aborted(inflight, failed)
                return
            if cause is None and not self.stopping and not self.paused:
                while self.queue and len(inflight) < p._max_in_flight:
                    pd = self.queue.popleft()
                    pd.tries += 1
                    if pd.floor is None:
                        pd.floor = self.last_acked
                    try:
                        fut = await p._publish(pd)
                    except Exception as e:  # noqa: BLE001 - connection closed, payload too large...
                        if _permanent(e):
                            p._finish(pd, error=BadRequest(f"record {pd.seq} cannot be published: {e}"))
                            continue
                        cause = e
                        failed.append(pd)
                        break
                    # A retry of an ambiguous publish waits longer each time (up to 64 times
                    # ack_timeout): an ack timeout below the broker's answer time must not
                    # make the producer retry forever.
                    inflight.append((pd, fut, loop.time() + timeout * (1 << min(pd.tries - 1, 6))))
            while inflight and inflight[0][1].done():
                pd, fut, _ = inflight.popleft()
                err = fut.exception()
                if err is None:
                    seq, dup = fut.result()
                    self.last_acked = seq
                    self.failures = 0
                    p._finish(pd, RecordMetadata(self.partition, self.epoch, seq, pd.seq, dup))
                elif _permanent(err):
                    p._finish(pd, error=BadRequest(f"record {pd.seq} refused by partition {self.partition}: {err}"))
                else:
                    failed.append(pd)
                    cause = cause or err
            if inflight:
                pd, fut, deadline = inflight[0]
                now = loop.time()
                if now >= deadline:
                    inflight.popleft()
                    p._forget(fut)
                    fut.cancel()
                    pd.ambiguous = True
                    failed.append(pd)
                    cause = cause or _AckTimeout()
                    continue
                self.wake.clear()
                if watched is not fut:
                    fut.add_done_callback(self._on_done)
                    watched = fut
                h = loop.call_later(deadline - now, self.wake.set)
                await self.wake.wait()
                h.cancel()
                continue
            if cause is not None or (self.stopping and not failed):
                # Settled: hand everything unacknowledged to the control task.
                left = failed + list(self.queue)
                self.queue.clear()
                if self.stopping:
                    p._events.put_nowait(_Event(self, left, None, final=True))
                    return
                self.paused = True
                self.failures += 1
                p._events.put_nowait(_Event(self, left, cause))
                failed, cause = [], None
                continue
            if self.closing:
                return
            # Nothing in flight: wait for records to send (unless paused: a paused sink waits for
            # the control task to resume or stop it), an abort, a stop or a close.
            self.wake.clear()
            if (self.queue and not self.paused) or self.aborted is not None or self.stopping or self.closing:
                continue
            await self.wake.wait()

    def _on_done(self, _fut: asyncio.Future) -> None:
        self.wake.set()

    def _drain_aborted(self, inflight: deque, failed: list) -> None:
        err = self.aborted
        for pd, fut, _ in inflight:
            self.p._forget(fut)
            self.p._finish(pd, error=err)
        for pd in failed:
            self.p._finish(pd, error=err)
        while self.queue:
            self.p._finish(self.queue.popleft(), error=err)
