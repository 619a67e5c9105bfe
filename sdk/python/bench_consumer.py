#!/usr/bin/env python3
"""Consumer throughput: the SDK's consumer-group member (gates, placement checks, leases, commits)
against raw JetStream consumption with nats-py on the same streams, in the same run; prints the
ratio (target >= 0.8x).

It starts `pctl serve` (the binary $PCTL_BIN, else built from this checkout) on a temp dir,
creates a topic with 4 partitions, produces half the records, grows it to 8 partitions (an epoch
change: records of the new epoch are gated on their keys' old partitions until the group drained
them) and produces the other half. Then, each --rounds times and alternating:

- raw: nats-py pull consumers (ephemeral, no acks), one per partition stream, `fetch(256)` in a
  loop until every message is read; nats-py parses every message and its headers (no order
  across partitions, no group, no gates: the floor any consumer pays);
- raw-ordered: nats-py ordered push consumers, one per stream (the other idiomatic way);
- reader: the SDK's own stream reader alone, one per stream (what the member is built on);
- sdk: one member of a new group (`client.consumer(..., from_beginning=True)`) iterating every
  record with `async for`, auto-commit, gating on (the default);
- sdk-ungated: the same with gating=False (what the gates themselves cost).

    sdk/python/.venv/bin/python sdk/python/bench_consumer.py [--records 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import asyncio
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nats
from nats.js import api

import pctl

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"broker ready at (\S+) \(data (.+); admin credentials (.+)\)")


def start_broker(tmp: Path) -> tuple:
    binary = os.environ.get("PCTL_BIN")
    if not binary:
        binary = str(tmp / "pctl")
        subprocess.run(["go", "build", "-o", binary, "./cmd/pctl"], cwd=ROOT, check=True)
    data = tmp / "data"
    proc = subprocess.Popen([binary, "serve", "--data", str(data), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                            stderr=open(tmp / "serve.log", "wb"), text=True)
    m = READY.search(proc.stdout.readline())
    if not m:
        proc.kill()
        sys.exit(f"pctl serve did not start; see {tmp / 'serve.log'}")
    return binary, proc, m.group(1), str(data / "admin.nk")


async def produce(url: str, creds: str, topic: str, lo: int, hi: int) -> None:
    async with await pctl.connect(url, creds) as c:
        p = await c.producer(topic)
        value = b"v" * 100
        for i in range(lo, hi):
            await p.send(f"user-{i % 5000}".encode(), value)
        await p.close()


async def raw_pull(url: str, creds: str, streams: list) -> int:
    nc = await nats.connect(url, nkeys_seed=creds)
    js = nc.jetstream()

    async def one(stream: str) -> int:
        info = await js.stream_info(stream)
        last = info.state.last_seq
        sub = await js.pull_subscribe("", stream=stream, config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, deliver_policy=api.DeliverPolicy.ALL, mem_storage=True, inactive_threshold=30.0))
        n = seq = 0
        while seq < last:
            try:
                msgs = await sub.fetch(256, timeout=5)
            except nats.errors.TimeoutError:
                continue
            for m in msgs:
                _ = m.headers, m.data
                seq = m.metadata.sequence.stream
                n += 1
        await sub.unsubscribe()
        return n

    try:
        return sum(await asyncio.gather(*(one(s) for s in streams)))
    finally:
        await nc.close()


async def raw_ordered(url: str, creds: str, streams: list, subjects: list) -> int:
    nc = await nats.connect(url, nkeys_seed=creds)
    js = nc.jetstream()
    total = 0
    done = asyncio.Event()
    want = 0
    for s in streams:
        want += (await js.stream_info(s)).state.messages

    async def cb(m) -> None:
        nonlocal total
        _ = m.headers, m.data
        total += 1
        if total >= want:
            done.set()

    subs = [await js.subscribe(subj, stream=s, ordered_consumer=True, cb=cb, deliver_policy=api.DeliverPolicy.ALL)
            for s, subj in zip(streams, subjects)]
    await asyncio.wait_for(done.wait(), 300)
    for sub in subs:
        await sub.unsubscribe()
    await nc.close()
    return total


async def reader_only(url: str, creds: str, streams: list) -> int:
    """The SDK's own partition reader (pctl.reader.StreamReader: raw subscriptions, no Msg objects,
    headers left unparsed), one per stream, nothing else: the floor of the SDK's consumer."""
    from pctl.reader import StreamReader
    async with await pctl.connect(url, creds) as c:
        async def one(stream: str) -> int:
            info = await c.request_json(f"$JS.API.STREAM.INFO.{stream}", {})
            last = info["state"]["last_seq"]
            r = StreamReader(c, stream, 1)
            n = seq = 0
            while seq < last:
                for m in await r.next_batch():
                    seq = m.seq
                    n += 1
            await r.close()
            return n
        return sum(await asyncio.gather(*(one(s) for s in streams)))


