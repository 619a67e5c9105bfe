"""The native fast path (spec/builtins.md, "The native fast path"): Python implementations of the
built-in partitioners, written from spec/builtins.md, used instead of a topic's module only when
the client was connected with ``native_builtins=True`` and the epoch's module has exactly the
digest of a built-in module this package ships (``pctl/builtin``), without config. The module
stays the reference: tests/test_native.py pins every function here to it (random keys, both
entry points) and to spec/vectors; any other digest (an upload claiming compatible:<builtin>
included) runs as a module."""

from __future__ import annotations

import hashlib
import struct
import zlib
from bisect import bisect_right
from importlib import resources
from typing import Callable, Optional, Sequence

from .errors import BadRequest
from .partitioner import Key, Partitioner, _check_n, _key_bytes, builtin_names
from .runtime import MAX_KEY

_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def murmur2(key: bytes) -> int:
    """Kafka's murmur2 of the key, as an unsigned 32-bit int."""
    n = len(key)
    h = (0x9747B28C ^ n) & _MASK32
    whole = n & ~3
    for (k,) in struct.iter_unpack("<I", key[:whole]):
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    t = n & 3
    if t == 3:
        h ^= key[whole + 2] << 16
    if t >= 2:
        h ^= key[whole + 1] << 8
    if t >= 1:
        h ^= key[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def kafka_murmur2(key: bytes, n: int) -> int:
    """(murmur2(key) & 0x7fffffff) % n: Kafka's toPositive, not abs."""
    return (murmur2(key) & 0x7FFFFFFF) % n


def linear_murmur2(key: bytes, n: int) -> int:
    """Linear hashing over murmur2: h % 2b, minus b when that is >= n (b = 2^floor(log2 n))."""
    h = murmur2(key) & 0x7FFFFFFF
    b = 1 << (n.bit_length() - 1)
    p = h % (2 * b)
    return p - b if p >= n else p


def librdkafka_consistent(key: bytes, n: int) -> int:
    """crc32 (IEEE, zlib's) of the key, unsigned % n."""
    return zlib.crc32(key) % n


def _fnv1a32(key: bytes) -> int:
    h = 0x811C9DC5
    for c in key:
        h = ((h ^ c) * 0x01000193) & _MASK32
    return h


def librdkafka_fnv1a(key: bytes, n: int) -> int:
    """abs(FNV-1a 32 as int32) as u32 (abs(INT32_MIN) = 0x80000000), unsigned % n."""
    h = _fnv1a32(key)
    if h & 0x80000000:
        h = (-(h - (1 << 32))) & _MASK32  # |h| of the int32; INT32_MIN stays 0x80000000
    return h % n


def sarama_fnv1a(key: bytes, n: int) -> int:
    """FNV-1a 32 as int32, truncating % n (C/Go, not Python's floor %), negated if negative."""
    h = _fnv1a32(key)
    if h & 0x80000000:
        return ((1 << 32) - h) % n  # h < 0 as int32: truncating h % n is -(|h| % n), negated
    return h % n


_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK64, 31) * _P1) & _MASK64


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _MASK64


def xxh64(key: bytes) -> int:
    """XXH64 of the key with seed 0 (as Cyan4973/xxHash)."""
    n = len(key)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (_P1 + _P2) & _MASK64, _P2, 0, (-_P1) & _MASK64
        stripes = n // 32 * 32
        for a, b, c, d in struct.iter_unpack("<4Q", key[:stripes]):
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
        i = stripes
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK64
        h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    else:
        h = _P5
    h = (h + n) & _MASK64
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", key, i)
        h = (_rotl(h ^ _round(0, lane), 27) * _P1 + _P4) & _MASK64
        i += 8
    if i + 4 <= n:
        (lane,) = struct.unpack_from("<I", key, i)
        h = (_rotl(h ^ ((lane * _P1) & _MASK64), 23) * _P2 + _P3) & _MASK64
        i += 4
    while i < n:
        h = (_rotl(h ^ ((key[i] * _P5) & _MASK64), 11) * _P1) & _MASK64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK64
    h ^= h >> 29
    h = (h * _P3) & _MASK64
    h ^= h >> 32
    return h


