"""The producer's order promise under faults, checked on what the streams store (spec/protocol.md
§5.1.2): a TCP proxy between the producer and the broker cuts the producer's connection many times
while it pipelines thousands of keyed records, and an epoch change lands in the middle of a run.
Afterwards every partition stream is read in stream order (direct gets, an admin connection of its
own): no key's records may be stored out of send order (Pctl-Seq), every acknowledged record must
be stored, and none twice.

The plain request/reply producer (spec/protocol.md §5.1.3, the SDK before fast batches) fails the
cut-connection test: a publish lost in a cut is retried after its acknowledgement timeout, behind
later records of its key that were sent after the reconnect and stored."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
from typing import Optional

import nats

import pctl
import pctl._fastbatch


class CutProxy:
    """A loopback TCP proxy to the broker whose `cut()` loses every byte through it for a moment
    and then aborts every connection, as a network failure does."""

    def __init__(self, target: str):
        host, port = target.rsplit("//", 1)[-1].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.pairs: list = []
        self.dropping: set = set()
        self.server: Optional[asyncio.AbstractServer] = None
        self.cuts = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            sr, sw = await asyncio.open_connection(self.host, self.port)
        except OSError:
            cw.transport.abort()
            return
        pair = (cw, sw)
        self.pairs.append(pair)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    if pair in self.dropping:
                        continue  # lost in the network
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                w.transport.abort()

        try:
            await asyncio.gather(pipe(cr, sw), pipe(sr, cw))
        except asyncio.CancelledError:
            pass
        if pair in self.pairs:
            self.pairs.remove(pair)

    async def cut(self, lose: float = 0.1) -> None:
        """For `lose` seconds every byte either way is dropped (lost in the network), then every
        connection is aborted."""
        self.cuts += 1
        pairs = list(self.pairs)
        self.dropping.update(pairs)
        await asyncio.sleep(lose)
        for cw, sw in pairs:
            cw.transport.abort()
            sw.transport.abort()
            if (cw, sw) in self.pairs:
                self.pairs.remove((cw, sw))
        self.dropping.difference_update(pairs)

    async def close(self) -> None:
        await self.cut(0)
        self.cuts -= 1
        if self.server is not None:
            self.server.close()


async def stored_records(broker, topic: str, partitions: int) -> list:
    """Every record of the topic's partition streams, each stream in stream order:
    (partition, stream seq, epoch, Pctl-Producer, Pctl-Seq, Pctl-Key), read with direct gets."""
    nc = await nats.connect(broker.url, nkeys_seed=broker.admin)
    out = []
    try:
        for q in range(partitions):
            stream = f"PCTL_{topic}_{q}"
            info = json.loads((await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"{}", timeout=10)).data)
            last = info["state"]["last_seq"]

            async def get(seq: int):
                return seq, await nc.request(f"$JS.API.DIRECT.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=10)

            for lo in range(1, last + 1, 256):
                for seq, m in await asyncio.gather(*(get(s) for s in range(lo, min(last, lo + 255) + 1))):
                    h = m.headers or {}
                    if h.get("Status") or "Pctl-Fence" in h:
                        continue
                    epoch = int(h.get("Nats-Subject", "...0.0").split(".")[-2])
                    out.append((q, seq, epoch, h.get("Pctl-Producer"), int(h.get("Pctl-Seq", 0)), h.get("Pctl-Key")))
    finally:
        await nc.close()
    return out


def storage_problems(stored: list, producer: str, acked: dict) -> list:
    """What is wrong with the stored records of `producer` given `acked` (Pctl-Seq -> Pctl-Key of
    every acknowledged record): a record stored twice, an acknowledged one missing, a key's records
    stored out of send order within a stream, or a key stored in an older epoch after a newer one."""
    problems = []
    seen: dict = {}
    last: dict = {}  # (partition, key) -> last Pctl-Seq in stream order
    epochs: dict = {}  # key -> {epoch: (min pseq, max pseq)}
    for q, seq, epoch, pid, pseq, key in stored:
        if pid != producer:
            continue
        if pseq in seen:
            problems.append(f"record {pseq} stored twice (at {q}/{seq} and {seen[pseq][0]}/{seen[pseq][1]})")
        seen[pseq] = (q, seq)
        if key is None:
            continue
        prev = last.get((q, key))
        if prev is not None and pseq < prev:
            problems.append(f"key {key}: record {pseq} stored at {q}/{seq} after record {prev}")
        last[(q, key)] = pseq
        lo, hi = epochs.setdefault(key, {}).get(epoch, (pseq, pseq))
        epochs[key][epoch] = (min(lo, pseq), max(hi, pseq))
    for key, by in epochs.items():
        es = sorted(by)
        for a, b in zip(es, es[1:]):
            if by[a][1] > by[b][0]:
                problems.append(f"key {key}: record {by[a][1]} in epoch {a} after record {by[b][0]} in epoch {b}")
    for pseq in acked:
        if pseq not in seen:
            problems.append(f"acknowledged record {pseq} is not stored")
    return problems


def test_the_storage_check_catches_what_it_should():
    ok = [(0, 1, 1, "p", 1, "k"), (0, 2, 1, "p", 2, "k"), (1, 1, 2, "p", 3, "k")]
    assert storage_problems(ok, "p", {1: "k", 2: "k", 3: "k"}) == []
    assert storage_problems([ok[1], ok[0]], "p", {}) != [], "out of order in a stream"
    assert storage_problems(ok[:2], "p", {3: "k"}) != [], "an acknowledged record missing"
    assert storage_problems(ok + [(0, 3, 1, "p", 2, "k")], "p", {}) != [], "stored twice"
    assert storage_problems([(1, 1, 2, "p", 1, "k"), (0, 1, 1, "p", 2, "k")], "p", {}) != [], "back to an older epoch"


async def _pipeline(url: str, broker, topic: str, n: int, keys: int, during=None, pace: int = 20, **opts) -> tuple:
    """Sends n keyed records (key k<i mod keys>, value i), `pace` every 20 ms (a steady rate that
    does not fill a pipelined producer's window within its acknowledgement timeout: it keeps
    sending while its lost publishes wait), and runs `during()` beside it. Returns the producer and
    {Pctl-Seq: key header} of the acknowledged records, and the failures."""
    async with await pctl.connect(url, broker.producer, ack_timeout=opts.pop("ack_timeout", 1.0)) as c:
        p = await c.producer(topic, **opts)
        side = asyncio.ensure_future(during()) if during else None
        futs = []
        for i in range(n):
            futs.append(await p.send(f"k{i % keys}", str(i)))
            if i % pace == pace - 1:
                await asyncio.sleep(0.02)
        if side is not None:
            await side
        res = await asyncio.gather(*futs, return_exceptions=True)
        await p.close()
    acked, failed = {}, []
    for i, r in enumerate(res):
        if isinstance(r, pctl.RecordMetadata):
            acked[r.producer_seq] = pctl.wire.encode_key(f"k{i % keys}".encode())
        else:
            failed.append(r)
    return p, acked, failed


def test_cut_connections_keep_per_key_storage_order(broker):
    topic = broker.create_topic(3)
    n, keys = 6000, 150

    async def go():
        proxy = CutProxy(broker.url)
        url = await proxy.start()

        async def cutter():
            await asyncio.sleep(0.3)
            for _ in range(12):
                await proxy.cut()
                await asyncio.sleep(random.uniform(0.2, 0.4))

        try:
            p, acked, failed = await _pipeline(url, broker, topic, n, keys, cutter)
        finally:
            await proxy.close()
        return p, acked, failed, proxy.cuts

    p, acked, failed, cuts = asyncio.run(go())
    assert cuts == 12
    assert not failed, failed[:3]
    assert len(acked) == n
    stored = asyncio.run(stored_records(broker, topic, 3))
    problems = storage_problems(stored, p.id, acked)
    assert not problems, f"{len(problems)} problems after {cuts} cuts (settled {getattr(p, 'settled', '?')}): {problems[:5]}"
    assert getattr(p, "settled", 1) > 0, "the cuts hit batches in flight"


def test_epoch_change_under_load_keeps_per_key_storage_order(broker):
    topic = broker.create_topic(2)
    n, keys = 8000, 200

    async def expand():
        await asyncio.sleep(0.4)
        proc = await asyncio.create_subprocess_exec(str(broker.bin), "topic", "expand", topic, "--partitions", "5",
                                                    "--server", broker.url, "--creds", broker.admin,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = await proc.communicate()
        assert proc.returncode == 0, err

    p, acked, failed = asyncio.run(_pipeline(broker.url, broker, topic, n, keys, expand, pace=100, ack_timeout=5.0))
    assert not failed, failed[:3]
    assert p.resent > 0, "records in flight at the fence were re-partitioned"
    stored = asyncio.run(stored_records(broker, topic, 5))
    assert {e for _, _, e, *_ in stored} == {1, 2}, "the run spans the epoch change"
    problems = storage_problems(stored, p.id, acked)
    assert not problems, f"{len(problems)} problems: {problems[:5]}"


def test_a_look_alike_under_a_records_id_is_a_conflict_not_a_success(broker):
    # spec/protocol.md §5.1.4: a client that can predict a record's id (here: a content token,
    # the digest of key and value) stores another message under it first. The producer's record
    # is then answered as a duplicate; the producer reads the stored message, finds it is not
    # this record, and fails it with Conflict instead of counting it stored.
    topic = broker.create_topic(1)
    key, value = b"victim-key", b"the real value"
    token = pctl._fastbatch.record_token(key, value)  # the digest of §5.2, as `RecordToken` in Go

    async def go():
        nc = await nats.connect(broker.url, nkeys_seed=broker.producer)
        try:
            ack = await nc.request(f"pctl.data.{topic}.1.0", b"a look-alike",
                                   headers={"Nats-Msg-Id": f"victim-1-{token}", "Pctl-Producer": "victim", "Pctl-Seq": "1",
                                            "Pctl-Key": pctl.wire.encode_key(key)}, timeout=10)
            assert b'"seq":1' in ack.data, ack.data
        finally:
            await nc.close()
        async with await pctl.connect(broker.url, broker.producer) as c:
            p = await c.producer(topic, producer_id="victim", content_tokens=True)
            try:
                return await p.produce(key, value)
            except pctl.PctlError as e:
                return e
            finally:
                await p.close()

    got = asyncio.run(go())
    assert isinstance(got, pctl.Conflict), f"the record counted as stored: {got!r}"
    assert "duplicate" in str(got) and "NOT stored" in str(got)
