"""Low-level NATS helpers of the SDK: raw subscriptions, NATS header blocks, JetStream API calls,
JetStream acknowledgement subjects and the group bucket's KV operations.

Raw subscriptions hand a subscription's messages to a plain function as the bytes nats-py's parser
produced (subject, reply, data, header block), before nats-py builds a ``Msg`` and parses its
headers into a dict. That keeps every value of a header that appears several times (spec/protocol.md
§5.3: application headers are lists of values) and saves most of the per-message cost. It hooks
``Client._process_msg`` of one connection, an internal of nats-py, which is why nats-py is pinned
to one exact version (pyproject.toml); ``tests/test_consumer_units.py`` checks the hook on it."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from typing import Any, Callable, Iterable, Optional

import nats.errors

from .errors import InternalError, NotFound, PctlError, Unavailable

RawHandler = Callable[[bytes, bytes, bytes, Optional[bytes]], None]
"""Called with (subject, reply, data, header block or None) for every message of a raw subscription,
on the connection's reading task: it must not block and must not raise."""

_CRLF = b"\r\n"


class RawSubscription:
    """A subscription whose messages go to a :data:`RawHandler`. Close it with :meth:`unsubscribe`."""

    def __init__(self, nc: Any, sub: Any, table: dict):
        self._nc, self._sub, self._table = nc, sub, table

    @property
    def sid(self) -> int:
        return int(self._sub._id)

    async def unsubscribe(self) -> None:
        self._table.pop(self.sid, None)
        try:
            await self._sub.unsubscribe()
        except Exception:  # noqa: BLE001 - closed connection: nothing to undo
            pass


def _raw_table(nc: Any) -> dict:
    table = getattr(nc, "_pctl_raw", None)
    if table is not None:
        return table
    table = {}
    orig = nc._process_msg

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: Optional[bytes]) -> None:
        h = table.get(sid)
        if h is None:
            await orig(sid, subject, reply, data, headers)
            return
        try:
            h(subject, reply, data, headers)
        except Exception:  # noqa: BLE001 - a handler bug must not kill the connection's reader
            import traceback
            traceback.print_exc()

    nc._process_msg = process_msg
    nc._pctl_raw = table
    return table


async def raw_subscribe(nc: Any, subject: str, handler: RawHandler) -> RawSubscription:
    """Subscribes to `subject` with a raw handler. Subscribe before anything can be sent to the
    subject (an inbox): a message arriving in between would be queued where nobody reads it."""
    table = _raw_table(nc)
    sub = await nc.subscribe(subject, pending_msgs_limit=-1, pending_bytes_limit=-1)
    table[int(sub._id)] = handler
    return RawSubscription(nc, sub, table)


# --- header blocks ---------------------------------------------------------------------------------


def parse_header_block(raw: Optional[bytes]) -> tuple[int, str, list]:
    """Splits a NATS header block into (status, description, [(name, value), ...]): status 0 for
    an ordinary message; values keep their order and repeats. Names and values are stripped as NATS
    parsers do; lines without a colon are skipped."""
    if not raw:
        return 0, "", []
    lines = raw.split(_CRLF)
    first = lines[0]
    status, desc = 0, ""
    if len(first) > 8 and first[8:9] == b" ":
        rest = first[9:].strip()
        code, _, d = rest.partition(b" ")
        if code.isdigit():
            status, desc = int(code), d.decode("utf-8", "replace")
    out = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        out.append((name.strip().decode("ascii", "replace"), value.strip().decode("utf-8", "replace")))
    return status, desc, out


def encode_header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    """A NATS header block from (name, value) pairs, in order (values already checked)."""
    parts = [b"NATS/1.0\r\n"]
    for name, value in headers:
        parts.append(f"{name}: {value}\r\n".encode("utf-8"))
    parts.append(_CRLF)
    return b"".join(parts)


def header_block_size(headers: Iterable[tuple[str, str]]) -> int:
    """len(encode_header_block(headers)) without building it."""
    n = 12  # "NATS/1.0\r\n" + final "\r\n"
    for name, value in headers:
        n += len(name) + 4 + len(value.encode("utf-8"))
    return n


