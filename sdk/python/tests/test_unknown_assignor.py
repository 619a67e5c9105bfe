"""A group whose recorded assignor this SDK does not implement (spec/protocol.md §6.1) is refused
with the error of code `unsupported` (§3), as its own class, against a real broker: the group's
`g.assignor` key names "round-robin" before any member joins (then `g.created`, as its creator writes
it: a group without `g.created` is being created, and a member may still write its own assignor,
§6.1)."""

from __future__ import annotations

import asyncio
import json

import pytest

import pctl
from pctl import _nats


def test_a_group_with_an_unknown_assignor_is_unsupported(broker):
    topic = broker.create_topic(2)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            desc = await c.topic(topic)
            kv = _nats.KV(c, "pctl-groups")
            await kv.create(f"{desc.id}.rr.g.assignor", json.dumps({"assignor": "round-robin"}).encode())
            await kv.create(f"{desc.id}.rr.g.created", b"now")
            with pytest.raises(pctl.Unsupported) as e:
                await c.consumer(topic, "rr", member="a")
            return e.value

    err = asyncio.run(go())
    assert err.code == "unsupported", err.code
    assert "round-robin" in str(err) and "another group" in str(err), str(err)
