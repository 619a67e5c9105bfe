"""The sticky assignor's rebalance takes one view of the descriptor (spec/protocol.md §6.2.1, "One
view per rebalance"), against a real broker: one sticky member of a linear-murmur2 topic of 4
partitions; while its rebalance reads g.assignment, the topic grows to 8 and the consumer's
descriptor watch delivers epoch 2 before the read returns. Every record written to g.assignment
must have exactly the assignable partitions of its own epoch. Before, the rebalance computed the
assignable partitions before that read and the epoch after it, so the leader wrote a record with
epoch 2 and epoch 1's partitions [0..3]; the next record, finding the same epoch, spread 4..7 over
the members by count instead of giving each child to its parent's owner (§6.2.1 step 2).

The only thing wrapped is the consumer's real KV object's ``get``: the real read runs, then the
test expands the topic through the broker and waits for the consumer's own descriptor to show the
new epoch, then returns the real answer. The records are read with a real JetStream watch of the
key (an ordered consumer, every revision from the first)."""

from __future__ import annotations

import asyncio
import json
import time

import nats
from nats.js.api import DeliverPolicy

import pctl
from pctl.consumer import GROUPS_BUCKET


async def _until(cond, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what()}")
        await asyncio.sleep(0.05)


def test_epoch_change_during_the_record_read_is_the_next_rebalances(broker):
    topic = broker.create_topic(4, "linear-murmur2")
    assignable = {1: list(range(4)), 2: list(range(8))}

    async def go():
        records: list = []
        nc = await nats.connect(broker.url, nkeys_seed=broker.admin)
        try:
            async with await pctl.connect(broker.url, broker.consumer) as c:
                tid = (await c.topic(topic)).id
                subject = f"$KV.{GROUPS_BUCKET}.{tid}.sg.g.assignment"

                async def on_record(msg) -> None:
                    op = (msg.headers or {}).get("KV-Operation", "")
                    records.append({"op": op} if op else json.loads(msg.data))

                js = nc.jetstream()
                watch = await js.subscribe(subject, stream=f"KV_{GROUPS_BUCKET}", cb=on_record, ordered_consumer=True,
                                           deliver_policy=DeliverPolicy.ALL)
                cn = await c.consumer(topic, "sg", member="a", from_beginning=True, heartbeat=0.15, assignor="sticky")
                real_get = cn._kv.get
                armed, tripped, seen_inside = [False], [False], [None]

                async def get(key: str):
                    e = await real_get(key)
                    if armed[0] and key.endswith("g.assignment"):
                        armed[0] = False
                        await asyncio.to_thread(broker.pctl, "topic", "expand", topic, "--partitions", "8")
                        await _until(lambda: cn._desc.current.epoch == 2, 30,
                                     lambda: f"the consumer's descriptor at epoch 2 (it is at {cn._desc.current.epoch})")
                        seen_inside[0] = cn._desc.current.epoch
                        tripped[0] = True
                    return e

                cn._kv.get = get

                async def pump() -> None:
                    while True:
                        await cn.next(timeout=0.2)

                task = asyncio.ensure_future(pump())
                try:
                    await _until(lambda: records and cn._record is not None and cn.assignment == [0, 1, 2, 3], 60,
                                 lambda: f"the first record (records {records}, owned {cn.assignment})")
                    assert records[0]["epoch"] == 1 and records[0]["partitions"] == [0, 1, 2, 3], records
                    armed[0] = True  # the heartbeat loop asks for a rebalance every heartbeat
                    await _until(lambda: tripped[0], 30, lambda: "a rebalance reading g.assignment")

                    def final() -> bool:
                        r = records[-1]
                        return r.get("epoch") == 2 and r.get("partitions") == list(range(8))
                    await _until(final, 60, lambda: f"a record of epoch 2 with partitions 0..7 (records {records})")
                    await _until(lambda: cn.assignment == list(range(8)), 60, lambda: f"partitions 0..7 owned (owned {cn.assignment})")
                    await asyncio.sleep(1.0)  # a few more rebalances: a record after the right one would show here
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    await cn.close()
                    await watch.unsubscribe()
        finally:
            await nc.close()
        return records, seen_inside[0]

    records, seen_inside = asyncio.run(go())
    assert seen_inside == 2, "the descriptor watch delivered epoch 2 while the record was being read"
    wrong = [r for r in records if r.get("partitions") != assignable.get(r.get("epoch"))]
    assert wrong == [], f"records whose partitions are not their epoch's assignable partitions: {wrong} (all: {records})"
    last = records[-1]
    assert last["epoch"] == 2 and last["partitions"] == list(range(8)), records
    assert last["moved"] == 0, last