async def publish_raw(nc: Any, subject: str, data: bytes, reply: str, header_block: bytes) -> None:
    """Publishes a message with a header block built by the caller (encode_header_block), so that
    a header name may carry several values in order, which nats-py's dict of headers cannot. The
    checks and the flush are nats-py's own publish path (nats-py is pinned to one version)."""
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    size = len(data) + len(header_block)
    if not nc.is_connected:
        if nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size:
            raise nats.errors.OutboundBufferLimitError
    if size > nc._max_payload:
        raise nats.errors.MaxPayloadError
    from nats.protocol.command import hpub_cmd
    nc.stats["out_msgs"] += 1
    nc.stats["out_bytes"] += len(data)
    await nc._send_command(hpub_cmd(subject, reply, header_block, data))
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()


async def publish_raw_many(nc: Any, msgs: list) -> None:
    """Publishes (subject, reply, header block, data) messages in order, with one flush: an empty
    header block sends a message without headers (PUB). Raises before sending anything when the
    connection is closed or, while it reconnects, its buffer cannot take them all."""
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    from nats.protocol.command import hpub_cmd, pub_cmd
    cmds = []
    size = 0
    out_bytes = 0
    for subject, reply, block, data in msgs:
        cmd = hpub_cmd(subject, reply, block, data) if block else pub_cmd(subject, reply, data)
        cmds.append(cmd)
        size += len(cmd)
        out_bytes += len(data)
    if not nc.is_connected:
        if nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size:
            raise nats.errors.OutboundBufferLimitError
    nc.stats["out_msgs"] += len(cmds)
    nc.stats["out_bytes"] += out_bytes
    for cmd in cmds:
        await nc._send_command(cmd)
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()


# --- JetStream acknowledgement subjects -----------------------------------------------------------


def parse_ack(reply: bytes) -> Optional[tuple[str, int, int, int, int]]:
    """(consumer, stream seq, consumer seq, timestamp ns, pending) from a JetStream delivery's reply
    subject: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` or the v2
    form with domain and account hash (12 tokens, and more in future servers)."""
    t = reply.split(b".")
    try:
        if len(t) == 9:
            return t[3].decode(), int(t[5]), int(t[6]), int(t[7]), int(t[8])
        if len(t) >= 12:
            return t[5].decode(), int(t[7]), int(t[8]), int(t[9]), int(t[10])
    except ValueError:
        return None
    return None


# --- the JetStream API -----------------------------------------------------------------------------


class JSError(Exception):
    """An error reply of the JetStream API: `code` (HTTP-like) and `err_code` (JetStream's)."""

    def __init__(self, subject: str, code: int, err_code: int, description: str):
        super().__init__(f"{subject}: JetStream error {err_code}: {description}")
        self.subject, self.code, self.err_code, self.description = subject, code, err_code, description


ERR_STREAM_NOT_FOUND = 10059
ERR_CONSUMER_NOT_FOUND = 10014
ERR_NO_MESSAGE = 10037
ERR_WRONG_LAST_SEQ = 10071
# "wrong last sequence" without the sequence: a replicated stream's leader refusing a
# compare-and-set while a write of the subject it checks is in flight.
ERR_WRONG_LAST_SEQ_CONSTANT = 10164


async def js_request(client: Any, subject: str, body: Any = None, *, headers: Optional[dict] = None,
                     timeout: Optional[float] = None) -> dict:
    """A JetStream API request (JSON body; bytes are sent as they are). Returns the JSON reply;
    raises :class:`JSError` for an error reply, the client's PermissionDenied for a subject the
    credentials may not use and :class:`pctl.Unavailable` when nothing answers in time."""
    data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body if body is not None else {}).encode()
    msg = await client.raw_request(subject, bytes(data), headers=headers, timeout=timeout)
    try:
        resp = json.loads(msg.data) if msg.data else {}
    except ValueError:
        raise InternalError(f"{subject}: bad JetStream reply {bytes(msg.data[:80])!r}") from None
    err = resp.get("error") if isinstance(resp, dict) else None
    if err:
        raise JSError(subject, int(err.get("code") or 0), int(err.get("err_code") or 0), str(err.get("description") or ""))
    return resp