def jump(key: bytes, n: int) -> int:
    """The paper's jump consistent hash over XXH64 (seed 0); its float expression in order."""
    k = xxh64(key)
    b, j = -1, 0
    while j < n:
        b = j
        k = (k * 2862933555777941757 + 1) & _MASK64
        j = int((b + 1) * (float(1 << 31) / float((k >> 33) + 1)))
    return b


#: The native functions by built-in name: f(key bytes, n) -> partition, for 1 <= n <= 2^31-1.
NATIVE: dict[str, Callable[[bytes, int], int]] = {
    "jump": jump,
    "kafka-murmur2": kafka_murmur2,
    "librdkafka-consistent": librdkafka_consistent,
    "librdkafka-fnv1a": librdkafka_fnv1a,
    "linear-murmur2": linear_murmur2,
    "sarama-fnv1a": sarama_fnv1a,
}

_digests: Optional[dict[str, str]] = None


def _builtin_module(name: str) -> bytes:
    return resources.files("pctl").joinpath("builtin", name + ".wasm").read_bytes()


def builtin_digests() -> dict[str, str]:
    """digest -> built-in name, for the modules this package ships, computed once."""
    global _digests
    if _digests is None:
        _digests = {hashlib.sha256(_builtin_module(name)).hexdigest(): name for name in builtin_names() if name in NATIVE}
    return _digests


# The batch path (partition_many): CPython runs a loop over keys at some 1-3 us per key for these
# hashes, slower than one crossing into the module's batch export. So the batch functions below
# hash many keys at once with Python's big integers as vectors ("SWAR"): the keys of one length are
# packed into one int, one 64-bit lane per key, the 32-bit state in each lane's low half, and each
# step of the hash (multiply by a 32-bit constant, xor, shift) is one big-int operation over all
# the lanes, run in C. A 32 x 32-bit product fits its 64-bit lane, so a multiply never carries
# into the next lane; what a right shift brings down from the next lane, and the high half of a
# product, are masked off (_ONES) before they could. bench.py and tests/test_native.py print the
# ratios against the module's batch; the tests pin every lane to the scalar functions and the
# module.

_LANES = 4096  # keys per vector: big enough to amortise the per-operation cost, small enough for the cache
_SWAR_MIN = 8  # fewer keys of one length than this hash one by one
_lane_masks: dict[int, tuple[int, int]] = {}


def _masks(m: int) -> tuple[int, int]:
    """(0x00000000FFFFFFFF in each of m 64-bit lanes, 1 in each lane), cached by m."""
    c = _lane_masks.get(m)
    if c is None:
        c = (int.from_bytes(b"\xff\xff\xff\xff\x00\x00\x00\x00" * m, "little"), int.from_bytes((b"\x01" + bytes(7)) * m, "little"))
        if len(_lane_masks) < 64:
            _lane_masks[m] = c
    return c


def _murmur2_vec(data: bytes, length: int, m: int) -> int:
    """murmur2 of the m keys of `length` bytes each laid end to end in `data`, in m lanes."""
    ones, one = _masks(m)
    fb = int.from_bytes
    h = one * ((0x9747B28C ^ length) & _MASK32)
    buf = bytearray(8 * m)  # lane i's bytes 0-3 are word j of key i, bytes 4-7 stay 0
    whole = length & ~3
    for o in range(0, whole, 4):
        buf[0::8] = data[o::length]
        buf[1::8] = data[o + 1::length]
        buf[2::8] = data[o + 2::length]
        buf[3::8] = data[o + 3::length]
        k = (fb(buf, "little") * _M) & ones
        k = ((k ^ ((k >> 24) & ones)) * _M) & ones
        h = ((h * _M) & ones) ^ k
    t = length & 3
    if t:
        zero = bytes(m)
        buf[3::8] = zero
        buf[2::8] = data[whole + 2::length] if t == 3 else zero
        buf[1::8] = data[whole + 1::length] if t >= 2 else zero
        buf[0::8] = data[whole::length]
        h = ((h ^ fb(buf, "little")) * _M) & ones
    h ^= (h >> 13) & ones
    h = (h * _M) & ones
    return h ^ ((h >> 15) & ones)


def _fnv1a32_vec(data: bytes, length: int, m: int) -> int:
    """FNV-1a 32 of the m keys of `length` bytes each laid end to end in `data`, in m lanes."""
    ones, one = _masks(m)
    fb = int.from_bytes
    h = one * 0x811C9DC5
    buf = bytearray(8 * m)  # lane i's byte 0 is byte j of key i
    for o in range(length):
        buf[0::8] = data[o::length]
        h = ((h ^ fb(buf, "little")) * 0x01000193) & ones
    return h


