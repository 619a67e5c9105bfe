"""JetStream fast batches on the wire (nats-server 2.14+), as spec/protocol.md §5.1.1 pins them:
the reply subject that makes a publish part of a batch, the server's replies, the stored message
read back from a stream leader, and a record's identity check. No state: the producer's sinks
(producer.py) own the protocol."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import struct
from typing import Any, Optional

from . import _nats, wire

# Fast-batch operations, the <op> token of the reply subject.
OP_START = 0  # first message (batch seq 1), stored
OP_APPEND = 1  # a further message, stored
OP_COMMIT = 2  # stored and commits the batch
OP_EOB = 3  # end-of-batch commit: no data, not stored, batch seq one above the last record's
OP_PING = 4

# JetStream API error codes the producer acts on (§5.1.1).
ERR_TOO_LARGE = 10054
ERR_DUP_CONFLICT = 10071
ERR_BATCH_DISABLED = 10205
ERR_BAD_PATTERN = 10206
ERR_BAD_BATCH_ID = 10207
ERR_UNKNOWN_BATCH = 10208
ERR_TOO_MANY_OPEN = 10211
ERR_NO_MESSAGE = 10037
ERR_STREAM_NOT_FOUND = 10059

HEADER_FENCE = "Pctl-Fence"

# Reply kinds.
FLOW_ACK, GAP, FLOW_ERR, PUBACK, REFUSAL, NO_RESPONDERS, GARBAGE = range(7)
KIND_NAMES = ("flow ack", "gap", "error", "PubAck", "refusal", "no responders", "unparsable reply")


def reply_subject(inbox: str, batch: str, flow: int, seq: int, op: int) -> str:
    """`<inbox>.<batch id>.<flow>.fail.<batch seq>.<op>.$FI` (gap mode always fail)."""
    return f"{inbox}.{batch}.{flow}.fail.{seq}.{op}.$FI"


def parse_subject(prefix: str, subject: str) -> Optional[tuple]:
    """(batch id, batch seq, op) of a reply subject under `prefix` (the inbox and a dot)."""
    if not subject.startswith(prefix) or not subject.endswith(".$FI"):
        return None
    parts = subject[len(prefix):-4].split(".")
    if len(parts) != 5 or parts[2] != "fail":
        return None
    try:
        return parts[0], int(parts[3]), int(parts[4])
    except ValueError:
        return None


class Reply:
    """One server reply about a message of a fast batch."""
    __slots__ = ("batch", "seq", "op", "kind", "ack_seq", "gap_expected", "gap_got", "err_code", "err_text", "stream",
                 "stream_seq", "count", "ack_batch", "duplicate")

    def __init__(self, batch: str, seq: int, op: int):
        self.batch, self.seq, self.op, self.kind = batch, seq, op, GARBAGE
        self.ack_seq = self.gap_expected = self.gap_got = self.err_code = self.stream_seq = self.count = 0
        self.err_text = self.stream = self.ack_batch = ""
        self.duplicate = False


def parse_reply(batch: str, seq: int, op: int, data: bytes, hdr: Optional[bytes]) -> Reply:
    r = Reply(batch, seq, op)
    if not data and hdr:
        status, _, _ = _nats.parse_header_block(hdr)
        if status == 503:
            r.kind = NO_RESPONDERS
            return r
    try:
        body = json.loads(data)
    except ValueError as e:
        r.err_text = f"unparsable reply: {e}"
        return r
    if not isinstance(body, dict):
        r.err_text = "reply is not a JSON object"
        return r
    t = body.get("type") or ""
    err = body.get("error")
    try:
        if t == "ack":
            r.kind, r.ack_seq = FLOW_ACK, int(body.get("seq") or 0)
        elif t == "gap":
            r.kind, r.gap_expected, r.gap_got = GAP, int(body.get("last_seq") or 0), int(body.get("seq") or 0)
        elif t == "err":
            r.kind, r.gap_got = FLOW_ERR, int(body.get("seq") or 0)
            if isinstance(err, dict):
                r.err_code, r.err_text = int(err.get("err_code") or 0), str(err.get("description") or "")
        elif t:
            r.err_text = f"unknown reply type {t!r}"
        elif isinstance(err, dict):
            r.kind, r.err_code, r.err_text = REFUSAL, int(err.get("err_code") or 0), str(err.get("description") or "")
            r.stream = str(body.get("stream") or "")
        elif body.get("stream"):
            r.kind, r.stream, r.stream_seq = PUBACK, str(body["stream"]), int(body.get("seq") or 0)
            r.count, r.ack_batch, r.duplicate = int(body.get("count") or 0), str(body.get("batch") or ""), bool(body.get("duplicate"))
        else:
            r.err_text = "reply without type, error or stream"
    except (TypeError, ValueError) as e:
        r.kind, r.err_text = GARBAGE, f"bad reply field: {e}"
    return r


def random_hex(n: int) -> str:
    """n random bytes from the OS's secure source as 2n lowercase hex digits."""
    return secrets.token_hex(n)


