"""Consumer groups whose members are separate processes in two languages — the Python SDK's
`consume` command and Go's `pctl consume` — sharing one topic while a producer writes to it
through a grow, a shrink and a function swap, and while a member is killed with SIGKILL and
another joins late. Checked with `pctl verify` (every acknowledged record delivered, first
deliveries in each producer's order per key) and independently here: per-key order of the merged
deliveries by their timestamps, and every record in its key's partition for its epoch as
`pctl partition` computes it. Needs Go (for pctl); skips honour PCTL_REQUIRE_TOOLCHAINS."""

from __future__ import annotations

import asyncio
import time

import pctl
from groups import Member, merged, misplaced, order_violations, verify, wait_delivered, write_sent


async def produce_through(broker, topic: str, n: int, keys: int, changes: list, chunk: int = 400, pause: float = 0.05,
                          at: list = None, producer_id: str = None) -> tuple:
    """Sends n records (key k<i % keys>, value i) in chunks; runs each change (pctl topic
    repartition arguments) while records are in flight, after the fractions of n in `at`."""
    at = at or [(i + 1) / (len(changes) + 1) for i in range(len(changes))]
    records = [(f"k{i % keys}".encode(), f"{i}".encode()) for i in range(n)]
    async with await pctl.connect(broker.url, broker.producer) as c:
        p = await c.producer(topic, producer_id=producer_id)
        futs = []
        pending_changes = list(zip(at, changes))
        running = None
        started = 0
        newest = [0]  # the newest epoch a record was acknowledged in

        def seen(f: asyncio.Future) -> None:
            if not f.cancelled() and f.exception() is None:
                newest[0] = max(newest[0], f.result().epoch)

        for i in range(0, n, chunk):
            for k, v in records[i:i + chunk]:
                futs.append(await p.send(k, v))
                futs[-1].add_done_callback(seen)
            if pending_changes and i >= pending_changes[0][0] * n:
                # Every epoch gets records: the next change waits (records sent before it stay in
                # flight) until the previous one is done and a record was acknowledged in its epoch.
                while running is not None and not (running.done() and newest[0] >= 1 + started):
                    await asyncio.sleep(0.02)
                _, args = pending_changes.pop(0)
                running = asyncio.ensure_future(asyncio.to_thread(broker.pctl, "topic", "repartition", topic, *args))
                started += 1
            await asyncio.sleep(pause)
        if running is not None:
            await running
        for _, args in pending_changes:
            await asyncio.to_thread(broker.pctl, "topic", "repartition", topic, *args)
        metas = await asyncio.gather(*futs)
        await p.close()
        return records, list(metas), p.id


def check_group(broker, topic, group, members, records, metas, pid, tmp_path) -> None:
    sent = tmp_path / "sent.jsonl"
    write_sent(sent, pid, records, metas)
    want = {(pid, m.producer_seq) for m in metas}
    got = wait_delivered(members, want, timeout=120)
    for m in members:
        m.stop()
    assert want <= got, f"{len(want - got)} acknowledged records never delivered; logs: " + " | ".join(m.log()[-400:] for m in members)
    v = verify(broker, sent, group, members)
    assert v.returncode == 0, f"pctl verify failed:\n{v.stdout}\n{v.stderr}"
    ds = merged(members)
    assert order_violations(ds) == [], "per-key order of the merged deliveries"
    assert misplaced(broker, topic, ds) == [], "every record in its key's partition for its epoch (pctl partition)"


def test_python_and_go_members_share_a_group_through_grow_shrink_and_swap(broker, tmp_path):
    topic = broker.create_topic(3)
    group = "mixed"
    members = [Member(broker, "python", topic, group, tmp_path / "py1.jsonl", "--from-beginning"),
               Member(broker, "python", topic, group, tmp_path / "py2.jsonl", "--from-beginning"),
               Member(broker, "go", topic, group, tmp_path / "go1.jsonl", "--from-beginning")]
    try:
        time.sleep(1.5)
        records, metas, pid = asyncio.run(produce_through(
            broker, topic, 12000, 150,
            [("--partitions", "6"), ("--partitions", "2"), ("--partitions", "4", "--partitioner", "librdkafka-consistent")]))
        check_group(broker, topic, group, members, records, metas, pid, tmp_path)
        per = {m.out.name: len(m.records()) for m in members}
        assert all(n > 0 for n in per.values()), f"every member took part: {per}"
        assert {r["epoch"] for m in members for r in m.records()} == {1, 2, 3, 4}
    finally:
        for m in members:
            m.stop()


def test_a_member_killed_hard_is_taken_over_and_a_late_member_joins(broker, tmp_path):
    topic = broker.create_topic(4)
    group = "crash"
    members = [Member(broker, "python", topic, group, tmp_path / "py1.jsonl", "--from-beginning"),
               Member(broker, "python", topic, group, tmp_path / "py2.jsonl", "--from-beginning"),
               Member(broker, "go", topic, group, tmp_path / "go1.jsonl", "--from-beginning")]
    late = None
    try:
        time.sleep(1.5)

        async def scenario():
            nonlocal late
            prod = asyncio.ensure_future(produce_through(broker, topic, 16000, 100, [("--partitions", "6")], chunk=200,
                                                         pause=0.05, at=[0.6]))
            while len(members[0].records()) < 800 and not prod.done():
                await asyncio.sleep(0.05)
            members[0].kill9()  # mid-stream: records printed and not committed are delivered again
            await asyncio.sleep(1.0)
            late = Member(broker, "python", topic, group, tmp_path / "py3.jsonl")
            members.append(late)
            return await prod

        records, metas, pid = asyncio.run(scenario())
        killed = members[0]
        check_group(broker, topic, group, members, records, metas, pid, tmp_path)
        assert len(killed.records()) >= 800
        assert len(late.records()) > 0, "the late member took over partitions"
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.stop()