def _mod_lanes(x: int, m: int, n: int) -> int:
    """x % n in each of m lanes, for lane values x <= 2^31 and 1 <= n < 2^31. A power of two is a
    mask; any other n divides by multiplying with c = ceil(2^s / n), s = 31 + l, l = ceil(log2 n)
    (the round-up method of Granlund and Montgomery, exact here: (c*n - 2^s) * x < n * 2^31 <= 2^s;
    and x * c <= 2^31 * 2^32 fits the lane); then x - q*n per lane, never below 0."""
    _, one = _masks(m)
    if n & (n - 1) == 0:
        return x & (one * (n - 1))
    s = 31 + n.bit_length()
    c = -(-(1 << s) // n)
    q = ((x * c) >> s) & (one * ((1 << (64 - s)) - 1))  # q < 2^(32 - l): the next lane's bits start at 64 - s
    return x - q * n


def _kafka_murmur2_lanes(h: int, m: int, n: int) -> int:
    _, one = _masks(m)
    return _mod_lanes(h & (one * 0x7FFFFFFF), m, n)


def _linear_murmur2_lanes(h: int, m: int, n: int) -> int:
    _, one = _masks(m)
    b = 1 << (n.bit_length() - 1)
    p = h & (one * (2 * b - 1))  # (h & 0x7fffffff) % 2b, 2b <= 2^31
    ge = ((p + one * ((1 << 32) - n)) >> 32) & one  # 1 where p >= n: bit 32 of p + 2^32 - n
    return p - ge * b


def _fnv1a_lanes(h: int, m: int, n: int) -> int:
    # librdkafka's abs(int32) as u32 and sarama's truncating % negated are both |h as int32| % n
    # (abs(INT32_MIN) = 2^31 in both); the scalar functions above spell each one out.
    ones, one = _masks(m)
    sel = ((h >> 31) & one) * _MASK32  # all ones in the lanes where h is negative as an int32
    neg = ((h ^ ones) + one) & ones  # 2^32 - h
    return _mod_lanes((neg & sel) | (h & (sel ^ ones)), m, n)


def _lanes_list(x: int, m: int) -> list[int]:
    return memoryview(x.to_bytes(8 * m, "little")).cast("Q").tolist()


def _vector_many(keys: list[bytes], n: int, vec: Callable[[bytes, int, int], int],
                 post: Callable[[int, int, int], int], one: Callable[[bytes, int], int], lens: Optional[list[int]]) -> list[int]:
    """The partition of each key, in order: runs of keys of one length through `vec` and `post`
    (sorted by length first when the lengths differ), runs shorter than _SWAR_MIN through `one`.
    `lens` is the keys' lengths when the caller has them."""
    m = len(keys)
    if m < _SWAR_MIN:
        return [one(k, n) for k in keys]
    if lens is None:
        lens = list(map(len, keys))
    lo = min(lens)
    if lo == max(lens):
        out: list[int] = []
        for i in range(0, m, _LANES):
            part = keys[i:i + _LANES]
            c = len(part)
            out += _lanes_list(post(vec(b"".join(part), lo, c), c, n), c)
        return out
    order = sorted(range(m), key=lens.__getitem__)
    sl = [lens[x] for x in order]
    got: list[int] = []
    i = 0
    while i < m:
        length = sl[i]
        j = bisect_right(sl, length, i, min(m, i + _LANES))
        if j - i < _SWAR_MIN:
            got += [one(keys[x], n) for x in order[i:j]]
        else:
            c = j - i
            got += _lanes_list(post(vec(b"".join([keys[x] for x in order[i:j]]), length, c), c, n), c)
        i = j
    out = [0] * m
    for x, v in zip(order, got):
        out[x] = v
    return out


def _kafka_murmur2_many(keys: list[bytes], n: int, lens: Optional[list[int]] = None) -> list[int]:
    return _vector_many(keys, n, _murmur2_vec, _kafka_murmur2_lanes, kafka_murmur2, lens)


def _linear_murmur2_many(keys: list[bytes], n: int, lens: Optional[list[int]] = None) -> list[int]:
    return _vector_many(keys, n, _murmur2_vec, _linear_murmur2_lanes, linear_murmur2, lens)


def _librdkafka_fnv1a_many(keys: list[bytes], n: int, lens: Optional[list[int]] = None) -> list[int]:
    return _vector_many(keys, n, _fnv1a32_vec, _fnv1a_lanes, librdkafka_fnv1a, lens)


def _sarama_fnv1a_many(keys: list[bytes], n: int, lens: Optional[list[int]] = None) -> list[int]:
    return _vector_many(keys, n, _fnv1a32_vec, _fnv1a_lanes, sarama_fnv1a, lens)


def _librdkafka_consistent_many(keys: list[bytes], n: int, lens: Optional[list[int]] = None) -> list[int]:
    return [c % n for c in map(zlib.crc32, keys)]  # zlib's crc32 is C already: no vectors needed


#: The native batch functions by built-in name: f(list of key bytes, n, their lengths or None) ->
#: partitions, for the built-ins whose native batch is faster than the module's batch export in
#: CPython (bench.py prints each ratio). jump is not here: its loop runs ln(n) float steps per
#: key, which no big-int vector does, and the module's batch runs it faster than CPython's loop
#: over the keys (about 1.0x against the module, measured: no gain to take).
NATIVE_MANY: dict[str, Callable[[list[bytes], int, Optional[list[int]]], list[int]]] = {
    "kafka-murmur2": _kafka_murmur2_many,
    "librdkafka-consistent": _librdkafka_consistent_many,
    "librdkafka-fnv1a": _librdkafka_fnv1a_many,
    "linear-murmur2": _linear_murmur2_many,
    "sarama-fnv1a": _sarama_fnv1a_many,
}

# A built-in without a native batch (NATIVE_MANY) runs partition_many of more than this many keys
# in the module's batch export (pctl_partition_batch): one crossing into wasmtime then costs less
# than CPython's loop over the keys.
_NATIVE_BATCH_MAX = 8


class NativePartitioner(Partitioner):
    """A built-in's :class:`Partitioner` that partitions natively: the module is loaded (digest,
    name and metadata are the module's), but :meth:`partition` runs the Python function and
    :meth:`partition_many` the native batch function (NATIVE_MANY), with the module path's checks
    and errors (:class:`pctl.BadRequest` for a bad `n` or a key over 64 KiB). A built-in without a
    native batch function (jump) runs batches of more than a few keys in the module's batch
    export, which is faster in CPython than a loop over the keys."""

    def __init__(self, module: bytes, fn: Callable[[bytes, int], int], *, source: str = "",
                 many: Optional[Callable[[list[bytes], int, Optional[list[int]]], list[int]]] = None):
        super().__init__(module, source=source)
        self._native = fn
        self._many = many

    def partition(self, key: Key, n: int) -> int:
        k = _key_bytes(key)
        _check_n(n)
        if len(k) > MAX_KEY:
            raise BadRequest(f"key too long: {len(k)} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
        return self._native(k, n)

    def partition_many(self, keys: Sequence[Key], n: int) -> list[int]:
        if self._many is None and len(keys) > _NATIVE_BATCH_MAX:
            return super().partition_many(keys, n)  # the module's batch export is faster here
        ks = list(keys) if set(map(type, keys)) <= {bytes} else [_key_bytes(k) for k in keys]
        _check_n(n)
        lens = list(map(len, ks))
        if ks and max(lens) > MAX_KEY:
            i = next(i for i, k in enumerate(lens) if k > MAX_KEY)
            raise BadRequest(f"key too long: key {i} has {lens[i]} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
        if self._many is not None:
            return self._many(ks, n, lens)
        f = self._native
        return [f(k, n) for k in ks]


def native_for(digest: str, config: bytes = b"", module: Optional[bytes] = None) -> Optional[NativePartitioner]:
    """The native partitioner for an epoch's module `digest` and `config`, or None: only when the
    digest is exactly that of a built-in module this package ships and there is no config.
    `module` is the module's bytes (verified by the caller), else the package's copy."""
    if config:
        return None
    name = builtin_digests().get(digest)
    if name is None:
        return None
    data = module if module is not None else _builtin_module(name)
    if hashlib.sha256(data).hexdigest() != digest:
        return None
    return NativePartitioner(data, NATIVE[name], source="built-in " + name, many=NATIVE_MANY.get(name))
