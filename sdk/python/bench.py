#!/usr/bin/env python3
"""Offline partitioning throughput: each built-in's WebAssembly module through the SDK
(pctl.Partitioner on wasmtime) against its native Python implementation written from
spec/builtins.md (pctl._native, the fast path of connect(native_builtins=True)), measured in the
same run on the same keys; prints keys/s and the ratios WASM time / native time, per call
(Partitioner.partition) and batched (partition_many). The results are compared before timing.

    sdk/python/.venv/bin/python sdk/python/bench.py [--keys 20000] [--n 12] [--reps 15] [--only kafka-murmur2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
from pctl._native import kafka_murmur2  # noqa: E402,F401 - tests/test_partitioner.py checks it against the vectors


def _rates(fs, keys, reps: int) -> list[float]:
    """keys/s of each f(keys), the best of `reps` rounds, the fs interleaved round by round: on a
    shared machine a preempted round says nothing about either path, and both see the same load."""
    best = [float("inf")] * len(fs)
    for _ in range(reps):
        for i, f in enumerate(fs):
            t = time.perf_counter()
            f(keys)
            best[i] = min(best[i], time.perf_counter() - t)
    return [len(keys) / b for b in best]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--reps", type=int, default=15, help="rounds per measurement, the best counts")
    ap.add_argument("--only", action="append", help="a built-in's name (repeatable); default: all")
    args = ap.parse_args(argv)
    import pctl
    from pctl._native import NATIVE_MANY, native_for

    n = args.n
    sets = {
        "user-<i>, 6-11 bytes": [f"user-{i}".encode() for i in range(args.keys)],
        "16 bytes": [f"k{i}".ljust(16, ".").encode() for i in range(args.keys)],
    }
    print(f"Python {sys.version.split()[0]}, {args.keys} keys per set, n={n}, best of {args.reps}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'built-in':22s} {'keys':20s} {'wasm call':>11s} {'native call':>12s} {'ratio':>7s} "
          f"{'wasm batch':>11s} {'native batch':>13s} {'ratio':>7s}  (keys/s; ratio = wasm time / native time)")
    for name in args.only or pctl.builtin_names():
        wasm = pctl.Partitioner.builtin(name)
        nat = native_for(wasm.digest)
        for label, keys in sets.items():
            want = wasm.partition_many(keys, n)
            assert nat.partition_many(keys, n) == want, f"{name}: the native batch and the module disagree"
            single = keys[: max(1, len(keys) // 10)]
            assert [nat.partition(k, n) for k in single] == want[: len(single)], f"{name}: native and module disagree"
            wc, nc = _rates([lambda ks: [wasm.partition(k, n) for k in ks], lambda ks: [nat.partition(k, n) for k in ks]], single, args.reps)
            wb, nb = _rates([lambda ks: wasm.partition_many(ks, n), lambda ks: nat.partition_many(ks, n)], keys, args.reps)
            how = "" if name in NATIVE_MANY else "  (native batch = the module's: no native batch)"
            print(f"{name:22s} {label:20s} {wc:11,.0f} {nc:12,.0f} {nc / wc:6.2f}x {wb:11,.0f} {nb:13,.0f} {nb / wb:6.2f}x{how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
