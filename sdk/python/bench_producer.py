#!/usr/bin/env python3
"""Producer throughput: the SDK's fast-batch producer (spec/protocol.md §5.1.2) against the SDK's
previous producer (plain request/reply publishes, up to max_in_flight per partition, §5.1.3), in
the same run, on the same broker; prints the ratio.

The previous producer is the file sdk/python/src/pctl/producer.py at commit BASELINE (read with
`git show`, loaded as a module of the package, so both use the same client, partitioner and
connection code). It starts `pctl serve` (the binary $PCTL_BIN, else built from this checkout) on a
temp dir (`--sync-interval` passed on: the default fsyncs before every acknowledgement, which makes
the server the bottleneck), and, --rounds times alternating, sends --records records (100-byte
values, 5,000 keys) to a new topic of 4 partitions with each producer and waits for every
acknowledgement. It prints records/s (wall clock: on a loaded machine mostly the server's pace)
and the producer process's CPU time per record, and the ratios against the previous producer.

    sdk/python/.venv/bin/python sdk/python/bench_producer.py [--records 50000] [--rounds 3] [--sync-interval 2m]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pctl

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"broker ready at (\S+) \(data (.+); admin credentials (.+)\)")
BASELINE = "f5e30dd376a47c43bf29fd7b9cc9f37cd420d01e"  # the last commit with the request/reply producer


def load_baseline(tmp: Path):
    src = subprocess.run(["git", "show", f"{BASELINE}:sdk/python/src/pctl/producer.py"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    path = tmp / "baseline_producer.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("pctl._baseline_producer", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def start_broker(tmp: Path, sync: str):
    binary = os.environ.get("PCTL_BIN")
    if not binary:
        binary = str(tmp / "pctl")
        subprocess.run(["go", "build", "-o", binary, "./cmd/pctl"], cwd=ROOT, check=True)
    args = [binary, "serve", "--data", str(tmp / "data"), "--listen", "127.0.0.1:0"]
    if sync:
        args += ["--sync-interval", sync]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(tmp / "serve.log", "wb"), text=True)
    m = READY.search(proc.stdout.readline())
    if not m:
        proc.kill()
        sys.exit(f"pctl serve did not start; see {tmp / 'serve.log'}")
    return proc, binary, m.group(1), tmp / "data"


async def run_one(url: str, creds: str, topic: str, create, records: list) -> tuple:
    async with await pctl.connect(url, creds) as c:
        p = await create(c, topic)
        t, cpu = time.perf_counter(), time.process_time()
        futs = [await p.send(k, v) for k, v in records]
        res = await asyncio.gather(*futs, return_exceptions=True)
        dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
        await p.close()
    bad = [r for r in res if not isinstance(r, pctl.RecordMetadata) and type(r).__name__ != "RecordMetadata"]
    if bad:
        sys.exit(f"{len(bad)} records failed: {bad[:3]}")
    return len(records) / dt, dcpu * 1e6 / len(records)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync-interval", default="", help="pctl serve --sync-interval (default: the broker's, fsync always)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pctl-bench-producer-"))
    old = load_baseline(tmp)
    proc, binary, url, data = start_broker(tmp, args.sync_interval)
    admin, producer = str(data / "admin.nk"), str(data / "producer.nk")
    records = [(f"key-{i % 5000}", os.urandom(50).hex().encode()) for i in range(args.records)]
    paths = {
        "request/reply (before)": lambda c, t: old.Producer.create(c, t),
        "fast batches (now)": lambda c, t: pctl.Producer.create(c, t),
    }
    got: dict = {k: [] for k in paths}
    try:
        for r in range(args.rounds):
            for name, create in paths.items():
                topic = "bench-" + uuid.uuid4().hex[:8]
                subprocess.run([binary, "topic", "create", topic, "--partitions", "4", "--partitioner", "kafka-murmur2",
                                "--server", url, "--creds", admin], check=True, capture_output=True)
                rate, us = asyncio.run(run_one(url, producer, topic, create, records))
                got[name].append((rate, us))
                print(f"round {r + 1}: {name}: {rate:,.0f} records/s, {us:.1f} µs of producer CPU a record", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    base = statistics.median(r for r, _ in got["request/reply (before)"])
    base_us = statistics.median(u for _, u in got["request/reply (before)"])
    print(f"\n{args.records} records, 4 partitions, 100-byte values, sync-interval {args.sync_interval or 'always (default)'}; "
          f"median of {args.rounds} rounds (the producer's process CPU is what it costs; records/s also depends on the server):")
    for name, runs in got.items():
        m = statistics.median(r for r, _ in runs)
        us = statistics.median(u for _, u in runs)
        print(f"  {name:26s} {m:10,.0f} records/s {m / base:5.2f}x   {us:6.1f} µs CPU a record {base_us / us:5.2f}x less")


if __name__ == "__main__":
    main()
