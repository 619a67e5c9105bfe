"""A member takes its group's g.start and g.assignor only from a state that holds g.created
(spec/protocol.md §6.1, "Reading the group's keys at join"), against a real broker: while only
g.start and g.assignor exist (a creator between its writes, or a replica that lags behind them)
the read goes on; once g.created exists it returns both; a deleted key reads as absent; with no
keys at all it gives up with Unavailable. The keys are written with nats-py's own KV client, not
the SDK's. The same three cases as the Go client's TestReadGroupKeysWaitsForTheMarker. The cluster
failure this guards against (a lagging follower answering "not found" for a g.start that exists)
needs a lagging replica at the right moment; the rule that prevents it is what is checked here."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

import pctl
from pctl import _nats
from pctl.consumer import read_group_keys

START = json.dumps({"from": "current-epoch", "epoch": 3}).encode()
ASSIGNOR = json.dumps({"assignor": "sticky"}).encode()


def _run(broker, body):
    async def go():
        async with await pctl.connect(broker.url, broker.admin) as c:
            js = c.nc.jetstream()
            nkv = await js.key_value("pctl-groups")
            return await body(nkv, _nats.KV(c, "pctl-groups", timeout=5.0), "T" + uuid.uuid4().hex[:8])

    return asyncio.run(go())


def test_read_waits_for_g_created_then_returns_both(broker):
    async def body(nkv, kv, tid):
        # A first read of a complete group (not timed): the connection and the code paths warm.
        await nkv.put(f"{tid}.g0.g.created", b"now")
        await read_group_keys(kv, f"{tid}.g0.", "g0", 30.0)
        await nkv.put(f"{tid}.g1.g.start", START)
        await nkv.put(f"{tid}.g1.g.assignor", ASSIGNOR)
        put_created = []
        after_put = []

        async def read():
            r = await read_group_keys(kv, f"{tid}.g1.", "g1", 30.0)
            after_put.append(bool(put_created))
            return r

        task = asyncio.ensure_future(read())
        await asyncio.sleep(0.3)  # several reads, each without g.created
        assert not task.done(), f"returned {task.result() if not task.exception() else task.exception()!r} while g.created did not exist"
        put_created.append(True)
        await nkv.put(f"{tid}.g1.g.created", b"now")
        start, assignor = await asyncio.wait_for(task, 10)
        assert after_put == [True], "the read returned before g.created was written"
        return start, assignor

    start, assignor = _run(broker, body)
    assert start is not None and start.value == START
    assert assignor is not None and assignor.value == ASSIGNOR


def test_a_deleted_assignor_and_no_start_read_as_absent(broker):
    async def body(nkv, kv, tid):
        await nkv.put(f"{tid}.g2.g.assignor", ASSIGNOR)
        await nkv.delete(f"{tid}.g2.g.assignor")
        await nkv.put(f"{tid}.g2.g.created", b"now")
        return await read_group_keys(kv, f"{tid}.g2.", "g2", 30.0)

    start, assignor = _run(broker, body)
    assert start is None
    assert assignor is None


def test_no_keys_gives_up_with_unavailable(broker):
    async def body(nkv, kv, tid):
        with pytest.raises(pctl.Unavailable) as e:
            await read_group_keys(kv, f"{tid}.g3.", "g3", 0.5)
        return e.value

    err = _run(broker, body)
    assert err.code == "unavailable", err.code
