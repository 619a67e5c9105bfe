"""The state handover API (spec/protocol.md §6.9): per-key state callbacks a stateful processor
gives its consumer (``client.consumer(..., state=handler)``), so that "load the state of the keys
arriving, flush the state of the keys leaving" is written once. The consumer decides when (the
rules of §6.9, as pctl's Go client does: client/state.go); this module holds the types."""

from __future__ import annotations

import enum
from typing import Awaitable, Iterable, Protocol, Union, runtime_checkable


class StateReason(str, enum.Enum):
    """Why keys are handed over."""
    KEY_ARRIVES = "key-arrives"
    """The member is about to deliver a record of a key it does not hold (load)."""
    PARTITION_REVOKED = "partition-revoked"
    """The member gives the partition up, or stops, or follows a reset (flush)."""
    KEYS_REVOKED = "keys-revoked"
    """Keys leave the partition at the end of epoch from_epoch for partitions of to_epoch that
    other members own (flush)."""


class KeySet:
    """The keys of one handover: `keys` (bytes, sorted), `topic`, `reason`, `partition`, and for
    KEYS_REVOKED the epoch change (`from_epoch`, `to_epoch`; else None). ``key in ks`` tests
    membership."""

    __slots__ = ("topic", "reason", "partition", "from_epoch", "to_epoch", "keys", "_set")

    def __init__(self, topic: str, reason: StateReason, partition: int, keys: Iterable[bytes],
                 from_epoch: "int | None" = None, to_epoch: "int | None" = None):
        self.topic, self.reason, self.partition = topic, reason, partition
        self.from_epoch, self.to_epoch = from_epoch, to_epoch
        self.keys = sorted(keys)
        self._set = frozenset(self.keys)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            key = key.encode()
        return key in self._set

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return (f"KeySet(topic={self.topic!r}, reason={self.reason.value!r}, partition={self.partition}, "
                f"from_epoch={self.from_epoch}, to_epoch={self.to_epoch}, keys={len(self.keys)})")


@runtime_checkable
class StateHandler(Protocol):
    """A stateful processor's per-key state, as the consumer hands it over between members. The
    consumer calls it in the iterator's task, one call at a time, never while the application has
    a record of a key in the set in hand; the methods may be plain or coroutines:

    - ``load(ks)`` before the member delivers a record of a key it does not hold (ks: that key),
      after the record passed its epoch gate (spec/protocol.md §6.5): every older record of the
      key, in any partition, is then committed by the group. It replaces what the processor has
      for the key with the durable state.
    - ``flush(ks)`` when keys leave the member: after a partition's reading stopped and before it
      is released (the keys held for it), and at keys revoked for the keys that move to a
      partition another member owns, before the member commits past the boundary. When it
      returns their state must be durable; the processor may drop it.

    Keys that move between two partitions this member owns stay held (no flush, no load). A lost
    partition's keys are forgotten without a flush; a seek (reset) flushes every held key. An
    exception from load or flush stops the member (a partition whose flush failed is not
    released: its lease expires). A consumer with a state handler cannot set gating=False."""

    def load(self, ks: KeySet) -> Union[None, Awaitable[None]]: ...

    def flush(self, ks: KeySet) -> Union[None, Awaitable[None]]: ...