# --- the group bucket (KV) -------------------------------------------------------------------------


class KVEntry:
    """A KV entry read from the bucket's stream leader: value, revision, operation, stored time."""
    __slots__ = ("key", "value", "revision", "op", "time")

    def __init__(self, key: str, value: bytes, revision: int, op: str, time: str):
        self.key, self.value, self.revision, self.op, self.time = key, value, revision, op, time

    @property
    def deleted(self) -> bool:
        return self.op in ("DEL", "PURGE")


class KVConflict(PctlError):
    """A compare-and-set lost: the key changed since the revision given."""
    code = "conflict"


class KV:
    """The few KV operations consumer groups need, on a bucket's stream directly: reads go to the
    stream leader (``$JS.API.STREAM.MSG.GET``; a direct get may be answered by a replica that is
    behind, spec/protocol.md §6.6), writes are JetStream publishes with
    ``Nats-Expected-Last-Subject-Sequence`` for compare-and-set."""

    def __init__(self, client: Any, bucket: str, timeout: Optional[float] = None):
        self.c = client
        self.timeout = timeout  # per request (default: the client's); a reply lost in a restart costs this much
        self.bucket = bucket
        self.stream = f"KV_{bucket}"
        self.prefix = f"$KV.{bucket}."

    async def get(self, key: str) -> Optional[KVEntry]:
        """The key's latest entry (a deleted key's tombstone too), or None: a direct get by last
        subject, with the subject in the request's subject, which is what a credential scoped to
        one group allows (spec/protocol.md §8.2). On a cluster a replica that is behind may answer:
        compare-and-set then fails and is retried, and a stale position is never above the
        group's (it is older, or of an older generation)."""
        subject = f"$JS.API.DIRECT.GET.{self.stream}.{self.prefix}{key}"
        msg = await self.c.raw_request(subject, b"", timeout=self.timeout)
        hdr = msg.headers or {}
        st = hdr.get("Status")
        if st:
            if st == "404":
                return None
            raise Unavailable(f"read {key}: status {st} {hdr.get('Description', '')}".strip())
        op = hdr.get("KV-Operation", "")
        try:
            rev = int(hdr.get("Nats-Sequence") or 0)
        except ValueError:
            rev = 0
        if not rev:
            raise Unavailable(f"read {key}: a direct get answer without Nats-Sequence")
        return KVEntry(key, bytes(msg.data), rev, op, hdr.get("Nats-Time-Stamp", ""))

    async def _publish(self, key: str, value: bytes, headers: dict, timeout: Optional[float] = None) -> int:
        try:
            r = await js_request(self.c, self.prefix + key, value, headers=headers or None, timeout=timeout or self.timeout)
        except JSError as e:
            if e.err_code in (ERR_WRONG_LAST_SEQ, ERR_WRONG_LAST_SEQ_CONSTANT):
                raise KVConflict(f"{key} changed (compare-and-set lost)") from None
            raise Unavailable(f"write {key}: {e}") from None
        return int(r.get("seq") or 0)

    async def put(self, key: str, value: bytes, timeout: Optional[float] = None) -> int:
        return await self._publish(key, value, {}, timeout)

    async def update(self, key: str, value: bytes, revision: int) -> int:
        """Compare-and-set: writes only if the key's latest revision is `revision`."""
        return await self._publish(key, value, {"Nats-Expected-Last-Subject-Sequence": str(revision)})

    async def create(self, key: str, value: bytes) -> int:
        """Writes only if the key does not exist (or was deleted); raises KVConflict otherwise."""
        try:
            return await self.update(key, value, 0)
        except KVConflict:
            e = await self.get(key)
            if e is not None and e.deleted:
                return await self.update(key, value, e.revision)
            raise

    async def put_if_absent(self, key: str, value: bytes, guard: str) -> bool:
        """Writes `key` only if `guard` (another key) has no message before this write in the
        stream's order (``Nats-Expected-Last-Subject-Sequence-Subject``, nats-server 2.11+): True
        when stored, False when refused with "wrong last sequence" (the guard exists, or a write of
        it is in flight). The leader checks it, and every replica again when it applies the write.
        Other failures raise Unavailable (or the client's PermissionDenied)."""
        try:
            await self._publish(key, value, {"Nats-Expected-Last-Subject-Sequence": "0",
                                             "Nats-Expected-Last-Subject-Sequence-Subject": self.prefix + guard})
        except KVConflict:
            return False
        return True

    async def delete(self, key: str) -> None:
        await self._publish(key, b"", {"KV-Operation": "DEL"})

    async def initial_values(self, pattern: str) -> dict:
        """The initial values of a watch of `pattern` (a key pattern, ``*`` and ``>`` allowed):
        the latest entry of every matching key, deleted and purged keys left out, as a dict key
        -> KVEntry. They come from one server's state: an ephemeral consumer (deliver last per
        subject) reads them on the one server that holds it, up to its pending count 0
        (spec/protocol.md §6.1, "Reading the group's keys at join"). Raises Unavailable (or the
        client's PermissionDenied)."""
        filt = self.prefix + pattern
        name = f"pctl_kvw_{secrets.token_hex(8)}"
        cfg = {"name": name, "ack_policy": "none", "deliver_policy": "last_per_subject", "filter_subject": filt,
               "replay_policy": "instant", "mem_storage": True, "num_replicas": 1, "inactive_threshold": int(5e9),
               "max_waiting": 4}
        try:
            r = await js_request(self.c, f"$JS.API.CONSUMER.CREATE.{self.stream}.{name}.{filt}",
                                 {"stream_name": self.stream, "config": cfg, "action": "create"}, timeout=self.timeout)
        except JSError as e:
            raise Unavailable(f"watch {filt}: {e}") from None
        vals: dict = {}
        try:
            if int(r.get("num_pending") or 0) == 0:
                return vals
            timeout = self.timeout or self.c.timeout
            nc = self.c.nc
            sub = await nc.subscribe(nc.new_inbox(), pending_msgs_limit=-1, pending_bytes_limit=-1)
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout

                async def pull() -> None:
                    req = {"batch": 256, "expires": int(max(timeout - 0.1, 0.1) * 1e9)}
                    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{name}", json.dumps(req).encode(), reply=sub.subject)

                await pull()
                while True:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise Unavailable(f"the initial values of {filt} did not arrive within {timeout:g}s")
                    try:
                        msg = await sub.next_msg(timeout=left)
                    except nats.errors.TimeoutError:
                        continue
                    hdr = msg.headers or {}
                    st = hdr.get("Status")
                    if st:
                        if st == "100":  # a heartbeat
                            continue
                        if st in ("404", "408", "409"):  # the pull ended before the last value: again
                            await pull()
                            continue
                        raise Unavailable(f"watch {filt}: status {st} {hdr.get('Description', '')}".strip())
                    ack = parse_ack(msg.reply.encode()) if msg.reply else None
                    if ack is None or ack[0] != name:
                        continue
                    key = msg.subject[len(self.prefix):]
                    op = hdr.get("KV-Operation", "")
                    if op in ("DEL", "PURGE"):
                        vals.pop(key, None)
                    else:
                        vals[key] = KVEntry(key, bytes(msg.data), ack[1], op, "")
                    if ack[4] == 0:
                        return vals
            finally:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - closed connection: nothing to undo
                    pass
        finally:
            asyncio.ensure_future(self._drop_consumer(name))

    async def _drop_consumer(self, name: str) -> None:
        try:
            await js_request(self.c, f"$JS.API.CONSUMER.DELETE.{self.stream}.{name}", timeout=2.0)
        except Exception:  # noqa: BLE001 - it goes by its inactive threshold anyway
            pass


def is_timeout(e: BaseException) -> bool:
    return isinstance(e, (asyncio.TimeoutError, nats.errors.TimeoutError))
