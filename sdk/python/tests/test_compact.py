"""Compacted topics (spec/protocol.md §10): the key token against spec/vectors/compact/keytoken.json
(written from the spec's text by Python's base64 and hashlib in tools/crosscheck, not by this
SDK), and against a real broker: the producer writes one subject per key and tombstones, the
consumer flags tombstones, reads the current epoch alone, skips backfilled copies in a live group
and delivers them to a group that started at the current epoch. What the SDK delivers is compared
with what 'pctl consume' (the Go client) delivers, with JetStream's own last message of every key
subject, and with the values the test sent."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest

import pctl
from pctl.compact import key_token, parse_origin, superseded_in_batch
from conftest import VECTORS


def run(coro):
    return asyncio.run(coro)


def test_key_token_vectors():
    v = json.loads((VECTORS / "compact" / "keytoken.json").read_text())
    assert len(v["cases"]) >= 500
    for c in v["cases"]:
        assert key_token(bytes.fromhex(c["key_hex"])) == c["token"], c["key_hex"][:40]
    assert any(c["token"].startswith("h") for c in v["cases"])


def test_parse_origin_and_superseded():
    assert parse_origin("2/3/17") == (2, 3, 17)
    for bad in ["", "0/1/2", "1/2", "1/2/3/4", "a/1/2", "1/-1/2", " 1/2/3", None]:
        assert parse_origin(bad) is None, bad
    found = {3: 40, 1: 38}
    superseded_in_batch([b"a", b"b", b"a", b"a", None], 0, found)
    assert found == {0: 0, 1: 38, 2: 0, 3: 40}


async def drain(cn, idle: float = 3.0) -> list:
    out = []
    while True:
        r = await cn.next(timeout=idle)
        if r is None:
            return out
        out.append(r)


def latest(recs) -> dict:
    """One entry per key: its value, or None for a tombstone (the last record of the key wins)."""
    out = {}
    for r in recs:
        out[r.key] = None if r.tombstone else r.value
    return out


def go_consume(broker, topic: str, group: str) -> dict:
    p = broker.pctl("consume", topic, "--group", group, "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "3s",
                    creds=broker.consumer)
    out = {}
    for line in p.stdout.splitlines():
        d = json.loads(line)
        out[d["key"].encode()] = None if d.get("tombstone") else d.get("value", "").encode()
    return out


def test_compacted_topic_produce_tombstones_and_backfill(broker):
    topic = "cpt-py"
    broker.pctl("topic", "create", topic, "--partitions", "3", "--partitioner", "kafka-murmur2", "--compact",
                "--delete-retention", "1h")
    keys = [f"k{i}".encode() for i in range(39)] + [b"L" * 300]  # one long (hashed) key

    async def main():
        want: dict = {}
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="cpt-py-p")
            with pytest.raises(pctl.BadRequest, match="compacted"):
                await p.send(None, b"x")
            with pytest.raises(pctl.BadRequest, match="no value"):
                await p.send(b"k", b"x", tombstone=True)
            futs = []
            for u in range(6):
                for i, k in enumerate(keys):
                    v = k[:8] + b":%d" % u
                    futs.append(await p.send(k, v))
                    want[k] = v
                    if u == 5 and i < 10:
                        futs.append(await p.send(k, tombstone=True))
                        want[k] = None
                    if u == 5 and i < 4:
                        futs.append(await p.send(k, k + b":back"))  # a value after a tombstone
                        want[k] = k + b":back"
            res = await asyncio.gather(*futs)
            assert len(res) == 40 * 6 + 10 + 4

            # Stored state, read by subject (JetStream's last message of each key subject).
            parts = broker.pctl("partition", "--plugin", "kafka-murmur2", "--partitions", "3",
                                stdin="".join(k.decode() + "\n" for k in keys), remote=False).stdout.split()
            nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
            try:
                for k, q in zip(keys, parts):
                    subj = f"pctl.data.{topic}.1.{q}.{key_token(k)}"
                    m = await nc.request(f"$JS.API.DIRECT.GET.PCTL_{topic}_{q}.{subj}", b"", timeout=5)
                    h = m.headers or {}
                    assert "Status" not in h, (subj, h)
                    if want[k] is None:
                        assert h.get("Pctl-Tombstone") == "true" and h.get("Nats-TTL") == "3600" and m.data == b""
                    else:
                        assert m.data == want[k]
            finally:
                await nc.close()

            async with await pctl.connect(broker.url, broker.consumer) as cc:
                # A new group reads the current epoch alone by default on a compacted topic.
                c1 = await cc.consumer(topic, "fresh1")
                got1 = await drain(c1)
                await c1.close()
                assert len(got1) == len(keys)
                assert latest(got1) == want
                assert all(r.backfill is None and r.epoch == 1 for r in got1)
                assert all(r.value == b"" for r in got1 if r.tombstone)
                assert go_consume(broker, topic, "gofresh1") == want

                # A live group that read epoch 1 before the change gets no copy again.
                live = await cc.consumer(topic, "live", start="beginning")
                live_got = await drain(live, idle=5.0)
                assert len(live_got) == len(keys)

                broker.pctl("topic", "repartition", topic, "--partitions", "5")
                deadline = time.monotonic() + 60
                while True:
                    d = json.loads(broker.pctl("topic", "describe", topic, "--json").stdout)
                    bf = d["epochs"][-1].get("backfill") or {}
                    if bf.get("state") == "done":
                        break
                    assert time.monotonic() < deadline, bf
                    await asyncio.sleep(0.2)
                later = []
                for k in keys[10:20]:
                    later.append(await p.send(k, k + b":e2"))
                    want[k] = k + b":e2"
                later.append(await p.send(b"k20", tombstone=True))
                want[b"k20"] = None
                r2 = await asyncio.gather(*later)
                assert all(r.epoch == 2 for r in r2)
                await p.close()

                # A fresh group at the current epoch: every key's latest once, copies flagged.
                c2 = await cc.consumer(topic, "fresh2")
                got2 = await drain(c2)
                await c2.close()
                assert all(r.epoch == 2 for r in got2)
                assert len(got2) == len(keys), [r.key for r in got2]
                assert latest(got2) == want
                copies = [r for r in got2 if r.backfill is not None]
                assert len(copies) == len(keys) - 11
                assert all(r.backfill[0] == 1 for r in copies)
                assert go_consume(broker, topic, "gofresh2") == want

                live_got += await drain(live, idle=5.0)
                await live.close()
                assert [r for r in live_got if r.backfill is not None] == [], "a live group skips copies"
                assert len(live_got) == len(keys) + 11
                assert latest(live_got) == want

    run(main())


def test_record_under_another_keys_token_is_misplaced(broker):
    topic = "cpt-py-mis"
    broker.pctl("topic", "create", topic, "--partitions", "1", "--partitioner", "kafka-murmur2", "--compact")

    async def main():
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="mis-p")
            await p.produce(b"a", b"1")
            await p.close()
        nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
        try:
            # A hostile producer: key b's header under key a's subject (it compacts a's value away).
            await nc.request(f"pctl.data.{topic}.1.0.{key_token(b'a')}", b"2", timeout=5,
                             headers={"Pctl-Key": "b64:Yg==", "Nats-Msg-Id": "hostile-1"})
        finally:
            await nc.close()
        async with await pctl.connect(broker.url, broker.consumer) as cc:
            cn = await cc.consumer(topic, "m", start="beginning", misplaced="deliver")
            got = await drain(cn)
            await cn.close()
        assert len(got) == 1 and got[0].key == b"b"
        assert "does not end with its key's token" in got[0].misplaced.reason

    run(main())


def test_plain_backfill_topic_key_subjects_and_full_history(broker):
    """A plain topic with --backfill (spec/protocol.md §10.1, §10.3): keyless records refused,
    every record stored under its key's subject (all kept), and after a grow a group at the
    current epoch (this SDK's and the Go client's) gets every key's full history in order."""
    topic = "pbf-py"
    broker.pctl("topic", "create", topic, "--partitions", "2", "--partitioner", "kafka-murmur2", "--backfill")
    keys = [f"k{i}".encode() for i in range(12)]
    hist = {k: [] for k in keys}

    async def main():
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="pbf-py-p")
            with pytest.raises(pctl.BadRequest, match="cannot be backfilled"):
                await p.send(None, b"x")
            futs = []
            for u in range(3):
                for k in keys:
                    futs.append(await p.send(k, k + b":%d" % u))
                    hist[k].append(k + b":%d" % u)
            await asyncio.gather(*futs)
            parts = broker.pctl("partition", "--plugin", "kafka-murmur2", "--partitions", "2",
                                stdin="".join(k.decode() + "\n" for k in keys), remote=False).stdout.split()
            nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
            try:
                for k, q in zip(keys, parts):
                    subj = f"pctl.data.{topic}.1.{q}.{key_token(k)}"
                    m = await nc.request(f"$JS.API.DIRECT.GET.PCTL_{topic}_{q}.{subj}", b"", timeout=5)
                    assert "Status" not in (m.headers or {}), subj
                    assert m.data == k + b":2"
            finally:
                await nc.close()
            broker.pctl("topic", "repartition", topic, "--partitions", "3")
            deadline = time.monotonic() + 60
            while True:
                d = json.loads(broker.pctl("topic", "describe", topic, "--json").stdout)
                bf = d["epochs"][-1].get("backfill") or {}
                if bf.get("state") == "done":
                    break
                assert time.monotonic() < deadline, bf
                await asyncio.sleep(0.2)
            futs = [await p.send(k, k + b":e2") for k in keys[:4]]
            res = await asyncio.gather(*futs)
            assert all(r.epoch == 2 for r in res)
            for k in keys[:4]:
                hist[k].append(k + b":e2")
            await p.close()
        async with await pctl.connect(broker.url, broker.consumer) as cc:
            cn = await cc.consumer(topic, "pbf-fresh", start="current-epoch")
            got = await drain(cn)
            await cn.close()
        assert all(r.epoch == 2 and r.misplaced is None for r in got)
        by = {k: [] for k in keys}
        for r in got:
            by[r.key].append(r.value)
        assert by == hist
        assert sum(1 for r in got if r.backfill is not None) == 36

    run(main())
    gp = broker.pctl("consume", topic, "--group", "pbf-gofresh", "--from", "current-epoch", "--format", "jsonl",
                     "--idle-exit", "3s", creds=broker.consumer)
    by = {k: [] for k in keys}
    for line in gp.stdout.splitlines():
        d = json.loads(line)
        by[d["key"].encode()].append(d["value"].encode())
    assert by == hist
