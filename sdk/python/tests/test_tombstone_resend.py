"""A tombstone re-sent into a later epoch carries the Nats-TTL of the descriptor it is re-sent under
(spec/protocol.md §10.2), not the one it was first made with. Unit level against a real broker: the
tombstone is made while the producer switches epochs (held, its headers made under the topic's own
descriptor: delete retention 60 s), then placed as the repartition places held and handed-back
records, under a descriptor that holds tombstones (a backfill running: H = 100 years); the stored
tombstone must carry H. The fence itself (a tombstone unacknowledged at it) is arranged only by the
Go client's TestTombstoneResentIntoNewEpochIsHeld; the conformance suite's compacted row checks the
TTL of every tombstone acknowledged while a backfill is held, but does not force a re-send. Before
the fix the producer kept the first headers and stored Nats-TTL 60."""

from __future__ import annotations

import asyncio
import dataclasses

import nats

import pctl
from pctl.compact import key_token


def test_tombstone_placed_again_gets_the_ttl_of_the_descriptor_it_is_sent_under(broker):
    topic = "trs-py"
    broker.pctl("topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2", "--compact",
                "--delete-retention", "60s")

    async def main():
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="trs-py-p")
            await (await p.send(b"k", b"old"))
            p._switching = True  # as _repartition sets it: a record sent now is held
            fut = await p.send(b"k", tombstone=True)
            pd = p._held[-1]
            first = dict(pd.hdrs)
            assert first["Nats-TTL"] == "60"
            raw = dict(p._desc.raw)
            raw["compact"] = {"delete_retention_ms": 3_153_600_000_000, "held_retention_ms": 60_000}  # spec §10.2's H
            p._desc = dataclasses.replace(p._desc, raw=raw)
            held, p._held = p._held, []
            p._switching = False
            p._assign_many(held)
            meta = await asyncio.wait_for(fut, 30)
            assert not meta.duplicate
            nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
            try:
                subj = f"pctl.data.{topic}.{meta.epoch}.{meta.partition}.{key_token(b'k')}"
                m = await nc.request(f"$JS.API.DIRECT.GET.PCTL_{topic}_{meta.partition}.{subj}", b"", timeout=5)
            finally:
                await nc.close()
            h = m.headers or {}
            assert "Status" not in h, h
            assert h.get("Pctl-Tombstone") == "true"
            assert h.get("Nats-Msg-Id") == first["Nats-Msg-Id"], "the identity stays"
            assert h.get("Nats-TTL") == "3153600000", f"stored Nats-TTL {h.get('Nats-TTL')!r}: want the hold of the descriptor the tombstone was re-sent under, not the 60 s it was made with"
            await p.close()

    asyncio.run(main())
