"""Parent-first replay (spec/protocol.md §6.7) against a real broker: a topic written through two
epoch changes (2 partitions, grown to 4, then the function swapped to jump) replayed from the
beginning by a group of two members (the second joins once the first holds every partition), with a slow parent (every epoch-1 record of partition 0 takes
a millisecond), so that children are ready long before their parents drain.

Checked from the deliveries alone (where the broker stored each record, not the SDK's
partitioners): per-key order, and that no record of a key was delivered before every record of the
key's partition in an older epoch had been (the gate); and, through the member's internal take
hook, that each rebalance took its partitions grouped by the epoch of the record each reads next
(that epoch taken from the deliveries: the first record delivered after the position), one group
per epoch, oldest first. The control with gating off must fail the gate check."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

import pctl
import pctl._nats
from groups import order_violations, produce

KEYS = 40


def _records(rounds: range) -> list:
    return [(f"k{k}".encode(), f"{i}".encode()) for i in rounds for k in range(KEYS)]


def delivered_before_parents(first: list) -> list:
    """The first deliveries (epoch, partition, seq, key) of a key's record of epoch x in partition
    c that came before the last delivery of an epoch-e record (e < x) of partition q != c, where q
    held the key's epoch-e records: q had not drained yet."""
    home: dict = {}
    last: dict = {}
    for i, (e, p, _, k) in enumerate(first):
        home[(e, k)] = p
        last[(e, p)] = i
    out = []
    for i, (x, c, seq, k) in enumerate(first):
        for e in range(1, x):
            q = home.get((e, k))
            if q is not None and q != c and i < last[(e, q)]:
                out.append(f"key {k!r} epoch {x} partition {c} seq {seq}, delivered before partition {q} drained epoch {e}")
                break
    return out


def take_violations(takes: list, first: list, newest: int) -> tuple:
    """For each (member, round): the epoch each taken partition reads next (the epoch of the first
    record delivered after its position; `newest` when none came) must be one per group and rise
    from group to group. Returns (violations, rounds that took partitions of two or more epochs)."""
    after: dict = {}
    for e, p, seq, _ in first:
        after.setdefault(p, []).append((seq, e))
    for v in after.values():
        v.sort()

    def next_epoch(q: int, pos: int) -> int:
        return next((e for seq, e in after.get(q, []) if seq > pos), newest)

    rounds: dict = {}
    for member, rnd, group in takes:
        rounds.setdefault((member, rnd), []).append([(q, pos, next_epoch(q, pos)) for q, pos in group])
    bad, mixed = [], 0
    for (member, rnd), groups in sorted(rounds.items()):
        epochs = []
        for g in groups:
            es = {e for _, _, e in g}
            if len(es) != 1:
                bad.append(f"member {member} round {rnd}: one group holds partitions of epochs {sorted(es)}: {g}")
            epochs.append(min(es))
        if epochs != sorted(set(epochs)):
            bad.append(f"member {member} round {rnd}: groups by epoch {epochs}, not one per epoch oldest first: {groups}")
        mixed += len(set(epochs)) > 1
    return bad, mixed


