"""The sticky assignor (spec/protocol.md §6.2.1) in this SDK's consumer, against a real broker:
two Python members of a sticky group on a linear-murmur2 topic of 4 partitions keep every key on
its member when the topic grows to 8 (the leader's record says moved 0, and each member owns the
children of its partitions); a member that asks for another assignor is refused. Before, the
consumer refused every sticky group (unsupported)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import pctl
from groups import produce


async def _until(cond, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what()}")
        await asyncio.sleep(0.05)


def test_expansion_under_linear_hashing_moves_no_key(broker):
    topic = broker.create_topic(4, "linear-murmur2")

    async def go():
        await produce(broker, topic, [(f"k{i % 50}".encode(), f"{i}".encode()) for i in range(200)])
        async with await pctl.connect(broker.url, broker.consumer) as c:
            a = await c.consumer(topic, "sg", member="a", from_beginning=True, heartbeat=0.15, assignor="sticky")
            b = await c.consumer(topic, "sg", member="b", from_beginning=True, heartbeat=0.15, assignor="sticky")
            members = {"a": a, "b": b}
            grown = [False]
            owned_before: dict = {}
            misses: list = []
            keys_after: set = set()
            delivered = [0]

            async def pump(name: str, cn) -> None:
                while True:
                    r = await cn.next(timeout=0.2)
                    if r is None:
                        continue
                    delivered[0] += 1
                    if grown[0]:
                        keys_after.add(r.key)
                        # Linear hashing 4 -> 8: a key of partition q in epoch 2 was in q mod 4 in epoch 1.
                        if r.partition % 4 not in owned_before[name]:
                            misses.append(f"{r.key!r} (partition {r.partition}, epoch {r.epoch}) by {name}")

            tasks = [asyncio.ensure_future(pump(n, cn)) for n, cn in members.items()]
            t = (await c.topic(topic))
            last: list = [None]

            async def record():
                e = await a._kv.get(f"{t.id}.sg.g.assignment")
                last[0] = None if e is None else json.loads(e.value)
                return last[0]

            try:
                async def settled() -> bool:
                    r = await record()
                    return r is not None and len(r["members"]) == 2 and all(len(cn.assignment) == 2 for cn in members.values())
                await _until(settled, 60, lambda: f"two members with 2 partitions each: record {last[0]}, owned {[cn.assignment for cn in members.values()]}")
                await _until(lambda: asyncio.sleep(0, delivered[0] >= 200), 60, lambda: f"200 deliveries, have {delivered[0]}")
                owned_before.update({n: list(cn.assignment) for n, cn in members.items()})
                want = {n: sorted(qs + [q + 4 for q in qs]) for n, qs in owned_before.items()}
                grown[0] = True
                await asyncio.to_thread(broker.pctl, "topic", "expand", topic, "--partitions", "8")
                await produce(broker, topic, [(f"k{i % 50}".encode(), f"{i}".encode()) for i in range(200, 400)])

                async def expanded() -> bool:
                    r = await record()
                    return r is not None and r["epoch"] == 2 and all(cn.assignment == want[n] for n, cn in members.items())
                await _until(expanded, 60, lambda: f"the children assigned to their parents' owners {want}: record {last[0]}, owned {[cn.assignment for cn in members.values()]}")
                await _until(lambda: asyncio.sleep(0, delivered[0] >= 400), 60, lambda: f"400 deliveries, have {delivered[0]}")
                rec = await record()
                stats = [cn.stats for cn in members.values()]
                with pytest.raises(pctl.Conflict, match="sticky"):
                    await c.consumer(topic, "sg", member="c", assignor="modulo")
            finally:
                for tk in tasks:
                    tk.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await a.close()
                await b.close()
            return rec, misses, keys_after, stats

    rec, misses, keys_after, stats = asyncio.run(go())
    assert rec["assignor"] == "sticky" and rec["partitions"] == list(range(8))
    assert rec["moved"] == 0, rec
    assert rec["history"][-1]["moved"] == 0
    assert len(keys_after) == 50
    assert misses == [], "keys delivered after the expansion by a member that did not hold them"
    assert sum(s.assignments for s in stats) >= 2
