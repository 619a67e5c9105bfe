"""An ordered reader of one JetStream stream that never stalls for good (spec/protocol.md §6.7).

A reader owns an ephemeral pull consumer (in memory, one replica, no acknowledgements) and keeps
one pull request outstanding while its buffer has room. Every way a read can be lost is recovered
without waiting for a lease or a restart:

- every pull has an expiry and an idle heartbeat: nothing from the server for two heartbeats, or
  no end-of-pull status after the expiry, means the pull was lost: a new one is issued (and after
  two lost pulls in a row the consumer is re-created);
- a gap in the consumer sequence, or a heartbeat whose ``Nats-Last-Consumer`` is above the last
  consumer sequence received, means messages were lost: the consumer is re-created from the last
  stream sequence received + 1;
- after a disconnect or reconnect, a deleted consumer (``409``, no responders, not found) or a
  failed request, the consumer is re-created;
- a reader that received nothing for a few heartbeats checks the stream's last sequence: above
  its position, it re-creates its consumer. That check catches whatever the others miss.

Messages of an older consumer or an older pull generation are ignored, so a re-created consumer
never delivers twice or out of order: positions only move forward by exactly the sequences
received in order from the current consumer."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from . import _nats
from .errors import NotFound, PctlError, PermissionDenied

if TYPE_CHECKING:
    from .client import Client


class RawRecord(NamedTuple):
    """A stream message as the reader received it."""
    seq: int  # stream sequence
    subject: bytes
    headers: Optional[bytes]  # the NATS header block, unparsed
    data: bytes
    time_ns: int  # when the stream stored it (unix nanoseconds)
    pending: int  # messages left in the stream after this one, as the consumer counted them


class ReaderStats:
    __slots__ = ("created", "lost_pulls", "gaps", "stale_checks", "stale_recoveries", "received")

    def __init__(self) -> None:
        self.created = self.lost_pulls = self.gaps = self.stale_checks = self.stale_recoveries = self.received = 0

    def __repr__(self) -> str:
        return " ".join(f"{k}={getattr(self, k)}" for k in self.__slots__)


class ReaderClosed(Exception):
    """The reader was closed."""


class StreamReader:
    """Reads `stream` in order from `start_seq` (or, with `last_per_subject`, the last message of
    every subject matching `filter_subject`, then everything after). Use it from one task:
    ``batch = await reader.next_batch()``."""

    def __init__(self, client: "Client", stream: str, start_seq: int = 1, *, filter_subject: Optional[str] = None,
                 last_per_subject: bool = False, batch: int = 256, max_buffer: int = 1024, expires: float = 5.0,
                 heartbeat: float = 1.0, inactive: float = 60.0, logf: Optional[Callable[[str], None]] = None,
                 whole_stream: Optional[bool] = None):
        self.c = client
        self.stream = stream
        self.filter = filter_subject
        # whole_stream: the filter matches every message of the stream (so the stream's last
        # sequence says what the reader must get); default: no filter.
        self.whole = filter_subject is None if whole_stream is None else whole_stream
        self._last_per_subject = last_per_subject
        self.next_seq = max(1, start_seq)  # the stream sequence the reader wants next
        self.batch = batch
        self.max_buffer = max_buffer
        self.expires = expires
        self.heartbeat = heartbeat
        self.inactive = inactive
        self.logf = logf or (lambda s: None)
        self.stats = ReaderStats()
        self.caught_up = asyncio.Event()  # set once the reader has seen the stream's end once
        self._buf: deque = deque()
        self._wake = asyncio.Event()
        self._inbox = client.nc.new_inbox()
        self._sub: Optional[_nats.RawSubscription] = None
        self._consumer: Optional[str] = None
        self._gen = 0
        self._cseq = 0
        self._pull_no = 0
        self._pull: Optional[list] = None  # [pull no, batch, received, deadline]
        self._activity = 0.0
        self._lost_in_row = 0
        self._reset: Optional[str] = None
        self._closed = False
        self._stop_listening: Optional[Callable[[], None]] = None
        self._last_data = self._last_check = time.monotonic()
        # Silence after which the reader asks the server whether it misses something.
        self.stale_after = 5 * heartbeat
        # Each API request's timeout: a reply lost in a broker restart must not hold the reader long.
        self.op_timeout = max(2.0, 5 * heartbeat)

    # --- public ------------------------------------------------------------------------------------

    async def next_batch(self, timeout: Optional[float] = None) -> list:
        """The next messages, in stream order (at least one), waiting as long as needed; with a
        `timeout`, an empty list when none came in time. Raises :class:`ReaderClosed` after
        :meth:`close`, :class:`pctl.NotFound` when the stream no longer exists and
        :class:`pctl.PermissionDenied` when the credentials may not read it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = 0.05
        while True:
            if self._closed:
                raise ReaderClosed()
            if self._buf:
                out = list(self._buf)
                self._buf.clear()
                self._last_data = time.monotonic()
                return out
            now = time.monotonic()
            if now - max(self._last_data, self._last_check) > self.stale_after:
                self._last_check = now
                await self.check_stale()
            try:
                await self._ensure()
                backoff = 0.05
            except (NotFound, PermissionDenied):
                raise
            except PctlError as e:
                self.logf(f"reader {self.stream}: {e}; retrying in {backoff:.2f}s")
                self._consumer = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if self._buf:
                continue
            now = time.monotonic()
            wait = self._check_liveness(now)
            if deadline is not None:
                if now >= deadline:
                    return []
                wait = min(wait, deadline - now)
            self._wake.clear()
            if self._buf or self._reset or self._closed:
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(wait, 0.001))
            except asyncio.TimeoutError:
                pass

    def pending_hint(self) -> int:
        """Messages buffered and not yet returned."""
        return len(self._buf)

    def restart(self, seq: int) -> None:
        """Drops what is buffered and reads again from stream sequence `seq`."""
        self._buf.clear()
        self.next_seq = max(1, seq)
        self._last_per_subject = False
        self._need_reset("restart")

    async def close(self) -> None:
        """Stops the reader and deletes its consumer (best effort: the server also deletes it after
        `inactive` seconds without pulls)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._stop_listening:
            self._stop_listening()
        if self._sub is not None:
            await self._sub.unsubscribe()
        await self._delete_consumer()

    # --- consumer and pulls ------------------------------------------------------------------------

    async def _ensure(self) -> None:
        if self._sub is None:
            self._sub = await _nats.raw_subscribe(self.c.nc, self._inbox + ".>", self._on_msg)
            self._stop_listening = self.c._on_reconnect(lambda: self._need_reset("reconnect"))
        if self._reset is not None and self._consumer is not None:
            why, self._reset = self._reset, None
            self.logf(f"reader {self.stream}: re-creating its consumer at {self.next_seq} ({why})")
            old = self._consumer
            self._consumer = None
            asyncio.ensure_future(self._delete_consumer(old))
        self._reset = None
        if self._consumer is None:
            await self._create()
        if self._pull is None and len(self._buf) < self.max_buffer - self.batch + 1:
            await self._issue_pull()

    async def _create(self) -> None:
        self._gen += 1
        gen = self._gen
        name = f"pctl_{secrets.token_hex(8)}"
        cfg: dict[str, Any] = {"name": name, "ack_policy": "none", "replay_policy": "instant", "mem_storage": True,
                               "num_replicas": 1, "inactive_threshold": int(self.inactive * 1e9), "max_waiting": 16}
        if self._last_per_subject:
            cfg["deliver_policy"] = "last_per_subject"
        else:
            cfg["deliver_policy"] = "by_start_sequence"
            cfg["opt_start_seq"] = self.next_seq
        if self.filter:
            cfg["filter_subject"] = self.filter
        try:
            # The filter travels in the subject too: that is what a credential limited to some
            # subjects can allow (the Go client does the same, spec/protocol.md §6.7).
            api = f"$JS.API.CONSUMER.CREATE.{self.stream}.{name}" + (f".{self.filter}" if self.filter else "")
            r = await _nats.js_request(self.c, api,
                                       {"stream_name": self.stream, "config": cfg, "action": "create"}, timeout=self.op_timeout)
        except _nats.JSError as e:
            if e.err_code == _nats.ERR_STREAM_NOT_FOUND:
                raise NotFound(f"stream {self.stream} does not exist (was the topic deleted?)") from None
            raise PctlError(f"create a consumer on {self.stream}: {e}") from None
        if gen != self._gen:
            return
        self._consumer, self._cseq, self._pull = name, 0, None
        self._activity = time.monotonic()
        self._lost_in_row = 0
        self.stats.created += 1
        self._last_per_subject = False  # a re-created consumer goes on by sequence
        if int(r.get("num_pending") or 0) == 0:
            self.caught_up.set()

    async def _issue_pull(self) -> None:
        self._pull_no += 1
        n = self._pull_no
        expires = self.expires
        req = {"batch": self.batch, "expires": int(expires * 1e9), "idle_heartbeat": int(self.heartbeat * 1e9)}
        self._pull = [n, self.batch, 0, time.monotonic() + expires + self.heartbeat * 2]
        self._activity = time.monotonic()
        try:
            await self.c.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}", json.dumps(req).encode(),
                                    reply=f"{self._inbox}.{self._gen}.{n}")
        except Exception as e:  # noqa: BLE001 - disconnected: the reconnect re-creates
            self._pull = None
            raise PctlError(f"pull from {self.stream}: {e}") from None

    def _check_liveness(self, now: float) -> float:
        """Notices a lost pull or a stale consumer; returns how long to wait before checking again."""
        hb = self.heartbeat
        if self._pull is not None:
            silent = now - self._activity
            if silent > 2 * hb + 0.5 or now > self._pull[3]:
                self.stats.lost_pulls += 1
                self._lost_in_row += 1
                self._pull = None
                if self._lost_in_row >= 2:
                    self._need_reset("pulls lost")
                return 0.0
            return max(0.01, min(2 * hb + 0.5 - silent, self._pull[3] - now))
        return hb

    def _need_reset(self, why: str) -> None:
        if self._reset is None:
            self._reset = why
        self._pull = None
        self._wake.set()

    # --- the safety net ------------------------------------------------------------------------------

    async def check_stale(self) -> bool:
        """The safety net: asks the server whether the reader misses something while it has nothing
        buffered. The consumer is re-created from the reader's position when the consumer is gone,
        when it delivered a stream sequence the reader never received, when it counts messages
        pending that no pull brings, or (for a whole stream) when the stream's last sequence is at
        or above the position. Returns True when it re-created. :meth:`next_batch` runs it after
        a few heartbeats without a message."""
        if self._closed or self._buf or self._consumer is None:
            return False
        self.stats.stale_checks += 1
        before, name = self.next_seq, self._consumer
        why = ""
        try:
            info = await _nats.js_request(self.c, f"$JS.API.CONSUMER.INFO.{self.stream}.{name}", {}, timeout=self.op_timeout)
            delivered = int((info.get("delivered") or {}).get("stream_seq") or 0)
            pending = int(info.get("num_pending") or 0)
            if delivered >= before:
                why = f"its consumer delivered {delivered}, the reader is at {before - 1}"
            elif pending > 0:
                why = f"its consumer has {pending} pending that no pull brings"
        except _nats.JSError as e:
            if e.err_code == _nats.ERR_CONSUMER_NOT_FOUND or e.code == 404:
                why = "its consumer is gone"
            else:
                return False
        except PctlError:
            return False
        if not why and self.whole:
            try:
                info = await _nats.js_request(self.c, f"$JS.API.STREAM.INFO.{self.stream}", {}, timeout=self.op_timeout)
            except (_nats.JSError, PctlError):
                return False
            last = int((info.get("state") or {}).get("last_seq") or 0)
            if last >= before:
                why = f"the stream is at {last}, the reader at {before - 1}"
        if why and self.next_seq == before and not self._buf and self._consumer == name:
            self.stats.stale_recoveries += 1
            self._need_reset(why)
            return True
        return False

    async def _delete_consumer(self, name: Optional[str] = None) -> None:
        name = name or self._consumer
        if not name:
            return
        try:
            await _nats.js_request(self.c, f"$JS.API.CONSUMER.DELETE.{self.stream}.{name}", {}, timeout=2.0)
        except Exception:  # noqa: BLE001 - best effort; the inactive threshold removes it anyway
            pass

    # --- messages ------------------------------------------------------------------------------------

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, headers: Optional[bytes]) -> None:
        if self._closed:
            return
        if reply:
            # A stream message: its subject is the record's, its reply subject names the consumer.
            ack = _nats.parse_ack(reply)
            if ack is None or ack[0] != self._consumer:
                return  # an older consumer's
            _, sseq, cseq, ts, pending = ack
            if cseq != self._cseq + 1:
                if cseq <= self._cseq:
                    return  # a repeat: already had it
                self.stats.gaps += 1
                self._need_reset(f"consumer sequence {cseq} after {self._cseq}")
                return
            self._cseq = cseq
            self._activity = time.monotonic()
            self._lost_in_row = 0
            if sseq < self.next_seq:
                return
            self.next_seq = sseq + 1
            self.stats.received += 1
            self._buf.append(RawRecord(sseq, subject, headers, data, ts, pending))
            if pending == 0:
                self.caught_up.set()
            pl = self._pull
            if pl is not None:
                pl[2] += 1
                if pl[2] >= pl[1]:
                    self._pull = None  # complete: the next one is issued when the buffer has room
            self._wake.set()
            return
        # A status: its subject is the reply subject of the pull it is about, <inbox>.<gen>.<pull>.
        tail = subject[len(self._inbox) + 1:]
        g, _, p = tail.partition(b".")
        try:
            gen, pull = int(g), int(p)
        except ValueError:
            return
        if gen != self._gen:
            return
        status, desc, hdrs = _nats.parse_header_block(headers)
        self._activity = time.monotonic()
        pl = self._pull
        current = pl is not None and pl[0] == pull
        if status == 100:
            if current:
                self._lost_in_row = 0
            for n, v in hdrs:
                if n == "Nats-Last-Consumer":
                    try:
                        last = int(v)
                    except ValueError:
                        continue
                    if last > self._cseq:
                        self.stats.gaps += 1
                        self._need_reset(f"heartbeat says consumer sequence {last}, received {self._cseq}")
                        return
            if not self._buf and pl is not None:
                self.caught_up.set()
            return
        if status in (404, 408):
            if current:
                self._pull = None
                self._lost_in_row = 0
                self.caught_up.set()
                self._wake.set()
            return
        if status == 409 and "Exceeded MaxWaiting" in desc:
            if current:
                self._pull = None
                self._wake.set()
            return
        if status in (409, 503):
            self._need_reset(f"status {status} {desc}".strip())
            return
        if current:
            self._pull = None
            self._wake.set()
