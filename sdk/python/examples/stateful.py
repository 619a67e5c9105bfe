"""An example stateful processor (spec/protocol.md §6.9): a per-key running total, kept in a local
store (a dict), made durable in a NATS KV bucket (one entry per key), and handed over between the
members of its consumer group with the consumer's ``state`` option (a :class:`pctl.StateHandler`).
tests/test_state.py runs it against a real broker (two members, a third joins, the topic grows
4 -> 8, a member crashes).

Every input record's value is a decimal amount; the processor adds it to its key's total. For each
record it applies it writes the key's new state to the bucket (and waits for the acknowledgement)
before the record is acknowledged (the iterator acknowledges it when asked for the next one), so
the bucket always holds every applied record's effect. The state carries the input record that
last changed it (partition and stream sequence): a record delivered again after a member crash is
recognised and not counted twice (a key's records are redelivered only from their own partition,
after the ones of that partition already applied). ``load`` installs the bucket's state of the
key; ``flush`` only drops keys from the local store, since the bucket already has them::

    store = KV(client, "totals")                      # a bucket that exists
    rt = RunningTotal(store)
    consumer = await client.consumer("payments", "totals", assignor="sticky", state=rt)
    async for record in consumer:
        await rt.handle(record)
"""

from __future__ import annotations

import json
from typing import Any

from pctl import KeySet, Record
from pctl._nats import KV

__all__ = ["KV", "RunningTotal"]


class RunningTotal:
    """One member's running totals: a :class:`pctl.StateHandler` (load, flush) and the record
    handler (handle). `loads=False` makes a wrong processor that does not load a key's state when
    the key arrives (the tests show the checker failing on it)."""

    def __init__(self, store: Any, *, loads: bool = True):
        self.store = store
        self.local: dict[bytes, dict] = {}  # the keys this member holds
        self.loads = loads
        self.stats = {"applied": 0, "duplicates": 0, "loads": 0, "flushes": 0}

    @staticmethod
    def token(key: bytes) -> str:
        """A key as a bucket key (a subject token): its bytes in hex."""
        return "k" + key.hex()

    async def handle(self, r: Record) -> None:
        if r.key is None:
            return
        try:
            amount = int(r.value)
        except ValueError:
            raise ValueError(f"record {r.topic}/{r.partition} seq {r.seq}: value {r.value!r} is not a decimal amount") from None
        st = self.local.get(r.key)
        if st is not None and st["partition"] == r.partition and r.seq <= st["seq"]:
            self.stats["duplicates"] += 1
            return  # applied before a crash, delivered again
        nxt = {"total": (st or {}).get("total", 0) + amount, "count": (st or {}).get("count", 0) + 1,
               "partition": r.partition, "seq": r.seq}
        await self.store.put(self.token(r.key), json.dumps(nxt).encode())
        self.local[r.key] = nxt
        self.stats["applied"] += 1

    async def load(self, ks: KeySet) -> None:
        """Installs the bucket's state of the keys (a key the bucket does not have starts at zero)."""
        self.stats["loads"] += 1
        for k in ks.keys:
            self.local.pop(k, None)
            if not self.loads:
                continue
            e = await self.store.get(self.token(k))
            if e is not None and not e.deleted and e.value:
                self.local[k] = json.loads(e.value)

    async def flush(self, ks: KeySet) -> None:
        """Drops the keys: the bucket already holds their state, written before each acknowledgement."""
        self.stats["flushes"] += 1
        for k in ks.keys:
            self.local.pop(k, None)
