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


# Beyond this many keys partition_many runs the module's batch export (pctl_partition_batch): one
# crossing into wasmtime then costs less than CPython's loop over the keys (16-byte keys: about
# 0.6-2 us per key in the module's batch against 3-5 us per key in Python, with some 20 us per
# crossing; the ratio test prints both).
_NATIVE_BATCH_MAX = 8


class NativePartitioner(Partitioner):
    """A built-in's :class:`Partitioner` that partitions natively: the module is loaded (digest,
    name and metadata are the module's), but :meth:`partition` and :meth:`partition_many` of a
    few keys run the Python function, with the module path's checks and errors
    (:class:`pctl.BadRequest` for a bad `n` or a key over 64 KiB); larger batches run the
    module's batch export, which is faster in CPython."""

    def __init__(self, module: bytes, fn: Callable[[bytes, int], int], *, source: str = ""):
        super().__init__(module, source=source)
        self._native = fn

    def partition(self, key: Key, n: int) -> int:
        k = _key_bytes(key)
        _check_n(n)
        if len(k) > MAX_KEY:
            raise BadRequest(f"key too long: {len(k)} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
        return self._native(k, n)

    def partition_many(self, keys: Sequence[Key], n: int) -> list[int]:
        if len(keys) > _NATIVE_BATCH_MAX:
            return super().partition_many(keys, n)  # the module's batch export is faster here
        ks = [_key_bytes(k) for k in keys]
        _check_n(n)
        for i, k in enumerate(ks):
            if len(k) > MAX_KEY:
                raise BadRequest(f"key too long: key {i} has {len(k)} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
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
    return NativePartitioner(data, NATIVE[name], source="built-in " + name)