def new_token() -> str:
    """A record's random token (§5.1: 32 lowercase hex digits)."""
    return secrets.token_hex(16)


def record_token(key: Optional[bytes], value: bytes) -> str:
    """The content token of §5.2 (`RecordToken` in Go): the first 32 hex digits of SHA-256 over
    "pctl-record-v1", a zero byte, "k" + 4-byte big-endian key length + key (or "n" when
    keyless), then the value."""
    h = hashlib.sha256(b"pctl-record-v1\x00")
    if key is None:
        h.update(b"n")
    else:
        h.update(b"k" + struct.pack(">I", len(key)) + key)
    h.update(value)
    return h.hexdigest()[:32]


class StoredMsg:
    """A stored message read back with $JS.API.STREAM.MSG.GET (answered by the stream leader)."""
    __slots__ = ("seq", "subject", "headers", "data")

    def __init__(self, seq: int, subject: str, headers: list, data: bytes):
        self.seq, self.subject, self.headers, self.data = seq, subject, headers, data

    def values(self, name: str) -> list:
        return [v for k, v in self.headers if k == name]

    def get(self, name: str) -> str:
        for k, v in self.headers:
            if k == name:
                return v
        return ""


def parse_msg_get(data: bytes) -> Any:
    """A StoredMsg, None for "no message" (10037), or an (err_code, description) tuple."""
    try:
        resp = json.loads(data)
    except ValueError as e:
        return (0, f"unparsable answer: {e}")
    err = resp.get("error")
    if err:
        code = int(err.get("err_code") or 0)
        if code == ERR_NO_MESSAGE:
            return None
        return (code, str(err.get("description") or ""))
    m = resp.get("message")
    if not m:
        return (0, "empty answer")
    hdrs = base64.b64decode(m["hdrs"]) if m.get("hdrs") else b""
    _, _, hs = _nats.parse_header_block(hdrs)
    return StoredMsg(int(m.get("seq") or 0), str(m.get("subject") or ""), hs,
                     base64.b64decode(m["data"]) if m.get("data") else b"")


def same_record(m: Optional[StoredMsg], producer: str, seq: str, msg_id: str, key_hdr: Optional[str], value: bytes) -> bool:
    """Whether a stored message is this record: Pctl-Producer, Pctl-Seq, Nats-Msg-Id and Pctl-Key
    header for header, the value byte for byte, and no fence marker (§5.1.2)."""
    if m is None or m.get(HEADER_FENCE):
        return False
    if m.get(wire.HEADER_PRODUCER) != producer or m.get(wire.HEADER_SEQ) != seq or m.get(wire.HEADER_MSG_ID) != msg_id:
        return False
    keys = m.values(wire.HEADER_KEY)
    if key_hdr is None:
        if keys:
            return False
    elif keys != [key_hdr]:
        return False
    return m.data == value
