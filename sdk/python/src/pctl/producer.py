"""The producer: client-side partitioning, published in JetStream fast batches (spec/protocol.md
§5.1, §5.1.1, §5.1.2, §5.1.4), as the Go producer does (client/producer.go, client/sink.go).

Data path: `send` numbers a record (Pctl-Seq), gives it its identity (headers, and a
Nats-Msg-Id with a random token), partitions it with the current epoch's module and queues it on
the sink of its partition. A sink sends its partition's records in send order as a series of fast
batches: one batch open at a time, many records in flight inside it, committed when its queue
runs empty or the batch is full. A record is acknowledged once a flow acknowledgement or the
batch's PubAck covers it (on a cluster: once its batch is confirmed). After any anomaly (a gap, a
refusal, no responders, a lost connection, a timeout, a fence) the sink stops sending, settles the
batch (learns which prefix of it is stored: its PubAck, verified against the stored message, or
an EOB that closes it, or a search of the stream backwards), and re-sends the rest in a new batch;
when the epoch was fenced, every sink hands its unacknowledged records back and they are
re-partitioned and re-sent in their original send order under the new epoch."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import nats.errors

from . import _fastbatch as fb
from . import _nats, _rules, _server, wire
from . import compact as compaction
from ._inprocess import InProcess, in_process_error
from ._server import require_server
from .errors import BadRequest, Conflict, NotFound, PctlError, PermissionDenied, PluginFailed, Unavailable, is_topic_creating
from .record import HEADER_TIME, HeadersArg, check_headers, check_time

if TYPE_CHECKING:
    from .client import Client
    from .partitioner import Partitioner

Data = Union[bytes, bytearray, memoryview, str]

MIN_SERVER = _server.MIN_SERVER
DEDUP_WINDOW = 120.0  # seconds: the partition streams' Duplicates window (spec/protocol.md §2)
LEADER_SETTLED = 5.0  # seconds: a stream leader elected longer ago than this is trusted (§5.1.2)
# How many EOBs of a batch being settled may go unanswered (each for the acknowledgement timeout)
# before the sink reads the partition back (spec/protocol.md §5.1.2, settle 1).
SILENT_EOBS = 3
# The least time an EOB's answer is awaited while settling, in seconds (spec/protocol.md §5.1.2).
EOB_WAIT = 1.0


@dataclass(frozen=True)
class RecordMetadata:
    """Where an acknowledged record is stored: it will be delivered to every consumer group."""
    partition: int
    epoch: int
    # The record's stream sequence in the partition's stream when the producer learned it, else 0
    # ("stored, sequence not reported"): a fast batch's PubAck names its last record's only, so
    # it is set for the last record of a batch (always for a record sent alone) and for a record
    # found by a verification after a failure (spec/protocol.md §5.1.2).
    seq: int
    producer_seq: int  # the record's Pctl-Seq: this producer's count, from 1, in send order
    duplicate: bool = False  # the server reported it already stored, and the stored message was checked to be it


class _Pending:
    __slots__ = ("seq", "key", "value", "future", "epoch", "partition", "hdrs", "block", "msg_id", "key_hdr", "sends",
                 "floors", "failed", "in_process")

    def __init__(self, seq: int, key: Optional[bytes], value: bytes, future: asyncio.Future, hdrs: list, msg_id: str,
                 key_hdr: Optional[str], block: bytes):
        self.seq, self.key, self.value, self.future = seq, key, value, future
        self.epoch = self.partition = 0
        self.hdrs = hdrs  # the record's headers, in order: its identity, the same on every send
        self.block = block  # hdrs as a NATS header block
        self.msg_id, self.key_hdr = msg_id, key_hdr
        self.sends = 0  # publishes so far, in any partition
        # stream -> the sink's floor at the record's first send there: a copy stored there is above it
        self.floors: dict = {}
        self.failed: Optional[PctlError] = None  # the server refused the record for good
        self.in_process = InProcess()  # its message id's 10158 answers (spec/protocol.md §5.1.5)


class _Event:
    """A sink's word to the control task. A final event says the sink stopped and hands back its
    records not acknowledged (in send order); a non-final one with `fenced` says the sink found
    its epoch fenced and waits, sending nothing, to be stopped."""
    __slots__ = ("sink", "left", "fenced", "final")

    def __init__(self, sink: "_Sink", left: list, fenced: Optional[wire.Topic], final: bool):
        self.sink, self.left, self.fenced, self.final = sink, left, fenced, final


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


def _require_fast_batches(client: "Client") -> None:
    """spec/protocol.md §5.1: the server must run nats-server 2.14 or later (fast batches)."""
    require_server(client, "pctl's producer", "fast batch publishing, spec/protocol.md §5.1")


def _parse_time(s: str) -> Optional[float]:
    """Unix seconds of an RFC 3339 time as nats-server writes it (nanoseconds, Z), or None."""
    if not s:
        return None
    try:
        main, _, frac = s.rstrip("Z").partition(".")
        tz = ""
        for sep in ("+", "-"):
            i = frac.find(sep) if frac else main.find(sep, 11)
            if i >= 0:
                if frac:
                    frac, tz = frac[:i], frac[i:]
                else:
                    main, tz = main[:i], main[i:]
                break
        t = datetime.fromisoformat(main + (tz or "+00:00"))
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return t.timestamp() + (float("0." + frac) if frac else 0.0)
    except ValueError:
        return None


class Producer:
    """Produces records to one topic, partitioning them on the client with the topic's own
    WebAssembly module, so that a key lands in the same partition from every language, and
    publishes them in JetStream fast batches (spec/protocol.md §5.1): one sink per partition
    sends its records in order, one batch open at a time, many records in flight inside it.

    Order: records with the same key are stored in the order `send` was called, and every
    consumer group delivers them in that order, across epoch changes, lost connections and
    stream-leader changes: the server stores a contiguous prefix of each batch, and after any
    failure the producer learns that prefix before it re-sends the rest, in order, in a new batch;
    when the epoch changed, every unacknowledged record is re-partitioned and re-sent in the
    original order under the new one. A re-send carries the record's original deduplication id
    (with a random token, so no other client can claim it first): a record is never stored twice
    within JetStream's deduplication window, and a duplicate acknowledgement counts only once the
    stored message was checked to be this record.

    Use it from one asyncio event loop; records sent by different tasks are ordered by the order
    their `send` calls took effect. Create it with ``await client.producer(topic)``."""

    # The per-key rule on clusters (spec/protocol.md §5.1.2). Only tests turn it off, to show
    # what it prevents.
    _key_rule = True

    def __init__(self, client: "Client", topic: str, producer_id: str, max_in_flight: int, max_buffered: int,
                 batch_size: int = 4096, content_tokens: bool = False, stall_timeout: float = 0.25,
                 logf: Optional[Callable[[str], None]] = None):
        self._c = client
        self.topic = topic
        self.id = producer_id
        self._max_in_flight = max_in_flight
        self._max_buffered = max_buffered
        self._batch_size = batch_size
        self._content_tokens = content_tokens
        self._stall = stall_timeout
        self._logf = logf or (lambda s: None)
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
        self._check_wanted = False
        self._batches: dict[str, _Sink] = {}  # open batch id -> its sink
        self._inbox = ""
        self._prefix = ""
        self._sub: Any = None
        self._control_task: Optional[asyncio.Future] = None
        self._events_sub: Any = None
        self._stop_listening: list = []
        self.resent = 0  # records re-sent under a new epoch after a fence
        self.settled = 0  # fast batches settled after an anomaly
        self.confirmed_by_reading = 0  # batches read back on a cluster after a leader change (spec/protocol.md §5.1.2)
        self.key_splits = 0  # batches committed early on a replicated stream: the next record's key was in them
        # Records a committed batch claimed but the server did not store (a nats-server fault after
        # a stream leader's term change, found by the check on clusters and re-sent): their keys
        # may be out of order (spec/protocol.md §5.1.2).
        self.holes = 0
        self._max_record = 0  # the partition streams' max_msg_size (spec/protocol.md §5.3); 0: unknown

    @classmethod
    async def create(cls, client: "Client", topic: str, *, producer_id: Optional[str] = None, max_in_flight: int = 1024,
                     max_buffered: int = 65536, batch_size: int = 4096, content_tokens: bool = False,
                     stall_timeout: float = 0.25, logf: Optional[Callable[[str], None]] = None) -> "Producer":
        """Fetches the topic's descriptor and partitioner and returns a ready producer.

        `producer_id` identifies the producer in the records' Pctl-Producer header and their
        deduplication ids ``<id>-<seq>-<token>`` (default: random); `<token>` is 32 random hex
        digits per record (spec/protocol.md §5.1.4), or with `content_tokens` a digest of the
        record's key and value, so that a re-run of the same input under the same id is
        deduplicated record by record (as ``pctl produce --producer-id``), at the price that a
        client who knows a record in advance can predict its id. `max_in_flight` (1024) bounds,
        per partition, the records sent beyond the last one the server confirmed; `max_buffered`
        (65536) the records sent and not yet acknowledged (`send` waits beyond it); `batch_size`
        (4096) the records of one fast batch; `stall_timeout` (0.25 s): records without a reply
        for this long make the producer re-read the descriptor; `logf` receives the producer's
        decisions after failures (settle, re-send, repartition). Raises :class:`pctl.Unavailable`
        when the server is older than nats-server 2.14."""
        wire.valid_name("topic name", topic)
        if producer_id is None:
            producer_id = "py-" + secrets.token_hex(8)
        wire.valid_name("producer id", producer_id)
        if max_in_flight < 1 or max_buffered < 1 or batch_size < 1:
            raise BadRequest("max_in_flight, max_buffered and batch_size must be at least 1")
        _require_fast_batches(client)
        p = cls(client, topic, producer_id, max_in_flight, max_buffered, batch_size, content_tokens, stall_timeout, logf)
        desc = await p._fetch()
        await p._install(desc)
        p._max_record = await _max_record(client, topic)
        nc = client.nc
        p._inbox = nc.new_inbox()
        p._prefix = p._inbox + "."
        p._sub = await _nats.raw_subscribe(nc, p._inbox + ".>", p._on_reply)
        p._events_sub = await nc.subscribe(f"pctl.events.topic.{topic}", cb=p._on_event)
        p._stop_listening = [client._on_violation(p._on_violation), client._on_reconnect(p._on_conn_change)]
        p._control_task = asyncio.ensure_future(p._control())
        return p

    # --- public API ------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the producer currently produces to."""
        return self._desc.current.epoch if self._desc else 0

    async def send(self, key: Optional[Data], value: Data = b"", *, headers: HeadersArg = None,
                   timestamp: Union[int, float, "datetime", None] = None,
                   tombstone: bool = False) -> "asyncio.Future[RecordMetadata]":
        """Queues a record and returns a future of its :class:`RecordMetadata`.

        `key` is bytes or str (UTF-8); ``None`` makes a keyless record, which the producer spreads
        over the partitions round-robin with no order promised (the empty key ``b""`` is a key like
        any other). `headers` are application headers (spec/protocol.md §5.3): a mapping from name
        to a value or a list of values, or (name, value) pairs. `timestamp` is the record's time
        (``Pctl-Time``): unix milliseconds (int), unix seconds (float) or an aware datetime;
        default: now. `tombstone` sends a tombstone: a keyed record without a value that deletes its
        key (on a compacted topic the key's value is gone at once, and the tombstone itself after
        the topic's delete retention: spec/protocol.md §10.2); on a compacted topic every record
        needs a key. Waits while `max_buffered` records are unacknowledged. Raises
        :class:`pctl.BadRequest` at once for a record that can never be sent (key over 64 KiB, a
        reserved or malformed header) and for a closed producer; or the producer's fatal error,
        e.g. :class:`pctl.PermissionDenied`. A record larger than the topic's record limit (the
        partition streams' max message size, headers included) is refused alone, before sending:
        its future fails with :class:`pctl.BadRequest` giving its size, its parts and the limit.
        The future fails with a :class:`pctl.PctlError` when the record cannot be stored
        (:class:`pctl.PluginFailed` if the module failed on its key, :class:`pctl.BadRequest` if
        the stream refused it, :class:`pctl.Conflict` if it was acknowledged as a duplicate of a
        different record: another client used its deduplication id, :class:`pctl.MsgIdInProcess`,
        an :class:`pctl.Unavailable`, if JetStream refused its id 4 times as "in process"
        (spec/protocol.md §5.1.5): its fate is unknown, read the partition before producing it
        again)."""
        k = None if key is None else _data(key, "key")
        v = _data(value, "value")
        if k is not None and len(k) > 65536:
            raise BadRequest(f"key of {len(k)} bytes; keys are at most 65536 bytes (spec/abi-v1.md §1.1)")
        compact = self._desc.raw.get("compact") if self._desc else None
        if compact and k is None:
            raise BadRequest(f"topic {self.topic} is compacted: every record needs a key (a keyless record cannot be compacted)")
        if k is None and self._desc and self._desc.raw.get("backfill"):
            raise BadRequest(f"topic {self.topic} backfills at epoch changes: a keyless record cannot be backfilled: give it a key, or create the topic without --backfill")
        if tombstone and k is None:
            raise BadRequest("a tombstone deletes a key: it needs one")
        if tombstone and v:
            raise BadRequest(f"a tombstone has no value ({len(v)} bytes given)")
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
        token = fb.record_token(k, v) if self._content_tokens else fb.new_token()
        msg_id = f"{self.id}-{seq}-{token}"
        key_hdr = wire.encode_key(k) if k is not None else None
        hs = [(wire.HEADER_KEY, key_hdr)] if key_hdr is not None else []
        hs += [(wire.HEADER_PRODUCER, self.id), (wire.HEADER_SEQ, str(seq)), (wire.HEADER_MSG_ID, msg_id), (HEADER_TIME, str(ms))]
        if tombstone:
            # A tombstone (spec/protocol.md §10.2); on a compacted topic it expires after the
            # topic's delete retention.
            hs.append((compaction.HEADER_TOMBSTONE, "true"))
            if compact:
                hs.append((compaction.HEADER_TTL, compaction.tombstone_ttl(compact)))
        hs += app
        block = _nats.encode_header_block(hs)
        limit = self._max_record
        size = len(block) + len(v)
        if limit and size > limit:
            hsize = len(block)
            app_size = _nats.header_block_size(app) - 12 if app else 0
            # Refused alone, before sending (spec/protocol.md §5.3): the future fails, the producer goes on.
            refused: asyncio.Future = asyncio.get_running_loop().create_future()
            refused.set_exception(BadRequest(f"record of {size} bytes (value {len(v)}, key {0 if k is None else len(k)}, "
                             f"application headers {app_size}, headers in all {hsize}) is larger than topic {self.topic}'s "
                             f"record limit of {limit} bytes: send a smaller value or fewer headers, or run the broker with a "
                             f"larger --max-record-bytes (spec/protocol.md §5.3)"))
            return refused
        self._seq = seq
        fut = asyncio.get_running_loop().create_future()
        pd = _Pending(seq, k, v, fut, hs, msg_id, key_hdr, block)
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
                      timestamp: Union[int, float, "datetime", None] = None, tombstone: bool = False) -> RecordMetadata:
        """Sends one record (see :meth:`send`) and waits for its acknowledgement."""
        return await (await self.send(key, value, headers=headers, timestamp=timestamp, tombstone=tombstone))

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
        if self._closed:
            return
        self._closed = True
        self._space.set()
        err = Unavailable(f"producer {self.id} closed with records unacknowledged")
        held, self._held = self._held + self._unassigned, []
        self._unassigned = []
        for pd in held:
            self._finish(pd, error=err)
        sinks = list(self._sinks.values())
        for s in sinks:
            s.abort(err)
        for s in sinks:
            try:
                await asyncio.wait_for(asyncio.shield(s.task), 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                s.task.cancel()
        if self._control_task:
            self._control_task.cancel()
        for stop in self._stop_listening:
            stop()
        for sub in (self._sub, self._events_sub):
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- descriptor and partitioning -------------------------------------------------------------

    async def _fetch(self, timeout: Optional[float] = None) -> wire.Topic:
        """The descriptor; NotFound when the topic was deleted and created again (a new id)."""
        deadline = time.monotonic() + self._c.timeout
        while True:
            try:
                t = await self._c.topic(self.topic, timeout=timeout)
            except Unavailable as e:
                if is_topic_creating(e) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    continue
                raise
            if (t.creating or not t.epochs) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                continue
            if t.deleting:
                raise Unavailable(f"topic {self.topic} is being deleted")
            if self._desc is not None and t.id and self._desc.id and t.id != self._desc.id:
                raise NotFound(f"topic {self.topic} was deleted and created again while producing (id {self._desc.id} is now "
                               f"{t.id}); producer {self.id} stops and sends nothing to the new topic: create a new producer to write to it")
            return t

    async def _fetch_quick(self) -> wire.Topic:
        """The descriptor within the acknowledgement timeout (a request lost with a connection
        would otherwise wait out the client's whole request timeout)."""
        return await self._fetch(timeout=max(self._c.ack_timeout, 0.5))

    async def _install(self, desc: wire.Topic) -> None:
        self._part = await self._c.partitioner(desc.current.partitioner)
        self._desc = desc
        self._sinks = {}

    def _assign_unassigned(self) -> None:
        if self._switching:
            return  # _repartition takes them
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
        pd.epoch, pd.partition = cur.epoch, part
        self._refresh_ttl(pd)
        s = self._sinks.get(part)
        if s is None:
            s = self._sinks[part] = _Sink(self, cur.epoch, part)
        s.push(pd)

    def _refresh_ttl(self, pd: _Pending) -> None:
        """Gives a tombstone of a compacted topic the Nats-TTL of the descriptor it is (re-)sent
        under (spec/protocol.md §10.2): one made under an earlier descriptor (handed back by a
        fenced partition, or held during the switch) gets the hold of the new epoch's backfill, not
        its first delete retention, which could expire before the backfill reaches its key. Only
        that header changes (same_record does not compare it)."""
        compact = self._desc.raw.get("compact") if self._desc else None
        if not compact or (compaction.HEADER_TOMBSTONE, "true") not in pd.hdrs:
            return
        ttl = compaction.tombstone_ttl(compact)
        changed = False
        hdrs = []
        for k, v in pd.hdrs:
            if k == compaction.HEADER_TTL and v != ttl:
                v, changed = ttl, True
            hdrs.append((k, v))
        if changed:
            pd.hdrs = hdrs
            pd.block = _nats.encode_header_block(hdrs)

    def _renew(self, pd: _Pending) -> None:
        """Gives a record that is provably not stored a new deduplication id (a fresh token; the
        producer id and sequence stay): the server may still count its old id as being stored. The
        new id's 10158 answers are counted afresh (§5.1.5 counts per message id): a hole is re-sent
        under it, stuck old id or not."""
        pd.in_process.renewed()
        base = pd.msg_id.rsplit("-", 1)[0]
        pd.msg_id = f"{base}-{fb.new_token()}"
        pd.hdrs = [(k, pd.msg_id if k == wire.HEADER_MSG_ID else v) for k, v in pd.hdrs]
        pd.block = _nats.encode_header_block(pd.hdrs)
        pd.floors = {}

    def _finish(self, pd: _Pending, meta: Optional[RecordMetadata] = None, error: Optional[BaseException] = None) -> None:
        if pd.future.done():
            return
        if error is not None:
            pd.future.set_exception(error)
        else:
            pd.future.set_result(meta)
        self._buffered -= 1
        if self._buffered < self._max_buffered:
            self._space.set()
        if self._buffered == 0:
            self._idle.set()

    def _fail(self, err: PctlError) -> None:
        """Makes the producer unusable and fails every record not yet acknowledged."""
        if self._fatal is None:
            self._fatal = err
            self._logf(f"producer {self.id}: {err}")
        held, self._held = self._held + self._unassigned, []
        self._unassigned = []
        for pd in held:
            self._finish(pd, error=err)
        for s in list(self._sinks.values()):
            s.abort(err)
        self._space.set()

    def _request_check(self) -> None:
        """Asks the control task to re-read the descriptor (coalesced)."""
        if not self._check_wanted:
            self._check_wanted = True
            self._events.put_nowait(None)

    async def _on_event(self, _msg: Any) -> None:
        """pctl.events.topic.<topic>: the descriptor changed."""
        self._request_check()

    def _on_violation(self, op: str, subject: str) -> None:
        prefix = f"{wire.DATA_PREFIX}.{self.topic}."
        if subject.lower().startswith(prefix.lower()):  # nats-py reports the subject in lower case
            self._fail(self._c.permission_error(prefix + subject[len(prefix):], op))

    def _on_conn_change(self) -> None:
        """The connection was lost or came back: replies in flight may be lost with it."""
        for s in list(self._sinks.values()):
            s.conn_changed()

    def _on_reply(self, subject: bytes, reply: bytes, data: bytes, hdr: Optional[bytes]) -> None:
        """Routes a fast-batch reply to the sink whose batch it names (on the connection's reading
        task). Replies to batches no longer open are dropped: their sink settled them already."""
        parsed = fb.parse_subject(self._prefix, subject.decode("ascii", "replace"))
        if parsed is None:
            return
        s = self._batches.get(parsed[0])
        if s is None:
            return
        s.replies.append(fb.parse_reply(parsed[0], parsed[1], parsed[2], data, hdr))
        s.wake.set()

    # --- control: fences -------------------------------------------------------------------------

    async def _control(self) -> None:
        """Re-reads the descriptor when asked (a topic event, a stall, no responders) and
        repartitions when the epoch moved on (or a sink found it fenced)."""
        while True:
            ev: Optional[_Event] = await self._events.get()
            if ev is not None:
                if not ev.final and ev.fenced is not None and ev.fenced.current.epoch > self.epoch:
                    await self._repartition(ev.fenced)
                continue
            self._check_wanted = False
            try:
                desc = await self._fetch_quick()
            except NotFound as e:
                self._fail(e if "created again" in str(e) else NotFound(f"topic {self.topic} was deleted: {e}"))
                continue
            except PermissionDenied as e:
                self._fail(e)
                continue
            except PctlError:
                continue  # broker unreachable: the sinks' own timeouts settle their batches
            if desc.current.epoch > self.epoch:
                self._logf(f"producer {self.id}: epoch {desc.current.epoch} of topic {self.topic} is current: settling "
                           f"partitions of epoch {self.epoch}")
                await self._repartition(desc)

    async def _repartition(self, desc: wire.Topic) -> None:
        """Moves every unacknowledged record to the new epoch, in the original order. Every old
        sink settles its open batch first (so nothing it sent can still be stored), then hands
        back its records."""
        self._switching = True
        old = dict(self._sinks)
        left: list = []
        waiting = set(old.values())
        for s in waiting:
            s.fence(desc)
        recheck = False
        while waiting:
            ev: Optional[_Event] = await self._events.get()
            if ev is None:
                self._check_wanted, recheck = False, True
                continue
            if ev.final and ev.sink in waiting:
                left.extend(ev.left)
                waiting.discard(ev.sink)
                if ev.fenced is not None and ev.fenced.current.epoch > desc.current.epoch:
                    desc = ev.fenced
        left.extend(self._unassigned)  # sent, not yet partitioned: they follow the rest
        self._unassigned = []
        try:
            await self._install(desc)
        except PctlError as e:
            self._switching = False
            self._fail(e)
            for pd in left:
                self._finish(pd, error=e)
            return
        left.extend(self._held)
        self._held = []
        left = [pd for pd in left if not pd.future.done()]
        left = [left[i] for i in _rules.resend_order([pd.seq for pd in left])]  # §5.1.2 step 4
        self._switching = False
        self.resent += len(left)
        self._assign_many(left)
        if recheck:
            self._request_check()


class _Batch:
    """The open fast batch: recs[i] was sent with batch seq i+1."""
    __slots__ = ("id", "recs", "keys", "acked", "flowed", "commit", "anomaly", "ended", "unknown", "never", "no_resp",
                 "pub_ack", "progress", "checked", "transient")

    def __init__(self, now: float):
        self.id = fb.random_hex(16)
        self.recs: list = []
        self.keys: set = set()  # Pctl-Key headers of its records (the per-key rule on clusters)
        self.acked = 0  # records 1..acked are persisted and finished
        self.flowed = 0  # records 1..flowed are persisted says a flow ack (the window's base)
        self.commit = 0  # batch seq of the commit message once sent (n for op 2, n+1 for an EOB)
        self.anomaly = ""  # why the batch must be settled; "" while clean
        self.ended = False  # the server ended the batch (gap or error): a PubAck is on its way
        self.unknown = False  # the server no longer knows the batch (refusal 10208)
        self.never = False  # the first message was refused: nothing of the batch is stored
        self.no_resp = False  # no responders: no stream on the subject (fenced?)
        self.pub_ack: Optional[fb.Reply] = None
        self.progress = self.checked = now  # last reply; last stall check
        self.transient = False  # the anomaly calls for a pause before re-sending


class _Fatal(Exception):
    """The sink must stop: the producer failed (or is closed)."""


class _Sink:
    """Sends one partition's records of one epoch as a series of fast batches (spec/protocol.md
    §5.1.2): one batch open at a time, many records in flight inside it."""

    def __init__(self, p: Producer, epoch: int, partition: int):
        self.p, self.epoch, self.partition = p, epoch, partition
        # A compacted or backfilled topic's records go to their keys' subjects, its EOBs to ".end"
        # (spec/protocol.md §10.1); only a compacted one removes a record superseded in its batch.
        self.compact = bool(p._desc and p._desc.raw.get("compact"))
        self.keys = compaction.key_subjects(p._desc.raw if p._desc else None)
        self.subject = compaction.batch_end_subject(p.topic, epoch, partition, self.keys)
        self.stream = wire.stream_name(p.topic, partition)
        self.queue: deque = deque()
        self.replies: deque = deque()
        self.wake = asyncio.Event()
        self.fence_desc: Optional[wire.Topic] = None
        self.aborted: Optional[PctlError] = None
        self.conn_lost = False
        self.fenced_self: Optional[wire.Topic] = None
        self.floor = 0
        self.floor_known = False
        # On a cluster nats-server 2.15.2 counts, in flow acks and PubAcks, batch messages whose
        # raft proposals a leader's term change dropped: records finish only once their batch is
        # confirmed (spec/protocol.md §5.1.2).
        self.verify = False
        self.leader = ""
        self.leader_since = ""
        self.replicas = 0
        self.b: Optional[_Batch] = None
        self.backoff = 0.0
        self.task = asyncio.ensure_future(self.run())

    # --- control (any task) ---

    def push(self, pd: _Pending) -> None:
        self.queue.append(pd)
        self.wake.set()

    def fence(self, desc: wire.Topic) -> None:
        self.fence_desc = desc
        self.wake.set()

    def abort(self, err: PctlError) -> None:
        if self.aborted is None:
            self.aborted = err
        self.wake.set()

    def conn_changed(self) -> None:
        self.conn_lost = True
        self.wake.set()

    def logf(self, msg: str) -> None:
        self.p._logf(f"producer {self.p.id}: partition {self.partition} of epoch {self.epoch}: {msg}")

    # --- the run task ---

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            self._fail_all(self.aborted or Unavailable(f"producer {self.p.id} stopped"))
            raise
        except BaseException as e:  # noqa: BLE001 - a bug must not lose records silently
            err = e if isinstance(e, PctlError) else Unavailable(f"partition {self.partition}: {type(e).__name__}: {e}")
            self.p._fail(err)
            self._fail_all(err)
            self._exit(_Event(self, [], None, True))

    async def _run(self) -> None:
        p = self.p
        while True:
            if self.aborted is not None:
                self._fail_all(self.aborted)
                self._exit(_Event(self, [], None, True))
                return
            fence_desc, conn_lost = self.fence_desc, self.conn_lost
            self.conn_lost = False
            if self.fenced_self is not None and fence_desc is None:
                await self._sleep(None)  # fenced: wait for the control task to stop the sink
                continue
            b = self.b
            if b is not None:
                if conn_lost and not b.anomaly and (len(b.recs) > b.acked or b.commit):
                    b.anomaly = "the connection was lost with records in flight"
                if fence_desc is not None and not b.anomaly:
                    b.anomaly = f"epoch {fence_desc.current.epoch} is current"
                if b.anomaly:
                    try:
                        fenced = await self._settle(fence_desc)
                    except _Fatal:
                        continue  # aborted now: the top of the loop fails the records
                    except PctlError as e:
                        if self.aborted is None:
                            p._fail(e)
                        continue
                    if fenced is not None and fence_desc is None:
                        self.fenced_self = fenced
                        p._events.put_nowait(_Event(self, [], fenced, False))
                    continue
            elif fence_desc is not None:
                self._exit(_Event(self, self._take_queue(), fence_desc, True))
                return
            if self.b is None and not self.floor_known and self.queue:
                try:
                    await self._read_floor()
                except _Fatal:
                    continue
                except PctlError as e:
                    if self.aborted is None:
                        p._fail(e)
                    continue
            await self._fill()
            await self._wait()

    def _exit(self, ev: _Event) -> None:
        if self.b is not None:
            self.p._batches.pop(self.b.id, None)
        if self.p._closed:
            for pd in ev.left:
                self.p._finish(pd, error=Unavailable(f"producer {self.p.id} closed before the record was acknowledged"))
            return
        self.p._events.put_nowait(ev)

    def _take_queue(self) -> list:
        """Every record not acknowledged, the open batch's first, in order."""
        left = []
        if self.b is not None:
            left = self.b.recs[self.b.acked:]
            self.p._batches.pop(self.b.id, None)
            self.b = None
        left.extend(self.queue)
        self.queue.clear()
        return left

    def _fail_all(self, err: BaseException) -> None:
        for pd in self._take_queue():
            self.p._finish(pd, error=err)

    def _check_abort(self) -> None:
        if self.aborted is not None:
            raise _Fatal()

    async def _sleep(self, timeout: Optional[float]) -> None:
        """Waits for a wake-up (a reply, a record, a control flag) or `timeout` seconds."""
        if not self.wake.is_set():
            if timeout is None:
                await self.wake.wait()
            else:
                h = asyncio.get_running_loop().call_later(max(timeout, 0.001), self.wake.set)
                try:
                    await self.wake.wait()
                finally:
                    h.cancel()
        self.wake.clear()

    async def _pause(self, seconds: float) -> None:
        """Sleeps, but wakes up early for an abort."""
        deadline = time.monotonic() + seconds
        while self.aborted is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await self._sleep(left)
        raise _Fatal()

    @staticmethod
    def _backoff(attempt: int) -> float:
        """50 ms doubling up to 1 s."""
        return min(0.05 * (1 << min(attempt, 5)), 1.0)

    async def _stream_info(self) -> dict:
        """The stream's info (answered by its leader); retries transient failures."""
        for attempt in range(1 << 30):
            self._check_abort()
            try:
                return await _nats.js_request(self.p._c, f"$JS.API.STREAM.INFO.{self.stream}", {},
                                              timeout=max(self.p._c.ack_timeout, 0.5))
            except _nats.JSError as e:
                if e.err_code == fb.ERR_STREAM_NOT_FOUND:
                    raise NotFound(f"partition stream {self.stream} of topic {self.p.topic} does not exist") from None
                why: Any = e
            except PermissionDenied:
                raise
            except PctlError as e:
                why = e
            if attempt % 10 == 9:
                self.logf(f"reading stream {self.stream}: {why}; retrying")
            await self._pause(self._backoff(attempt))
        raise AssertionError("unreachable")

    async def _read_floor(self) -> None:
        """The stream's last sequence before the sink's first batch (its floor), and the check
        that the stream takes fast batches."""
        try:
            info = await self._stream_info()
        except NotFound:
            await self.p._fetch()  # a re-created topic says so
            raise
        cfg = info.get("config") or {}
        level = (cfg.get("metadata") or {}).get("_nats.level")
        if not cfg.get("allow_batched") or (level is not None and str(level).isdigit() and int(level) < 4):
            raise Unavailable(f"partition stream {self.stream} does not allow fast batch publishing (allow_batched "
                              f"{bool(cfg.get('allow_batched'))}, JetStream API level {level or 'unknown'}; needs 4), which pctl's "
                              f"producer needs (spec/protocol.md §5.1): run nats-server 2.14+ and restart 'pctl serve' with "
                              f"this version: it updates the streams of existing topics")
        self.floor, self.floor_known = int((info.get("state") or {}).get("last_seq") or 0), True
        cl = info.get("cluster") or {}
        self.verify = bool(cl.get("name"))
        self._note_leader(info)

    def _note_leader(self, info: dict) -> bool:
        """Records the stream's leader, its election time and its replicas; reports whether any
        changed since the last note, or the election is recent (spec/protocol.md §5.1.2)."""
        cl = info.get("cluster") or {}
        if not cl:
            return True
        leader, since = str(cl.get("leader") or ""), str(cl.get("leader_since") or "")
        replicas = int((info.get("config") or {}).get("num_replicas") or 0)
        changed = leader != self.leader or since != self.leader_since or replicas != self.replicas
        self.leader, self.leader_since, self.replicas = leader, since, replicas
        if not leader:
            return True
        t = _parse_time(since)
        return changed or t is None or time.time() - t <= LEADER_SETTLED

    async def _fill(self) -> None:
        """Opens a batch if there is none and records wait, sends records while the window
        allows, and commits when the queue ran empty or the batch is full (or, on a cluster with
        replicas, when the next record's key is in the batch already)."""
        p = self.p
        nc = p._c.nc
        if self.b is None:
            if not self.queue or not nc.is_connected:
                return
            self.b = _Batch(time.monotonic())
            p._batches[self.b.id] = self
        b = self.b
        if b.anomaly or b.commit:
            return
        window, size = p._max_in_flight, p._batch_size
        flow = max(1, window // 4)
        # The per-key rule (spec/protocol.md §5.1.2): on a cluster (every stream, R1 included: a
        # live replica change gives it a raft group) a batch never holds two records of one key.
        one_key = self.verify and p._key_rule
        msgs = []
        split = False
        while self.queue and len(b.recs) - max(b.acked, b.flowed) < window and len(b.recs) < size:
            pd = self.queue[0]
            if pd.failed is not None or pd.future.done():
                self.queue.popleft()
                if pd.failed is not None:
                    p._finish(pd, error=pd.failed)
                continue
            if not _rules.admits(one_key, pd.key_hdr is None, pd.key_hdr in b.keys):
                split = True  # commit; the next batch starts once this one is confirmed
                p.key_splits += 1
                break
            self.queue.popleft()
            seq = len(b.recs) + 1
            op = fb.OP_APPEND
            if seq == 1:
                # A batch of one record (nothing else can join it now) is one message that is
                # stored and commits it.
                nxt = self.queue[0] if self.queue else None
                alone = nxt is None or size == 1 or (one_key and nxt.key_hdr is not None and nxt.key_hdr == pd.key_hdr)
                op = fb.OP_COMMIT if alone else fb.OP_START
            subject = compaction.record_subject(p.topic, self.epoch, self.partition, True, pd.key) if self.keys else self.subject
            msgs.append((subject, fb.reply_subject(p._inbox, b.id, flow, seq, op), pd.block, pd.value))
            pd.sends += 1
            if self.stream not in pd.floors:
                pd.floors[self.stream] = self.floor
            b.recs.append(pd)
            if one_key and pd.key_hdr is not None:
                b.keys.add(pd.key_hdr)
            if op == fb.OP_COMMIT:
                b.commit = seq
                break
        if not b.commit and b.recs and (len(b.recs) >= size or not self.queue or split):
            seq = len(b.recs) + 1
            msgs.append((self.subject, fb.reply_subject(p._inbox, b.id, flow, seq, fb.OP_EOB), b"", b""))
            b.commit = seq
        if not msgs:
            return
        try:
            await _nats.publish_raw_many(nc, msgs)
        except (nats.errors.Error, OSError) as e:
            # Not sent (connection closed or its buffer full): settle; what the server got is found out there.
            b.anomaly = f"publish failed: {type(e).__name__} {e}".strip()
            b.transient = True

    async def _wait(self) -> None:
        """Waits until something happens, handles the replies, checks the timers."""
        b = self.b
        if b is None or b.anomaly:
            if b is None:
                await self._sleep(None)
            return
        ack_timeout, stall = self.p._c.ack_timeout, self.p._stall
        if not self.replies:
            now = time.monotonic()
            nxt = min(b.checked + stall, b.progress + ack_timeout)
            await self._sleep(nxt - now)
        while self.replies and self.b is b and not b.anomaly:
            await self._handle(self.replies.popleft())
        if self.b is not b or b.anomaly:
            return
        now = time.monotonic()
        if now - b.progress >= ack_timeout:
            b.anomaly = f"no reply within {ack_timeout:g}s"
        elif now - b.checked >= stall:
            b.checked = now
            self.p._request_check()  # a fenced subject on a cluster may answer nothing

    async def _handle(self, r: fb.Reply) -> None:
        """Applies one reply to the open batch."""
        b = self.b
        if b is None or r.batch != b.id:
            return
        b.progress = b.checked = time.monotonic()
        k = r.kind
        if k == fb.FLOW_ACK:
            if r.ack_seq > len(b.recs):
                b.anomaly = f"flow acknowledgement of batch seq {r.ack_seq}, only {len(b.recs)} sent"
                return
            b.flowed = max(b.flowed, r.ack_seq)
            if not self.verify:
                self._ack_up_to(r.ack_seq)
        elif k == fb.GAP:
            b.ended = True
            b.anomaly = b.anomaly or f"gap: the server expected batch seq {r.gap_expected}, got {r.gap_got}"
        elif k == fb.FLOW_ERR:
            b.ended = True
            self._refused(r)
            b.anomaly = b.anomaly or f"batch seq {r.gap_got} refused: {r.err_text} ({r.err_code})"
        elif k == fb.REFUSAL:
            self._refused(r)
            b.anomaly = b.anomaly or f"batch seq {r.seq} refused: {r.err_text} ({r.err_code})"
        elif k == fb.NO_RESPONDERS:
            b.no_resp = True
            b.anomaly = b.anomaly or f"no stream answers {self.subject}"
            self.p._request_check()
        elif k == fb.PUBACK:
            b.pub_ack = r
            if not b.anomaly and b.commit and r.ack_batch == b.id and not r.duplicate and r.count == len(b.recs):
                if self.verify:
                    try:
                        found, trusted = await self._confirm(len(b.recs), r.stream_seq)
                    except _Fatal:
                        return
                    except PctlError as e:
                        b.anomaly = f"cannot confirm the batch on the cluster: {e}"
                        return  # settle takes it up (the PubAck is kept)
                    if not trusted:
                        self._end_confirmed(found, r.stream_seq)
                        return
                self._committed(r)
                return
            b.anomaly = b.anomaly or (f"PubAck of {r.count} records (batch {r.ack_batch!r}, duplicate {r.duplicate}), "
                                      f"{len(b.recs)} sent, commit sent: {bool(b.commit)}")
        else:
            b.anomaly = b.anomaly or f"unexpected reply: {r.err_text}"

    def _refused(self, r: fb.Reply) -> None:
        """Records what a refusal says about one message of the batch."""
        b = self.b
        assert b is not None
        seq = r.gap_got if r.kind == fb.FLOW_ERR else r.seq
        code = r.err_code
        if 1 <= seq <= len(b.recs):
            pd = b.recs[seq - 1]
            was = pd.in_process.stuck
            if pd.in_process.note(code) and not was:
                # Stuck (spec/protocol.md §5.1.5): a fast batch has no expected-sequence guard to
                # renew the id under, so settling fails the record unless it finds it stored.
                self.logf(f"record {pd.seq} (id {pd.msg_id}): JetStream answered 10158 {pd.in_process.count} times; "
                          f"failing it unless it is found stored")
        if code == fb.ERR_TOO_LARGE:
            if 1 <= seq <= len(b.recs):
                pd = b.recs[seq - 1]
                pd.failed = BadRequest(f"record {pd.seq} refused by partition {self.partition}: {r.err_text} (JetStream error "
                                       f"{code}); a record must fit the stream's maximum message size")
        elif code == fb.ERR_UNKNOWN_BATCH:
            b.unknown = True
        elif code in (fb.ERR_BATCH_DISABLED, fb.ERR_BAD_PATTERN, fb.ERR_BAD_BATCH_ID):
            self.p._fail(Unavailable(f"partition stream {self.stream} refused a fast batch: {r.err_text} (JetStream error {code}); "
                                     f"pctl's producer needs nats-server 2.14+ and streams with allow_batched (restart "
                                     f"'pctl serve' to update them)"))
        else:
            b.transient = True  # 10211, 10071, 10158 (until the id is stuck, §5.1.5) and anything else: retried with back-off
        if seq == 1 and r.kind == fb.REFUSAL and code != fb.ERR_UNKNOWN_BATCH:
            b.never = True  # the batch never started: nothing of it is stored

    def _meta(self, seq: int = 0, duplicate: bool = False, pd: Optional[_Pending] = None) -> RecordMetadata:
        return RecordMetadata(self.partition, self.epoch, seq, pd.seq if pd else 0, duplicate)

    def _ack_up_to(self, n: int) -> None:
        """Finishes the records of batch seqs acked+1..n: the server persisted them."""
        b = self.b
        assert b is not None
        while b.acked < n:
            pd = b.recs[b.acked]
            b.acked += 1
            if pd.failed is None:
                self.p._finish(pd, RecordMetadata(self.partition, self.epoch, 0, pd.seq))

    def _committed(self, r: fb.Reply) -> None:
        """Finishes a batch whose PubAck was clean."""
        b = self.b
        assert b is not None
        n = len(b.recs)
        if b.acked < n - 1:
            self._ack_up_to(n - 1)
        if b.acked < n:
            last = b.recs[n - 1]
            seq = r.stream_seq if last.sends == 1 and r.stream_seq > 0 else 0  # its first send: the PubAck names it
            self.p._finish(last, RecordMetadata(self.partition, self.epoch, seq, last.seq))
            b.acked = n
        self._end_batch(r.stream_seq)
        self.backoff = 0.0

    def _end_batch(self, stream_seq: int) -> None:
        assert self.b is not None
        if stream_seq > self.floor:
            self.floor = stream_seq
        self.p._batches.pop(self.b.id, None)
        self.b = None

    def _finish_stored(self, stored: dict) -> list:
        """Finishes the open batch's records not yet finished: those in `stored` (index -> stream
        sequence, 0 if unknown) are acknowledged, refused ones fail, those whose id is stuck "in
        process" fail (spec/protocol.md §5.1.5: not re-sent with the same id until the duplicate
        window ends, nor under a new id without a guard), and the others are returned, in order, to
        be sent again."""
        b = self.b
        assert b is not None
        rest = []
        for i in range(b.acked, len(b.recs)):
            pd = b.recs[i]
            if pd.failed is not None:
                self.p._finish(pd, error=pd.failed)
            elif i in stored:
                self.p._finish(pd, RecordMetadata(self.partition, self.epoch, stored[i], pd.seq))
            elif pd.in_process.stuck:
                self.p._finish(pd, error=in_process_error(pd.seq, pd.msg_id, self.partition, pd.in_process.count))
            else:
                rest.append(pd)
        b.acked = len(b.recs)
        return rest

    def _end_confirmed(self, found: dict, stream_seq: int) -> None:
        """Ends a committed batch that the confirm step had to read back: records found are
        acknowledged, the others (counted by the server but not stored) go out again in a new
        batch, after records sent later that it did store: their keys may be out of order."""
        b = self.b
        assert b is not None
        rest = self._finish_stored(found)
        if rest:
            self.p.holes += len(rest)
            self.logf(f"SERVER FAULT: batch {b.id} was committed with {len(b.recs)} records but {len(rest)} of them are not "
                      f"stored (nats-server counted raft proposals a leader's term change dropped); sending them again after "
                      f"later records: per-key order may be broken for their keys")
        self._end_batch(stream_seq)
        self.queue.extendleft(reversed(rest))

    def _low_floor(self, lo: int, hi: int) -> int:
        """The lowest stream sequence above which a copy of the open batch's records lo..hi-1 can
        be stored: the sink's floor, or lower for records sent to this stream before."""
        assert self.b is not None
        first = [pd.floors[self.stream] for pd in self.b.recs[lo:hi] if self.stream in pd.floors]
        return _rules.search_floor(self.floor, first)

    async def _get(self, seq: int) -> Optional[fb.StoredMsg]:
        """Message `seq` of the stream, read from its leader ($JS.API.STREAM.MSG.GET; a direct get
        may come from a replica that lags), None when there is none; retries transient failures."""
        return await self._leader(b'{"seq":%d}' % seq, f"message {seq}")

    async def _leader_last(self) -> Optional[fb.StoredMsg]:
        """The stream's last message as the stream leader answers STREAM.MSG.GET with
        {"last_by_subj": ">"}: None when the stream is empty or its last message is gone (deleted,
        expired). The end of a read-back (spec/protocol.md §5.1.2, "the read-back's end")."""
        return await self._leader(b'{"last_by_subj":">"}', "the last message")

    async def _leader_next(self, start: int) -> Optional[fb.StoredMsg]:
        """The stream's first message at or after sequence `start`, from the stream leader
        (STREAM.MSG.GET with {"seq": start, "next_by_subj": ">"}): None when there is none."""
        return await self._leader(b'{"seq":%d,"next_by_subj":">"}' % start, f"the first message from {start}")

    async def _leader(self, body: bytes, what: str) -> Optional[fb.StoredMsg]:
        """One STREAM.MSG.GET request (body) until the stream leader answers it: the message, or
        None when there is none. A stream without a leader answers "cluster not available" and one
        that is electing answers nothing; both are retried with the back-off."""
        nc = self.p._c.nc
        for attempt in range(1 << 30):
            self._check_abort()
            try:
                m = await nc.request(f"$JS.API.STREAM.MSG.GET.{self.stream}", body, timeout=max(self.p._c.ack_timeout, 0.5))
                got = fb.parse_msg_get(m.data)
                if got is None or isinstance(got, fb.StoredMsg):
                    return got
                if got[0] == fb.ERR_STREAM_NOT_FOUND:
                    raise NotFound(f"partition stream {self.stream} is gone")
                why: Any = f"{got[1]} ({got[0]})"
            except (nats.errors.Error, asyncio.TimeoutError) as e:
                why = e
            if attempt % 10 == 9:
                self.logf(f"reading {what} of {self.stream}: {why}; retrying")
            await self._pause(self._backoff(attempt))
        raise AssertionError("unreachable")

    async def _read_range(self, first: int, last: int, f: Callable[[int, fb.StoredMsg], None], backwards: bool = False,
                          stop: Optional[Callable[[], bool]] = None) -> None:
        """Reads messages first..last from the stream leader, 64 at a time, calling f for each
        that exists (in ascending order, or descending with `backwards`) until `stop` says so."""
        window = 64
        if not backwards:
            lo = first
            while lo <= last:
                hi = min(last, lo + window - 1)
                msgs = await asyncio.gather(*(self._get(s) for s in range(lo, hi + 1)))
                for i, m in enumerate(msgs):
                    if m is not None:
                        f(lo + i, m)
                lo = hi + 1
            return
        hi = last
        while hi >= first:
            lo = max(first, hi - window + 1)
            msgs = await asyncio.gather(*(self._get(s) for s in range(lo, hi + 1)))
            for i in range(len(msgs) - 1, -1, -1):
                m = msgs[i]
                if m is not None:
                    f(lo + i, m)
                    if stop is not None and stop():
                        return
            hi = lo - 1

    def _is(self, m: fb.StoredMsg, pd: _Pending) -> bool:
        return fb.same_record(m, self.p.id, str(pd.seq), pd.msg_id, pd.key_hdr, pd.value)

    async def _confirm(self, k: int, up_to: int) -> tuple:
        """On a cluster, checks records acked..k-1 of the open batch that the server counted as
        persisted (spec/protocol.md §5.1.2). When the stream's leader and its election time are
        those noted before the batch, and the election is older than 5 s, the count is trusted:
        ({}, True). Otherwise the stream is read back (_read_back) and every record of the batch
        looked for: (index -> stream sequence of those found, False). Records not found get a new
        deduplication id before they are sent again. That gives up deduplication, which is safe
        only because _read_back reads up to the stream leader's end (§5.1.2, "the read-back's
        end")."""
        b = self.b
        assert b is not None
        info = await self._stream_info()
        if not self._note_leader(info):
            return {}, True
        self.p.confirmed_by_reading += 1
        found, low, top = await self._read_back(max(int((info.get("state") or {}).get("last_seq") or 0), up_to))
        for i in range(b.acked, len(b.recs)):
            if i not in found:  # a hole: re-sent under a new token, stuck old id or not (§5.1.5)
                self.p._renew(b.recs[i])
        if len(found) < k - b.acked:
            self.logf(f"read back {low + 1}..{top} after a leader change: {len(found)} of {len(b.recs) - b.acked} records of "
                      f"batch {b.id} found ({k - b.acked} counted by the server)")
        return found, False

    async def _read_back(self, known: int) -> tuple:
        """Reads the stream back from the stream leader, from the lowest floor of the open batch's
        records not yet finished to the stream's end as the leader sees it, and looks for each of
        those records: (index -> stream sequence of those found, low, top: the range read was
        low+1..top). `known` is the highest sequence the caller knows of (the stream info's last
        sequence, the PubAck's).

        The stream info is no end: while the stream has no leader, every member answers
        STREAM.INFO with its own state, and one that lags names a last sequence below records
        already stored; a read that stopped there would not find them and _confirm would give
        them new ids: stored twice. The end is the leader's last message (STREAM.MSG.GET, which
        only a stream leader answers; nats-server makes a node the leader only once it applied
        every entry of earlier terms its log holds): every copy of the batch's records proposed
        before that answer is at or below it. When the last message is gone (or the stream is
        empty), the read goes on message by message (next_by_subj) until the leader says there is
        none after it."""
        b = self.b
        assert b is not None
        want = {b.recs[i].msg_id: i for i in range(b.acked, len(b.recs))}
        found: dict = {}

        def look(seq: int, m: fb.StoredMsg) -> None:
            i = want.get(m.get(wire.HEADER_MSG_ID))
            if i is not None and self._is(m, b.recs[i]):
                found[i] = seq

        last = await self._leader_last()
        top = max(known, last.seq) if last is not None else known
        low = self._low_floor(b.acked, len(b.recs))
        await self._read_range(low + 1, top, look)
        if last is None:
            start = max(top, low) + 1
            while True:
                m = await self._leader_next(start)
                if m is None or m.seq < start:
                    break
                look(m.seq, m)
                top, start = m.seq, m.seq + 1
        if self.p._content_tokens and low > 0 and any(i not in found for i in range(b.acked, len(b.recs))):
            # A content token's id may have been stored by an earlier run, as long ago as the
            # deduplication window reaches.
            since = await self._seq_at(time.time() - DEDUP_WINDOW - 10)
            if since <= low:
                await self._read_range(since, low, look)
        if self.compact:
            compaction.superseded_in_batch([pd.key for pd in b.recs], b.acked, found)
        if top > known:
            above = sum(1 for seq in found.values() if seq > known)
            if above:
                self.logf(f"read back past the stream info's last sequence {known} to the leader's end {top}: {above} records of "
                          f"batch {b.id} are stored above {known} (a read that stopped there would have sent them again under new ids)")
        return found, low, top

    async def _seq_at(self, t: float) -> int:
        """The sequence of the stream's first message stored at or after unix time t (a huge
        number when there is none)."""
        ts = datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            m = await self.p._c.nc.request(f"$JS.API.DIRECT.GET.{self.stream}", b'{"start_time":"%s"}' % ts.encode(),
                                          timeout=max(self.p._c.ack_timeout, 0.5))
        except (nats.errors.Error, asyncio.TimeoutError) as e:
            raise Unavailable(f"direct get of {self.stream} at {ts}: {e}") from None
        hdr = m.headers or {}
        if hdr.get("Status"):
            return 1 << 62
        try:
            return int(hdr.get("Nats-Sequence") or "")
        except ValueError:
            raise Unavailable(f"direct get of {self.stream} at {ts}: no sequence in the answer") from None

    # --- settling ---

    async def _settle(self, fence_desc: Optional[wire.Topic]) -> Optional[wire.Topic]:
        """Learns which prefix of the open batch is stored, finishes it, and queues the rest again
        (same epoch) or returns the descriptor that fenced the partition (the rest stays for
        _take_queue). The batch is closed when this returns: nothing more of it can be stored."""
        b = self.b
        assert b is not None
        self.p.settled += 1
        self.logf(f"settling batch {b.id} ({len(b.recs)} records sent, {b.acked} acknowledged): {b.anomaly}")
        desc = [fence_desc]
        fenced = [fence_desc if fence_desc is not None and fence_desc.current.epoch > self.epoch else None]
        n = b.acked
        exact: dict = {}
        if not b.never:
            n = max(n, await self._learn(desc, fenced, exact))
        stored = {i: exact.get(i, 0) for i in range(b.acked, n)}
        if self.verify and n > b.acked:
            for attempt in range(1 << 30):
                try:
                    found, trusted = await self._confirm(n, b.pub_ack.stream_seq if b.pub_ack else 0)
                    if not trusted:
                        stored = found
                    break
                except NotFound:
                    raise
                except PctlError as e:
                    self.logf(f"confirming batch {b.id}: {e}; retrying")
                    await self._pause(self._backoff(attempt))
        rest = self._finish_stored(stored)
        transient = b.transient
        self.p._batches.pop(b.id, None)
        self.b = None
        self.logf(f"batch {b.id}: {len(b.recs) - len(rest)} of {len(b.recs)} records stored; {len(rest)} to send again")
        self.queue.extendleft(reversed(rest))
        if fenced[0] is not None:
            return fenced[0]
        if transient:
            self.backoff = min(max(2 * self.backoff, 0.05), 1.0)
            await self._pause(self.backoff)
        return None

    async def _learn(self, desc: list, fenced: list, exact: dict) -> int:
        """How many records of the open batch are persisted: from its PubAck, by closing the batch
        with an EOB, or by reading the partition back."""
        b = self.b
        assert b is not None
        p = self.p
        waited = search = False
        silent = 0  # EOBs that got no answer
        attempt = -1
        while True:
            attempt += 1
            self._check_abort()
            fd = self.fence_desc
            if fd is not None and (desc[0] is None or fd.current.epoch > desc[0].current.epoch):
                desc[0] = fd  # the control task knows a newer descriptor
            if b.pub_ack is not None:
                ok, k, at = await self._check_pub_ack(b.pub_ack)
                if ok:
                    if at >= 0:
                        exact[at] = b.pub_ack.stream_seq
                    if b.pub_ack.stream_seq > self.floor and k > b.acked:
                        self.floor = b.pub_ack.stream_seq
                    return k
                b.pub_ack, search = None, True  # not provably about these records: read the partition back
            if b.ended and not waited:
                waited = True  # the server ended the batch (a gap or an error): its PubAck is on its way
                await self._await(lambda: b.pub_ack is not None)
                continue
            if search or b.unknown:
                k, at = await self._search(fenced[0])
                if k > b.acked and at > 0:
                    exact[k - 1] = at
                    self.floor = max(self.floor, at)
                return k
            # Close the batch ourselves: an EOB above everything sent, on the stream's current
            # subject (after a fence the batch lives on under the stream's new subject).
            await self._wait_connected()
            if b.no_resp or attempt > 0:
                try:
                    desc[0] = await p._fetch_quick()
                except (NotFound, PermissionDenied):
                    raise
                except PctlError as e:
                    self.logf(f"reading the descriptor: {e}; closing the batch on {self.subject}")
            subject = self.subject
            d = desc[0]
            if d is not None and d.current.epoch > self.epoch:
                fenced[0] = d
                cur = d.current
                subject = compaction.batch_end_subject(p.topic, cur.epoch, self.partition, self.keys)
                if self.partition >= cur.partitions:
                    # Shrunk away: the retired subject takes no publishes (not even an EOB), and
                    # nothing more of the batch can be stored: read the partition back.
                    search = True
                    continue
            elif d is not None and d.change is not None and b.no_resp:
                # Fenced but the new epoch is not active yet: wait for it before closing.
                if attempt % 20 == 0:
                    self.logf(f"epoch change to {d.change.get('to')} in progress ({d.change.get('state')}); waiting for it")
                await self._pause(min(self._backoff(attempt), 0.1))
                continue
            b.no_resp = False
            try:
                await _nats.publish_raw_many(p._c.nc, [(subject, fb.reply_subject(p._inbox, b.id, 1, len(b.recs) + 1, fb.OP_EOB), b"", b"")])
            except (nats.errors.Error, OSError) as e:
                self.logf(f"closing batch {b.id}: {e}")
            # Awaited for the acknowledgement timeout but at least EOB_WAIT (spec §5.1.2, settle 1):
            # with a timeout of a few milliseconds a late answer is not silence.
            await self._await(lambda: b.pub_ack is not None or b.unknown or b.no_resp, max(p._c.ack_timeout, EOB_WAIT))
            if b.pub_ack is None and not b.unknown and not b.no_resp:
                # No answer at all to the EOB. nats-server 2.15.2 keeps a fast batch whose commit
                # waits for proposals a replica or placement change dropped "committing" for good
                # (its cleanup timer stops at the commit) and skips every later message of it
                # without a reply, while the stream takes new batches: read the partition back
                # (spec/protocol.md §5.1.2, settle 1) instead of closing it forever.
                silent += 1
                if silent >= SILENT_EOBS:
                    self.logf(f"batch {b.id}: {silent} EOBs on {subject} had no answer within {max(p._c.ack_timeout, EOB_WAIT)}s each; reading the partition back")
                    search = True
                    continue
            if b.pub_ack is None and not b.unknown:
                await self._pause(self._backoff(attempt))

    async def _wait_connected(self) -> None:
        nc = self.p._c.nc
        while not nc.is_connected:
            if nc.is_closed:
                raise Unavailable("the connection is closed")
            await self._pause(0.02)

    async def _await(self, cond: Callable[[], bool], wait: Optional[float] = None) -> None:
        """Handles replies (as while settling) until cond holds or the acknowledgement timeout (or
        wait seconds) passes."""
        deadline = time.monotonic() + (self.p._c.ack_timeout if wait is None else wait)
        while not cond():
            while self.replies:
                self._handle_settling(self.replies.popleft())
            if cond():
                return
            self._check_abort()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await self._sleep(left)

    def _handle_settling(self, r: fb.Reply) -> None:
        """A reply while the batch is settled: flow acks still confirm persisted records; a
        PubAck, refusal or no responders say how the batch ended."""
        b = self.b
        if b is None or r.batch != b.id:
            return
        k = r.kind
        if k == fb.FLOW_ACK:
            if r.ack_seq <= len(b.recs) and not self.verify:
                self._ack_up_to(r.ack_seq)
        elif k == fb.GAP:
            b.ended = True
        elif k in (fb.FLOW_ERR, fb.REFUSAL):
            self._refused(r)
            if k == fb.FLOW_ERR:
                b.ended = True
        elif k == fb.NO_RESPONDERS:
            if r.op == fb.OP_EOB:
                b.no_resp = True  # only our EOB's: the records' own 503s are old news by now
        elif k == fb.PUBACK:
            b.pub_ack = r

    async def _check_pub_ack(self, r: fb.Reply) -> tuple:
        """What a PubAck of a batch that had an anomaly proves: (True, k, at) when records 1..k are
        persisted (at: the index of the record found at the PubAck's stream sequence, -1 none);
        (False, 0, -1) when it is not provably about this producer's records."""
        b = self.b
        assert b is not None
        n = len(b.recs)
        if r.ack_batch != b.id or r.count > n or r.count < b.acked:
            return False, 0, -1
        k = r.count
        if r.duplicate:
            # A batch of one record whose id was stored already: it counts only if the stored
            # message is this record.
            if n != 1 or k != 1:
                return False, 0, -1
            if b.acked == 1:
                # Its flow ack counted the duplicate as persisted and acknowledged the record
                # already: the PubAck adds nothing, and must not acknowledge it twice.
                return True, 1, -1
            m = await self._get(r.stream_seq)
            pd = b.recs[0]
            if m is not None and self._is(m, pd):
                self.p._finish(pd, RecordMetadata(self.partition, self.epoch, r.stream_seq, pd.seq, True))
                b.acked = 1
                return True, 1, -1
            pd.failed = Conflict(f"record {pd.seq} (id {pd.msg_id}) was acknowledged as a duplicate of stream sequence "
                                 f"{r.stream_seq} of partition {self.partition}, which holds a different record: it is NOT "
                                 f"stored; another client published with this record's deduplication id")
            return True, 1, -1
        if k == 0 or k == b.acked:
            return True, k, -1
        if r.stream_seq == 0:
            return False, 0, -1  # stored nothing new: cannot be checked
        m = await self._get(r.stream_seq)
        for i in range(k - 1, -1, -1):
            if m is not None and self._is(m, b.recs[i]):
                return True, k, i
            if self.verify:
                break  # on a cluster only the last counted record proves the count
        self.logf(f"the PubAck of batch {b.id} names stream sequence {r.stream_seq}, which holds none of its records")
        return False, 0, -1

    async def _search(self, fenced: Optional[wire.Topic]) -> tuple:
        """Reads the partition back from its top (the epoch's boundary when fenced) down to the
        lowest floor of the batch's records: (how many records of the batch are stored, the
        stream sequence of the last of them); the batch stores a prefix of what was sent."""
        b = self.b
        assert b is not None
        top = 0
        if fenced is not None:
            e = fenced.epoch(self.epoch)
            if e is not None and e.boundaries and self.partition < len(e.boundaries):
                top, _ = _rules.search_top(True, e.boundaries[self.partition])
        if top == 0:
            top = int(((await self._stream_info()).get("state") or {}).get("last_seq") or 0)
        want = {b.recs[i].msg_id: i for i in range(b.acked, len(b.recs))}
        hit: list = []

        def look(seq: int, m: fb.StoredMsg) -> None:
            j = want.get(m.get(wire.HEADER_MSG_ID))
            if j is not None and not hit and self._is(m, b.recs[j]):
                hit.append((j, seq))

        low = self._low_floor(b.acked, len(b.recs))
        await self._read_range(low + 1, top, look, backwards=True, stop=lambda: bool(hit))
        if hit:
            j, seq = hit[0]
            self.logf(f"search: record {j + 1} of batch {b.id} is stored at {seq}")
            return j + 1, seq
        return b.acked, 0
