"""A member takes the create path only when a write that JetStream stores only while g.created has
no message proves its group absent (spec/protocol.md §6.1, "Proving that the group does not
exist"), not on a get that finds nothing (a lagging follower answers direct gets). Against a real
broker, with the member's first get of g.created answering "not found" (what a follower that lags
answers; every other request goes to the real server). The same cases as the Go client's
TestJoinCreatesOnlyAProvenAbsentGroup:

- later-epoch: a group created (from now) before a grow reads the new partition streams from their
  first record; the member must not create their keys (the old rule created them at the streams'
  last sequence: the group would skip the records already in them);
- from-beginning: a group created from the beginning has no g.start; a member that asks for the
  current epoch must not create one (the old rule did: the group's start changed);
- new group: a group that does not exist is created, with a key for every existing stream.

The keys are read back with nats-py's own KV client, not the SDK's."""

from __future__ import annotations

import asyncio
import json

import nats.js.errors
import pytest

import pctl
from pctl.consumer import Consumer, _fetch_topic, read_group_keys


class _MissedMarker:
    """The group bucket as a lagging follower answers it: the first get of `marker` finds
    nothing; everything else is the real bucket."""

    def __init__(self, kv, marker: str):
        self._kv, self._marker, self._missed = kv, marker, False

    async def get(self, key):
        if key == self._marker and not self._missed:
            self._missed = True
            return None
        return await self._kv.get(key)

    def __getattr__(self, name):
        return getattr(self._kv, name)


async def _member(c, topic: str, group: str, **opts) -> Consumer:
    """A member of `group` that has not joined yet (Consumer.create without its start)."""
    t = await _fetch_topic(c, topic)
    kw = dict(from_beginning=False, auto_commit=True, heartbeat=1.0, session_timeout=6.0, commit_interval=0.2,
              gating=True, max_buffered=512, on_assigned=None, on_revoked=None, on_keys_assigned=None,
              on_keys_revoked=None, logf=None)
    kw.update(opts)
    return Consumer(c, t, group, "py-test", **kw)


async def _join_missing_marker(c, topic: str, group: str, **opts):
    """The join's decision and its read of the group's keys, with the first get of g.created
    missing. Returns (member, (g.start, g.assignor))."""
    cn = await _member(c, topic, group, **opts)
    cn._kv = _MissedMarker(cn._kv, cn._prefix + "g.created")
    await cn._ensure_group()
    keys = await read_group_keys(cn._kv, cn._prefix, group)
    cn._take_start(keys[0])
    return cn, keys


async def _produce(c, topic: str, n: int) -> None:
    p = await c.producer(topic)
    futs = [await p.send(f"k{i}", b"v") for i in range(n)]
    await asyncio.gather(*futs)
    await p.close()


async def _key(nkv, key: str):
    try:
        e = await nkv.get(key)
    except nats.js.errors.KeyNotFoundError:
        return None
    return e


def test_a_member_creates_only_a_group_proven_absent(broker):
    grown, fresh = broker.create_topic(2), broker.create_topic(2)

    async def setup():
        async with await pctl.connect(broker.url, broker.admin) as c:
            await _produce(c, grown, 40)
            # Two groups exist before the grow: "now" (from now) and "begin" (from the beginning).
            await (await _member(c, grown, "now"))._ensure_group()
            await (await _member(c, grown, "begin", start="beginning"))._ensure_group()

    asyncio.run(setup())
    broker.pctl("topic", "repartition", grown, "--partitions", "4")

    async def check():
        async with await pctl.connect(broker.url, broker.admin) as c:
            await _produce(c, grown, 60)
            nkv = await c.nc.jetstream().key_value("pctl-groups")
            tid = (await _fetch_topic(c, grown)).id
            failures = []

            # later-epoch
            await _join_missing_marker(c, grown, "now")
            for q in (2, 3):
                e = await _key(nkv, f"{tid}.now.p.{q}")
                if e is not None:
                    failures.append(f"later-epoch: partition {q} (created by the grow, after the group) has a key "
                                    f"{e.value!r}: the group would skip the records before it")

            # from-beginning
            cn, (start, _) = await _join_missing_marker(c, grown, "begin", start="current-epoch")
            e = await _key(nkv, f"{tid}.begin.g.start")
            if e is not None:
                failures.append(f"from-beginning: a group created from the beginning has a g.start {e.value!r}: its start changed")
            if start is not None or cn._start_epoch != 0:
                failures.append(f"from-beginning: the member reads the group as starting at epoch {cn._start_epoch}")

            # new group
            await _produce(c, fresh, 30)
            ftid = (await _fetch_topic(c, fresh)).id
            _, (_, assignor) = await _join_missing_marker(c, fresh, "new", assignor="sticky")
            js = c.nc.jetstream()
            for q in (0, 1):
                e = await _key(nkv, f"{ftid}.new.p.{q}")
                last = (await js.stream_info(f"PCTL_{fresh}_{q}")).state.last_seq
                if e is None:
                    failures.append(f"new group: partition {q} has no key")
                elif json.loads(e.value)["position"] != last or last == 0:
                    failures.append(f"new group: partition {q} starts at {e.value!r}, want its last sequence {last} (from now)")
            if await _key(nkv, f"{ftid}.new.g.created") is None:
                failures.append("new group: no g.created")
            if assignor is None or json.loads(assignor.value) != {"assignor": "sticky"}:
                failures.append(f"new group: g.assignor {assignor and assignor.value!r}")
            return failures

    failures = asyncio.run(check())
    assert not failures, "\n".join(failures)