async def sdk(url: str, creds: str, topic: str, want: int, gating: bool) -> tuple:
    async with await pctl.connect(url, creds) as c:
        cn = await c.consumer(topic, "bench-" + uuid.uuid4().hex[:8], from_beginning=True, gating=gating)
        n = 0
        start = time.perf_counter()
        async for r in cn:
            n += 1
            if n >= want:
                break
        el = time.perf_counter() - start
        st = cn.stats
        await cn.close()
        return n, el, st


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pctl-bench-"))
    binary, proc, url, admin = start_broker(tmp)
    try:
        topic = "bench"
        subprocess.run([binary, "topic", "create", topic, "--partitions", "4", "--partitioner", "kafka-murmur2",
                        "--server", url, "--creds", admin], check=True, capture_output=True)
        half = args.records // 2
        asyncio.run(produce(url, admin, topic, 0, half))
        subprocess.run([binary, "topic", "repartition", topic, "--partitions", "8", "--server", url, "--creds", admin],
                       check=True, capture_output=True)
        asyncio.run(produce(url, admin, topic, half, args.records))
        streams = [f"PCTL_{topic}_{q}" for q in range(8)]
        subjects = [f"pctl.data.{topic}.>"] * 8
        stored = args.records + 4  # 4 fence markers
        res: dict = {"raw": [], "raw-ordered": [], "reader": [], "sdk": [], "sdk-ungated": []}
        gated = 0
        for _ in range(args.rounds):
            t = time.perf_counter()
            n = asyncio.run(raw_pull(url, admin, streams))
            res["raw"].append(n / (time.perf_counter() - t))
            assert n == stored, (n, stored)
            t = time.perf_counter()
            n = asyncio.run(raw_ordered(url, admin, streams, subjects))
            res["raw-ordered"].append(n / (time.perf_counter() - t))
            t = time.perf_counter()
            n = asyncio.run(reader_only(url, admin, streams))
            res["reader"].append(n / (time.perf_counter() - t))
            n, el, st = asyncio.run(sdk(url, admin, topic, args.records, True))
            assert n == args.records, n
            res["sdk"].append(n / el)
            gated = st.gated
            n, el, _ = asyncio.run(sdk(url, admin, topic, args.records, False))
            res["sdk-ungated"].append(n / el)
        med = {k: statistics.median(v) for k, v in res.items()}
        base = max(med["raw"], med["raw-ordered"])
        print(f"{args.records} records of 100 bytes, 5000 keys, 4 partitions grown to 8 (2 epochs), median of {args.rounds} rounds; "
              f"Python {sys.version.split()[0]}, nats-py {importlib.metadata.version('nats-py')}")
        print(f"{'path':<52} {'records/s':>10} {'vs raw':>8} {'vs reader':>10}")
        for name, label in [("raw", "raw nats-py pull consumers, fetch(256)"), ("raw-ordered", "raw nats-py ordered push consumers"),
                            ("reader", "the SDK's stream reader alone (no group)"),
                            ("sdk", "SDK consumer-group member, gating on"), ("sdk-ungated", "SDK member, gating off")]:
            print(f"{label:<52} {med[name]:>10,.0f} {med[name] / base:>7.2f}x {med[name] / med['reader']:>9.2f}x")
        print(f"records that waited at a gate (gating on): {gated}")
        print(f"ratio sdk/raw nats-py = {med['sdk'] / base:.2f} (target >= 0.8); sdk/its own reader = {med['sdk'] / med['reader']:.2f}; "
              f"gating on/off = {med['sdk'] / med['sdk-ungated']:.2f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
