"""A topic whose creation has not finished is answered ``unavailable`` with the detail
``{"creating": true, "topic": T}`` (spec/protocol.md §3), and the SDK waits for such a topic by
that detail, never by the message's words. The unfinished creation is a real descriptor with
``creating`` set, written into the topics bucket with nats-py's own client, as a broker that died
half way leaves it; the real broker finishes it with its retry loop (every 2 s), and a producer
started meanwhile waits, then produces. Mutant shown failing: the producer's fetch not waiting on
``is_topic_creating`` (the producer fails with Unavailable)."""

from __future__ import annotations

import asyncio
import json

import pctl
from pctl.errors import Unavailable, is_topic_creating


def test_topic_being_created_has_its_detail_and_a_producer_waits(broker):
    done = broker.create_topic(2)

    async def go():
        async with await pctl.connect(broker.url, broker.admin) as admin, await pctl.connect(broker.url, broker.producer) as prod:
            m = await admin.nc.request("pctl.api.topic.get", json.dumps({"topic": done}).encode(), timeout=5)
            desc = json.loads(m.data)["topic"]
            js = admin.nc.jetstream()
            name = None
            # The broker's retry loop may finish a creation between the write and the read: try
            # again under another name then.
            for i in range(5):
                n = f"{done}half{i}"
                await js.publish(f"$KV.pctl-topics.{n}", json.dumps({**desc, "name": n, "id": desc["id"] + f"h{i}", "creating": True}).encode())
                try:
                    await admin.topic(n)
                except Unavailable as e:
                    assert e.detail == {"creating": True, "topic": n}, f"the creating detail of spec/protocol.md §3: {e.detail!r}"
                    assert is_topic_creating(e)
                    name = n
                    break
            assert name, "the topic was never seen being created"
            # Not by the words: an unavailable error that only says so is not a topic being created.
            assert not is_topic_creating(Unavailable(f"topic {name} is being created; retry in a moment"))
            p = await prod.producer(name, producer_id="py-creating")
            r = await (await p.send(b"k", b"v"))
            await p.close()
            assert r.epoch == 1

    asyncio.run(go())
