"""The cluster rules of the producer (spec/protocol.md §5.1.2) made deterministic on one server:
the test makes the producer treat the partition stream as clustered (its confirm step then reads
every committed batch back from the stream with $JS.API.STREAM.MSG.GET), and plays nats-server
2.15.2's fault itself: after a batch's clean PubAck and before the read-back it deletes one stored
record of the batch, a record the server counted but did not keep (a "hole"). The producer must
find the hole, re-send it with a new token first in the next batch, and per-key order must still
hold in what the stream stores, because a batch never holds two records of one key (the per-key
rule). With the rule off the same run stores keys out of order: the check and the rule matter."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

import pctl
import pctl.producer as producer_mod
from test_producer_faults import storage_problems, stored_records


def _run(broker, monkeypatch, key_rule: bool) -> tuple:
    topic = broker.create_topic(1)
    stream = f"PCTL_{topic}_0"
    batches: list = []  # the Pctl-Key headers of every committed batch, in order
    deleted: list = []
    orig_read_floor = producer_mod._Sink._read_floor
    orig_confirm = producer_mod._Sink._confirm
    orig_end = producer_mod._Sink._end_batch
    admin: list = []

    async def read_floor(self):
        await orig_read_floor(self)
        self.verify = True  # as if the stream were on a cluster: every batch is confirmed

    async def confirm(self, k, up_to):
        b = self.b
        if up_to and len(b.recs) >= 3 and len(deleted) < 8 and len(batches) % 2 == 1:
            # The first record of this committed batch (single server: its records are at
            # up_to - n + 1 .. up_to) goes missing before the read-back.
            seq = up_to - len(b.recs) + 1
            r = await admin[0].request(f"$JS.API.STREAM.MSG.DELETE.{stream}", json.dumps({"seq": seq, "no_erase": True}).encode(), timeout=10)
            assert b'"success":true' in r.data, r.data
            deleted.append(seq)
        return await orig_confirm(self, k, up_to)

    def end_batch(self, stream_seq):
        batches.append([pd.key_hdr for pd in self.b.recs])
        orig_end(self, stream_seq)

    monkeypatch.setattr(producer_mod._Sink, "_read_floor", read_floor)
    monkeypatch.setattr(producer_mod._Sink, "_confirm", confirm)
    monkeypatch.setattr(producer_mod._Sink, "_end_batch", end_batch)
    monkeypatch.setattr(producer_mod.Producer, "_key_rule", key_rule)
    keys = 12

    async def go():
        admin.append(await nats.connect(broker.url, nkeys_seed=broker.admin))
        try:
            async with await pctl.connect(broker.url, broker.producer) as c:
                p = await c.producer(topic)
                futs = []
                for i in range(600):
                    futs.append(await p.send(f"k{i % keys}", str(i)))
                    if i % 60 == 59:
                        await asyncio.sleep(0.005)
                res = await asyncio.gather(*futs, return_exceptions=True)
                await p.close()
                return p, res
        finally:
            await admin[0].close()

    p, res = asyncio.run(go())
    assert all(isinstance(r, pctl.RecordMetadata) for r in res), [r for r in res if not isinstance(r, pctl.RecordMetadata)][:3]
    acked = {r.producer_seq: pctl.wire.encode_key(f"k{i % keys}".encode()) for i, r in enumerate(res)}
    stored = asyncio.run(stored_records(broker, topic, 1))
    return p, batches, deleted, storage_problems(stored, p.id, acked)


def test_holes_keep_per_key_order_with_the_per_key_rule(broker, monkeypatch):
    p, batches, deleted, problems = _run(broker, monkeypatch, key_rule=True)
    assert deleted, "the test made holes"
    assert p.holes >= len(deleted), f"the read-back found the holes: {p.holes} of {len(deleted)}"
    assert p.confirmed_by_reading > 0
    assert all(len(set(b)) == len(b) for b in batches), "no batch holds two records of one key"
    assert p.key_splits > 0
    assert not problems, f"{len(problems)} problems: {problems[:5]}"


def test_without_the_per_key_rule_holes_break_per_key_order(broker, monkeypatch):
    p, batches, deleted, problems = _run(broker, monkeypatch, key_rule=False)
    assert deleted and p.holes >= len(deleted)
    assert any(len(set(b)) < len(b) for b in batches), "without the rule batches hold a key twice"
    assert any("after record" in x for x in problems), f"the hole's re-send lands after later records of its key: {problems[:5]}"
    assert not [x for x in problems if "not stored" in x or "twice" in x], "still nothing acknowledged lost or stored twice"
