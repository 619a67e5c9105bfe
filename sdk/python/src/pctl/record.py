"""Records as consumers see them, application headers and timestamps (spec/protocol.md §5.3)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from .errors import BadRequest

HEADER_TIME = "Pctl-Time"
HEADER_FENCE = "Pctl-Fence"
MAX_TIME_MS = (1 << 53) - 1
MAX_HEADER_BYTES = 65536  # the application headers of a record, as "<name>: <value>\r\n" lines

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_BAD_VALUE_RE = re.compile(r"[\x00-\x1f\x7f]")

HeadersArg = Union[Mapping[str, Union[str, Sequence[str]]], Iterable[tuple], None]
"""Application headers as a producer takes them: a mapping from name to a value or a list of
values, or (name, value) pairs (a name may repeat; values of one name keep their order)."""


def check_headers(headers: HeadersArg) -> list:
    """The application headers as (name, value) pairs, checked against spec/protocol.md §5.3.
    Raises :class:`pctl.BadRequest` naming the first bad name or value."""
    if not headers:
        return []
    pairs: list = []
    items = headers.items() if isinstance(headers, Mapping) else headers
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise BadRequest(f"headers: {item!r} is not a (name, value) pair") from None
        if isinstance(value, (list, tuple)):
            pairs.extend((name, v) for v in value)
        else:
            pairs.append((name, value))
    size = 0
    for name, value in pairs:
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise BadRequest(f"header name {name!r}: 1 to 128 characters of A-Z a-z 0-9 _ . - (spec/protocol.md §5.3)")
        low = name.lower()
        if low.startswith("pctl-") or low.startswith("nats-"):
            raise BadRequest(f"header name {name!r} is reserved: names starting with Pctl- or Nats- belong to pctl and JetStream; choose another name")
        if not isinstance(value, str):
            raise BadRequest(f"header {name}: the value is a str, not {type(value).__name__} (encode binary data, e.g. as base64)")
        if _BAD_VALUE_RE.search(value) or value != value.strip(" "):
            raise BadRequest(f"header {name}: value {value[:40]!r} has a control character or leading/trailing spaces, which NATS headers cannot carry")
        size += len(name) + 4 + len(value.encode("utf-8"))
    if size > MAX_HEADER_BYTES:
        raise BadRequest(f"application headers of {size} bytes; a record carries at most {MAX_HEADER_BYTES} bytes of them (spec/protocol.md §5.3)")
    return pairs


def check_time(t: Union[int, float, datetime, None]) -> Optional[int]:
    """A record timestamp in unix milliseconds from an int (ms), a float (seconds) or an aware
    datetime; None stays None. Raises BadRequest outside [0, 2^53)."""
    if t is None:
        return None
    if isinstance(t, bool):
        raise BadRequest("timestamp: give unix milliseconds (int), unix seconds (float) or an aware datetime")
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise BadRequest("timestamp: a naive datetime has no time zone; give an aware one (e.g. datetime.now(timezone.utc))")
        ms = int(t.timestamp() * 1000)
    elif isinstance(t, int):
        ms = t
    elif isinstance(t, float):
        ms = int(t * 1000)
    else:
        raise BadRequest(f"timestamp: {type(t).__name__}; give unix milliseconds (int), unix seconds (float) or an aware datetime")
    if not 0 <= ms <= MAX_TIME_MS:
        raise BadRequest(f"timestamp {ms} ms is outside [0, 2^53) ms (spec/protocol.md §5.3)")
    return ms


def parse_time(v: str) -> Optional[int]:
    """A Pctl-Time value, or None when malformed (then the store time is the timestamp)."""
    if not v.isdigit() or (len(v) > 1 and v[0] == "0") or len(v) > 16:
        return None
    t = int(v)
    return t if t <= MAX_TIME_MS else None


try:
    binascii.a2b_base64(b"", strict_mode=True)  # type: ignore[call-arg]

    def _b64(s: str) -> bytes:
        return binascii.a2b_base64(s.encode("ascii"), strict_mode=True)  # type: ignore[call-arg]
except TypeError:  # Python 3.10: no strict mode
    def _b64(s: str) -> bytes:
        return base64.b64decode(s, validate=True)


def decode_key(v: str) -> Optional[bytes]:
    """A Pctl-Key header's key, or None when it is not b64:<standard base64>."""
    if not v.startswith("b64:"):
        return None
    try:
        return _b64(v[4:])
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