@pytest.mark.parametrize("gating", [True, False], ids=["gated", "control-ungated"])
def test_parent_first_replay_keeps_order_and_takes_parents_first(broker, gating):
    topic = broker.create_topic(2)

    async def go():
        await produce(broker, topic, _records(range(0, 40)))
        await asyncio.to_thread(broker.pctl, "topic", "repartition", topic, "--partitions", "4")
        await produce(broker, topic, _records(range(40, 55)))
        await asyncio.to_thread(broker.pctl, "topic", "repartition", topic, "--partitioner", "jump")
        await produce(broker, topic, _records(range(55, 70)))
        total = 70 * KEYS
        takes: list = []
        got: list = []  # (epoch, partition, seq, key, value) in delivery order, both members
        seen: set = set()
        conns = [await pctl.connect(broker.url, broker.consumer) for _ in range(2)]
        members = []

        async def join(name: str, c) -> None:
            cn = await c.consumer(topic, "pf", member=name, from_beginning=True, heartbeat=0.2, session_timeout=3.0,
                                  gating=gating)
            cn._on_take = lambda rnd, group: takes.append((name, rnd, group))
            members.append(cn)
            while len(seen) < total:
                r = await cn.next(timeout=0.5)
                if r is None:
                    continue
                if r.partition == 0 and r.epoch == 1:
                    await asyncio.sleep(0.001)  # the slow parent
                got.append((r.epoch, r.partition, r.seq, r.key, int(r.value)))
                seen.add((r.epoch, r.partition, r.seq))

        try:
            # Member a takes every partition (two epochs' worth) before b joins and it gives half
            # back: a round with several partitions of one epoch and of two.
            a = asyncio.ensure_future(join("a", conns[0]))
            deadline = time.monotonic() + 30
            while len(got) < 50 and time.monotonic() < deadline and not a.done():
                await asyncio.sleep(0.01)
            await asyncio.wait_for(asyncio.gather(a, join("b", conns[1])), 180)
        finally:
            for cn in members:
                await cn.close()
            for c in conns:
                await c.close()
        return total, takes, got

    total, takes, got = asyncio.run(go())
    first, ids = [], set()
    for e, p, seq, k, v in got:
        if (e, p, seq) not in ids:
            ids.add((e, p, seq))
            first.append((e, p, seq, k, v))
    assert len(first) == total
    early = delivered_before_parents([(e, p, seq, k) for e, p, seq, k, _ in first])
    if not gating:
        assert early, "gating off: the gate check must fail here, or it proves nothing"
        return
    assert early == [], f"{len(early)} records delivered before their parents drained, e.g. {early[:3]}"
    ds = [{"key": k.decode(), "value": str(v), "producer": "p", "pseq": (e, p, seq)} for e, p, seq, k, v in first]
    assert order_violations(ds) == [], "per-key order"
    bad, mixed = take_violations(takes, [(e, p, seq, k) for e, p, seq, k, _ in first], newest=3)
    assert bad == [], bad
    assert mixed > 0, f"no rebalance took partitions of two epochs, so the order was not tested: {takes}"
    assert max(len(g) for _, _, g in takes) > 1, f"no group of two partitions, so 'together' was not tested: {takes}"


def test_a_release_after_an_unanswered_commit_frees_the_partition(broker):
    """spec §6.3: a release whose compare-and-set fails on the member's own unanswered commit
    reads the key and, finding exactly that commit's bytes, releases from its revision. Before,
    the release failed and the partitions stayed leased to the member until the lease expired
    (what a member joining then waited for). Every commit's answer is taken as lost here."""
    topic = broker.create_topic(2)
    n = 100

    async def go():
        await produce(broker, topic, [(f"k{i % 7}".encode(), f"{i}".encode()) for i in range(n)])
        logs: list = []
        async with await pctl.connect(broker.url, broker.consumer) as c:
            cn = await c.consumer(topic, "relunsure", from_beginning=True, commit_interval=0.02, session_timeout=30.0,
                                  logf=logs.append)
            commits = [0]

            def lose() -> bool:
                commits[0] += 1
                return True

            cn._lose_commit_answer = lose
            for _ in range(n):
                assert await cn.next(timeout=15) is not None
            await cn.next(timeout=0.5)  # acknowledges the last record
            seen = commits[0]
            deadline = time.monotonic() + 10
            while commits[0] < seen + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await cn.close()
            kv = pctl._nats.KV(c, "pctl-groups")
            owners = {}
            for q in range(2):
                e = await kv.get(f"{cn.topic_id}.relunsure.p.{q}")
                owners[q] = e and json.loads(e.value).get("owner", "")
        return owners, logs, commits[0]

    owners, logs, commits = asyncio.run(go())
    assert commits > 0
    assert owners == {0: "", 1: ""}, f"partitions still leased after the release: {owners}"
    assert any("releasing from it" in line for line in logs), "the release never met its own unanswered commit"
