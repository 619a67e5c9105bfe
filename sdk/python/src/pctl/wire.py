"""pctl's protocol on NATS (spec/protocol.md): names, headers and the topic descriptor."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import BadRequest

# Subjects and names (spec/protocol.md §2).
DATA_PREFIX = "pctl.data"
API_TOPIC_GET = "pctl.api.topic.get"
API_TOPIC_LIST = "pctl.api.topic.list"
API_PLUGIN_GET = "pctl.api.plugin.get"
API_PLUGIN_INFO = "pctl.api.plugin.info"
STREAM_PREFIX = "PCTL_"

# Record headers (§5.1) and the API's error header (§3).
HEADER_KEY = "Pctl-Key"
HEADER_PRODUCER = "Pctl-Producer"
HEADER_SEQ = "Pctl-Seq"
HEADER_MSG_ID = "Nats-Msg-Id"
HEADER_ERROR = "Pctl-Error"
HEADER_DIGEST = "Pctl-Digest"

_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_name(what: str, name: str) -> str:
    """Checks a topic name or a producer id: 1 to 64 of [A-Za-z0-9_-] (§2)."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise BadRequest(f"{what} {name!r}: 1 to 64 characters of A-Z a-z 0-9 _ - (spec/protocol.md §2)")
    return name


def data_subject(topic: str, epoch: int, partition: int) -> str:
    """The subject of a record of (topic, epoch, partition): pctl.data.<topic>.<epoch>.<partition>."""
    return f"{DATA_PREFIX}.{topic}.{epoch}.{partition}"


def stream_name(topic: str, partition: int) -> str:
    """The JetStream stream of a partition, for the topic's whole life: PCTL_<topic>_<partition>."""
    return f"{STREAM_PREFIX}{topic}_{partition}"


def encode_key(key: bytes) -> str:
    """The Pctl-Key header of a key: "b64:" + standard base64 (the empty key is "b64:")."""
    return "b64:" + base64.b64encode(key).decode("ascii")


def decode_key(value: str) -> bytes:
    if not value.startswith("b64:"):
        raise BadRequest(f"{HEADER_KEY} header {value!r} does not start with b64:")
    return base64.b64decode(value[4:], validate=True)


@dataclass(frozen=True)
class PartitionerRef:
    """An epoch's partition function: a module by digest, and its config bytes."""
    name: str
    digest: str
    config: bytes = b""

    @classmethod
    def from_json(cls, d: dict) -> "PartitionerRef":
        cfg = d.get("config")
        return cls(name=d.get("name", ""), digest=d.get("digest", ""), config=base64.b64decode(cfg) if cfg else b"")


@dataclass(frozen=True)
class Epoch:
    """One epoch of a topic: its partitioner and partition count; `boundaries` once it ended."""
    epoch: int
    partitioner: PartitionerRef
    partitions: int
    boundaries: Optional[tuple] = None

    @classmethod
    def from_json(cls, d: dict) -> "Epoch":
        b = d.get("boundaries")
        return cls(epoch=int(d["epoch"]), partitioner=PartitionerRef.from_json(d.get("partitioner") or {}),
                   partitions=int(d["partitions"]), boundaries=tuple(int(x) for x in b) if b else None)


@dataclass(frozen=True)
class Topic:
    """A topic descriptor (spec/protocol.md §4), as `pctl.api.topic.get` returns it."""
    name: str
    id: str
    epochs: tuple
    change: Optional[dict] = None
    creating: bool = False
    deleting: bool = False
    revision: int = 0
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_reply(cls, reply: dict) -> "Topic":
        t = reply.get("topic") or {}
        epochs = tuple(Epoch.from_json(e) for e in t.get("epochs") or [])
        return cls(name=t.get("name", ""), id=t.get("id", ""), epochs=epochs, change=t.get("change"),
                   creating=bool(t.get("creating")), deleting=bool(t.get("deleting")),
                   revision=int(reply.get("revision") or 0), raw=t)

    @property
    def current(self) -> Epoch:
        """The current epoch (the last)."""
        return self.epochs[-1]

    def epoch(self, e: int) -> Optional[Epoch]:
        for x in self.epochs:
            if x.epoch == e:
                return x
        return None


def describe(v: Any) -> str:
    """A short repr for error messages."""
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."
