"""The native fast path (spec/builtins.md): every Python built-in of pctl._native against its
spec/vectors file (partitions computed by the real clients, never by pctl), against this SDK's own
run of the built-in's WebAssembly module (wasmtime) on random keys through both entry points, and
the switch: only connect(native_builtins=True) and only a built-in's exact digest without config
take the native path (a real broker: a topic of the built-in and one of another module)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import time

import pytest

import pctl
from pctl._native import _LANES, _SWAR_MIN, _mod_lanes, NATIVE, NATIVE_MANY, NativePartitioner, builtin_digests, native_for
from conftest import ROOT, VECTORS

NS = [1, 2, 3, 7, 8, 16, 31, 100, 1000, 65535, 2147483647]
# Random keys of 0-300 bytes per built-in, each against the 11 counts of NS (330,000 comparisons):
# 1 to 8 s per built-in on this machine, most of it the module's calls through wasmtime
# (PCTL_NATIVE_KEYS overrides; the Go test's million keys would take minutes here).
KEYS = int(os.environ.get("PCTL_NATIVE_KEYS", "30000"))


def random_keys(seed: int, count: int) -> list[bytes]:
    r = random.Random(seed)
    return [r.randbytes(r.randrange(301)) for _ in range(count)]


def keys_txt() -> list[tuple[str, int]]:
    out = []
    for line in (VECTORS / "keys.txt").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        ns, k = line.split(" ")
        out += [(k[1:], int(n)) for n in ns.split(",")]
    return out


def test_every_built_in_has_a_native_function():
    assert sorted(NATIVE) == pctl.builtin_names()
    assert sorted(builtin_digests().values()) == pctl.builtin_names()


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_native_against_the_vectors(name):
    v = json.loads((VECTORS / f"{name}.json").read_text())
    assert v["partitioner"] == name
    assert [(c["key_hex"], c["n"]) for c in v["cases"]] == keys_txt(), f"{name}.json: the cases of keys.txt"
    f = NATIVE[name]
    for c in v["cases"]:
        got = f(bytes.fromhex(c["key_hex"]), c["n"])
        assert got == c["partition"], f"{name}: key {c['key_hex']} n={c['n']}: native gives {got}, {v['source']} gives {c['partition']}"
    p = native_for(pctl.Partitioner.builtin(name).digest)
    by_n: dict[int, list] = {}
    for c in v["cases"]:
        by_n.setdefault(c["n"], []).append(c)
    for n, cs in by_n.items():
        assert p.partition_many([bytes.fromhex(c["key_hex"]) for c in cs], n) == [c["partition"] for c in cs], f"{name} partition_many n={n}"


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_native_agrees_with_the_module(name):
    keys = random_keys(1, KEYS)
    wasm = pctl.Partitioner.builtin(name)
    f = NATIVE[name]
    for n in NS:
        got = wasm.partition_many(keys, n)  # pctl_partition_batch
        for k, g in zip(keys, got):
            want = f(k, n)
            if g != want:
                pytest.fail(f"{name} n={n} key={k.hex()}: wasm {g}, native {want}: the native implementation is not the module's")
    for i, k in enumerate(keys[:5000]):  # pctl_partition, the single-call export
        n = NS[i % len(NS)]
        r = wasm.partition(k, n)
        if r != f(k, n):
            pytest.fail(f"{name} single call n={n} key={k.hex()}: wasm {r}, native {f(k, n)}")


def batch_keys() -> list[bytes]:
    """Keys for the vector batch: random lengths 0-300 (runs of each length through the lanes,
    short runs one by one), every length 0-40 many times over in one shuffled batch, and more keys
    of one length than one vector holds."""
    r = random.Random(3)
    keys = random_keys(2, KEYS // 3)
    keys += [r.randbytes(L) for L in range(41) for _ in range(3 * _SWAR_MIN)]
    keys += [r.randbytes(16) for _ in range(_LANES + 100)]
    r.shuffle(keys)
    return keys


@pytest.mark.parametrize("name", sorted(NATIVE_MANY))
def test_native_batch_agrees_with_the_module(name):
    """NATIVE_MANY (the vector batch of NativePartitioner.partition_many) against the module's
    batch export, key by key, on mixed lengths and on batches of one length (the path without the
    sort), n including powers of two (reduced in the lanes) and 1."""
    keys = batch_keys()
    wasm = pctl.Partitioner.builtin(name)
    nat = native_for(wasm.digest)
    f = NATIVE_MANY[name]
    for n in NS + [4, 1024, 2**30]:
        want = wasm.partition_many(keys, n)
        got = f(keys, n)
        assert len(got) == len(keys)
        for k, g, w in zip(keys, got, want):
            if g != w:
                pytest.fail(f"{name} batch n={n} key={k.hex()}: wasm {w}, native batch {g}: the native batch is not the module's")
        assert nat.partition_many(keys, n) == want, f"{name} NativePartitioner.partition_many n={n}"
    for L in (0, 1, 2, 3, 4, 5, 7, 8, 11, 16, 33):
        same = [random.Random(L).randbytes(L) for _ in range(2 * _SWAR_MIN)] + [bytes([i]) * L for i in range(256)]
        for n in (7, 1000, 2**16):
            assert f(same, n) == wasm.partition_many(same, n), f"{name}: {len(same)} keys of {L} bytes, n={n}"
    assert f([], 5) == []


def test_mod_lanes_is_python_mod_at_the_edges():
    """The batch's % n in the lanes (a multiply by ceil(2^s / n)) against Python's %, for lane
    values up to 2^31 (FNV-1a's |INT32_MIN|) and n near powers of two, near 2^31 and random."""
    r = random.Random(5)
    ns = [1, 3, 7, 12, 1000, 65535, 65537, 2**30 - 1, 2**30 + 1, 2**31 - 1, 3 * 2**29]
    ns += [(1 << b) + d for b in range(2, 31) for d in (-1, 1)] + [r.randrange(1, 2**31) for _ in range(100)]
    for n in ns:
        xs = [0, 1, 2**31, 2**31 - 1, n - 1, n, n + 1, 2 * n - 1, (2**31 // n) * n, (2**31 // n) * n - 1]
        xs = [x for x in xs if 0 <= x <= 2**31] + [r.randrange(2**31 + 1) for _ in range(200)]
        lanes = int.from_bytes(b"".join(x.to_bytes(8, "little") for x in xs), "little")
        got = _mod_lanes(lanes, len(xs), n).to_bytes(8 * len(xs), "little")
        assert [int.from_bytes(got[8 * i:8 * i + 8], "little") for i in range(len(xs))] == [x % n for x in xs], f"n={n}"


def test_jump_batches_run_the_module():
    """jump has no native batch (its ln(n) float steps per key do not vectorise): more than a few
    keys go to the module's batch export, a few run natively; both agree with the module."""
    assert "jump" not in NATIVE_MANY
    wasm = pctl.Partitioner.builtin("jump")
    nat = native_for(wasm.digest)
    keys = random_keys(4, 200)
    for n in (1, 7, 1000):
        assert nat.partition_many(keys, n) == wasm.partition_many(keys, n)
        assert nat.partition_many(keys[:3], n) == wasm.partition_many(keys[:3], n)


def test_native_for_takes_a_built_in_digest_without_config_only():
    for name in pctl.builtin_names():
        d = pctl.Partitioner.builtin(name).digest
        p = native_for(d)
        assert isinstance(p, NativePartitioner) and p.digest == d and p.name == name
        assert native_for(d, b"a=1\x00") is None, f"{name} with config runs the module"
    for other in ("kafka-murmur2-rust", "kafka-murmur2-as", "kafka-murmur2-go"):
        data = (ROOT / "plugins" / "murmur2" / f"{other}.wasm").read_bytes()
        assert native_for(hashlib.sha256(data).hexdigest(), b"", data) is None, f"{other}: another module of the same function is still run as a module"


def test_native_errors_are_the_module_paths():
    p = native_for(pctl.Partitioner.builtin("kafka-murmur2").digest)
    w = pctl.Partitioner.builtin("kafka-murmur2")
    assert p.partition("user-1", 12) == w.partition("user-1", 12), "str keys are UTF-8"
    for bad in (0, -1, 2**31, 1.5, True):
        for q in (p, w):
            with pytest.raises(pctl.BadRequest):
                q.partition(b"k", bad)
        with pytest.raises(pctl.BadRequest):
            p.partition_many([b"k"], bad)
    for q in (p, w):
        with pytest.raises(pctl.BadRequest, match="key too long"):
            q.partition(bytes(65537), 3)
    with pytest.raises(pctl.BadRequest, match="key too long"):
        p.partition_many([b"a", bytes(65537)], 3)
    assert p.partition(bytes(65536), 3) == w.partition(bytes(65536), 3), "a key of exactly 65536 bytes is a key"
    few = [b"", b"a", "é".encode(), bytes(range(40))]
    for n in NS:
        assert p.partition_many(few, n) == w.partition_many(few, n), f"a small batch (native) n={n}"


def test_native_vs_wasm_per_call_ratio():
    """kafka-murmur2, 16-byte keys, Partitioner.partition per call: printed, never asserted."""
    keys = [f"k{i}".ljust(16, ".").encode() for i in range(20000)]
    nat = native_for(pctl.Partitioner.builtin("kafka-murmur2").digest)
    wasm = pctl.Partitioner.builtin("kafka-murmur2")

    def run(p):
        t0 = time.perf_counter_ns()
        s = sum(p.partition(k, 1000) for k in keys)
        return time.perf_counter_ns() - t0, s

    tn, tw = [], []
    for _ in range(5):
        a, sa = run(nat)
        b, sb = run(wasm)
        assert sa == sb
        tn.append(a)
        tw.append(b)
    mn, mw = sorted(tn)[2], sorted(tw)[2]
    print(f"\nkafka-murmur2 16-byte keys, Partitioner.partition per call: wasm {mw / len(keys):.0f} ns, "
          f"native {mn / len(keys):.0f} ns: wasm/native {mw / mn:.2f}x")
    tb, tf = [], []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        got = wasm.partition_many(keys, 1000)
        t1 = time.perf_counter_ns()
        want = nat.partition_many(keys, 1000)
        tf.append(time.perf_counter_ns() - t1)
        tb.append(t1 - t0)
        assert got == want
    mb, mf = sorted(tb)[2], sorted(tf)[2]
    print(f"kafka-murmur2 16-byte keys, partition_many: wasm {mb / len(keys):.0f} ns/key, native (vectors) "
          f"{mf / len(keys):.0f} ns/key: wasm/native {mb / mf:.2f}x")


def test_the_switch_against_a_real_broker(broker):
    nat = broker.create_topic(5)
    up = json.loads(broker.pctl("plugin", "upload", str(ROOT / "plugins" / "murmur2" / "kafka-murmur2-rust.wasm"), "--json").stdout)
    usr = broker.create_topic(5, up["digest"])

    async def go():
        async with await pctl.connect(broker.url, broker.producer) as off, \
                await pctl.connect(broker.url, broker.producer, native_builtins=True) as on:
            p_off = await off.producer(nat)
            p_on = await on.producer(nat)
            p_usr = await on.producer(usr)
            keys = [f"user-{i}".encode() for i in range(100)]
            res = await asyncio.gather(*[await p_on.send(k, k) for k in keys])
            kinds = (type(p_off._part), type(p_on._part), type(p_usr._part))
            for p in (p_off, p_on, p_usr):
                await p.close()
            return kinds, [m.partition for m in res]

    kinds, parts = asyncio.run(go())
    assert kinds[0] is pctl.Partitioner, "default: the module runs"
    assert kinds[1] is NativePartitioner, "native_builtins and the built-in's digest: native"
    assert kinds[2] is pctl.Partitioner, "another module of the same function: still the module"
    keys = [f"user-{i}".encode() for i in range(100)]
    out = broker.pctl("partition", "--plugin", "kafka-murmur2", "--partitions", "5", "--hex",
                      stdin="".join(k.hex() + "\n" for k in keys), remote=False).stdout
    assert parts == list(map(int, out.split()))
