"""Compacted topics (spec/protocol.md §10): the key token of a record subject, tombstone headers,
backfilled copies' origins and the descriptor facts a consumer needs (the backfill running,
retired epochs, where the current epoch starts in a stream). Pure functions."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Optional

from . import wire

MAX_DIRECT_KEY_TOKEN = 128
"""The longest key encoded directly in a key token (§10.1); longer keys go by their SHA-256."""

HEADER_TOMBSTONE = "Pctl-Tombstone"
HEADER_BACKFILL = "Pctl-Backfill"
HEADER_TTL = "Nats-TTL"

_ORIGIN_RE = re.compile(r"([0-9]+)/([0-9]+)/([0-9]+)")


def key_token(key: bytes) -> str:
    """A compacted topic's subject token for a key: "k" + base64url without padding of a key of
    at most 128 bytes, else "h" + base64url of its SHA-256 (§10.1)."""
    if len(key) <= MAX_DIRECT_KEY_TOKEN:
        return "k" + base64.urlsafe_b64encode(key).decode("ascii").rstrip("=")
    return "h" + base64.urlsafe_b64encode(hashlib.sha256(key).digest()).decode("ascii").rstrip("=")


def key_subjects(desc: Optional[dict]) -> bool:
    """Whether a topic's record subjects carry key tokens (spec/protocol.md §10.1): a compacted
    topic, or a plain topic with backfill. Every subject decision asks this, never "compact"
    alone (Go: wire.Topic.KeySubjects). desc is the raw descriptor."""
    return bool(desc and (desc.get("compact") or desc.get("backfill")))


def record_subject(topic: str, epoch: int, partition: int, compact: bool, key: Optional[bytes]) -> str:
    """The subject of a record of (topic, epoch, partition): with the key's token on a compacted topic."""
    s = wire.data_subject(topic, epoch, partition)
    return f"{s}.{key_token(key or b'')}" if compact else s


def batch_end_subject(topic: str, epoch: int, partition: int, compact: bool) -> str:
    """Where a fast batch's EOB goes (§10.1): the partition subject, or on a compacted topic that
    subject with the token "end" (no key token or fence marker's token is "end")."""
    s = wire.data_subject(topic, epoch, partition)
    return s + ".end" if compact else s


def tombstone_ttl(compact: dict) -> str:
    """The Nats-TTL of a compacted topic's tombstone (§10.2): its delete retention in seconds, at least 1."""
    return str(max(int(compact.get("delete_retention_ms") or 0) // 1000, 1))


def parse_origin(v: Optional[str]) -> Optional[tuple]:
    """A Pctl-Backfill value "<epoch>/<partition>/<seq>" as (epoch, partition, seq), or None when it
    is not one (epoch > 0)."""
    m = _ORIGIN_RE.fullmatch(v or "")
    if m is None:
        return None
    e, q, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
    return (e, q, s) if e > 0 and s < 1 << 64 else None


def backfilling(raw: dict) -> Optional[dict]:
    """The descriptor epoch (raw JSON) whose backfill runs, or None (§10.3)."""
    for e in raw.get("epochs") or []:
        if (e.get("backfill") or {}).get("state") == "running":
            return e
    return None


def origin_retired(raw: dict, e: int) -> bool:
    """Whether epoch e's records are retired or being retired (§10.7): a backfilled copy of one of
    them is then delivered (§10.4)."""
    retiring = raw.get("retiring")
    if retiring and e <= int(retiring.get("through") or 0):
        return True
    eps = raw.get("epochs") or []
    if eps and e < int(eps[0]["epoch"]):
        return True
    return any(int(x["epoch"]) == e and x.get("retired") for x in eps)


def current_epoch_start(raw: dict, q: int) -> int:
    """The position at which a group that reads the current epoch alone starts in stream q
    (§10.5): the sequence of the last fence marker q has (max boundary + 1), 0 if none."""
    pos = 0
    for e in raw.get("epochs") or []:
        b = e.get("boundaries") or []
        if q < len(b) and int(b[q]) + 1 > pos:
            pos = int(b[q]) + 1
    return pos


def superseded_in_batch(keys: list, start: int, found: dict) -> None:
    """A batch read back on a compacted topic (§10.1): a record not found counts as stored when a
    later record of the same key in the batch was found (storing that one removed it). keys[i]
    is record i's key (None: keyless); found (index -> sequence) gets the superseded ones at 0."""
    later: set = set()
    for i in range(len(keys) - 1, start - 1, -1):
        k = keys[i]
        if i in found:
            if k is not None:
                later.add(k)
            continue
        if k is not None and k in later:
            found[i] = 0