@dataclass(frozen=True)
class KeyChange:
    """Keys that move between partitions at an epoch change: KIP-253's key-level rebalance listener.

    ``on_keys_revoked`` gets one on the member that owns the old `partition`, after it delivered
    (and the application acknowledged) all its records of `from_epoch`, before the group can deliver
    any moved key's record of `to_epoch`. ``on_keys_assigned`` gets one on the member that owns the
    new `partition` before it delivers the first record of a key that moved there from `parent`.
    ``moved(key)`` says whether a key is one of them (it runs the epochs' partitioners)."""
    topic: str
    from_epoch: int
    to_epoch: int
    partition: int
    parent: int
    moved: Callable[[bytes], bool] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Misplacement:
    """Why a record is not where its key belongs (spec/protocol.md §6.8): `expected` is the
    partition the record's epoch's partitioner gives its key, or -1 when the record has no usable
    key or epoch (`reason` says which)."""
    expected: int
    reason: str


class Record:
    """A record delivered to a consumer-group member.

    - `key`: bytes, or None for a keyless record (the empty key ``b""`` is a key);
    - `headers`: the application headers, name -> list of values (spec/protocol.md §5.3);
      ``header(name)`` gives the first value;
    - `timestamp`: unix milliseconds, the producer's ``Pctl-Time``, else when the stream stored the
      record; `stored_ns`: when the stream stored it, unix nanoseconds;
    - `partition`, `epoch`, `seq` (stream sequence in the partition's stream), `producer` and
      `producer_seq` (its ``Pctl-Producer``/``Pctl-Seq``, "" and 0 when absent);
    - `misplaced`: a :class:`Misplacement` when the record is stored outside its key's partition
      and the member delivers such records (``misplaced="deliver"``), else None. No order is
      promised for a misplaced record's key;
    - `tombstone`: the record deletes its key (spec/protocol.md §10.2); its value is not a value;
    - `backfill`: on a backfilled copy the group delivers (spec/protocol.md §10.4), the record it
      copies as (epoch, partition, seq), else None. A group delivers a copy only when it cannot
      have delivered the original (it started at the current epoch, or the original's epoch was
      retired)."""

    __slots__ = ("topic", "partition", "epoch", "seq", "key", "value", "headers", "timestamp", "stored_ns", "producer",
                 "producer_seq", "misplaced", "tombstone", "backfill", "_owner")

    def __init__(self, topic: str, partition: int, epoch: int, seq: int, key: Optional[bytes], value: bytes,
                 headers: dict, timestamp: int, stored_ns: int, producer: str, producer_seq: int, owner: int = 0):
        self.topic, self.partition, self.epoch, self.seq = topic, partition, epoch, seq
        self.key, self.value, self.headers = key, value, headers
        self.timestamp, self.stored_ns = timestamp, stored_ns
        self.producer, self.producer_seq = producer, producer_seq
        self.misplaced: Optional[Misplacement] = None
        self.tombstone = False
        self.backfill: Optional[tuple] = None
        self._owner = owner  # which ownership of the partition delivered it (for commit)

    def header(self, name: str, default: Optional[str] = None) -> Optional[str]:
        v = self.headers.get(name)
        return v[0] if v else default

    @property
    def time(self) -> datetime:
        """`timestamp` as an aware datetime (UTC)."""
        return datetime.fromtimestamp(self.timestamp / 1000, tz=timezone.utc)

    @property
    def stored_time(self) -> datetime:
        return datetime.fromtimestamp(self.stored_ns / 1e9, tz=timezone.utc)

    def __repr__(self) -> str:
        k = "keyless" if self.key is None else repr(self.key)
        return (f"Record({self.topic} p{self.partition} e{self.epoch} seq {self.seq} key {k} "
                f"value {self.value[:40]!r}{'...' if len(self.value) > 40 else ''})")
