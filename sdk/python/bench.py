#!/usr/bin/env python3
"""Offline partitioning throughput: plugins/builtin/kafka-murmur2.wasm through the SDK
(pctl.Partitioner on wasmtime) against the native Python kafka-murmur2 written from
spec/builtins.md (pctl._native, the fast path of connect(native_builtins=True)), measured in the
same run on the same keys; prints the ratios.

    sdk/python/.venv/bin/python sdk/python/bench.py [--keys 200000] [--n 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
from pctl._native import kafka_murmur2, murmur2  # noqa: E402,F401 - the native path of native_builtins=True


def _rate(f, keys, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(keys)
        best = min(best, time.perf_counter() - t)
    return len(keys) / best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--n", type=int, default=12)
    args = ap.parse_args(argv)
    import pctl

    wasm = Path(__file__).resolve().parents[2] / "plugins" / "builtin" / "kafka-murmur2.wasm"
    t = time.perf_counter()
    p = pctl.Partitioner.load(wasm)
    load = time.perf_counter() - t
    keys = [f"user-{i}".encode() for i in range(args.keys)]
    n = args.n
    want = [kafka_murmur2(k, n) for k in keys]
    assert p.partition_many(keys, n) == want, "the SDK and the native kafka-murmur2 disagree"

    native = _rate(lambda ks: [kafka_murmur2(k, n) for k in ks], keys)
    batch = _rate(lambda ks: p.partition_many(ks, n), keys)
    single_keys = keys[: max(1, len(keys) // 10)]
    single = _rate(lambda ks: [p.partition(k, n) for k in ks], single_keys)
    print(f"kafka-murmur2, {len(keys)} keys of {min(map(len, keys))}-{max(map(len, keys))} bytes, n={n}; "
          f"Python {sys.version.split()[0]}; module load {load * 1000:.0f} ms")
    print(f"  native Python              {native:12,.0f} keys/s   1.00x")
    print(f"  SDK, partition_many (wasm) {batch:12,.0f} keys/s   {batch / native:.2f}x native")
    print(f"  SDK, partition (wasm)      {single:12,.0f} keys/s   {single / native:.2f}x native")
    return 0


if __name__ == "__main__":
    sys.exit(main())
