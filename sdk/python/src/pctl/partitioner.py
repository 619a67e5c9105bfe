"""Partitioning with a module, offline or for a producer.

    >>> import pctl
    >>> p = pctl.Partitioner.load("plugins/builtin/kafka-murmur2.wasm")
    >>> p.partition(b"user-1", 12)
    ...

The same bytes give the same partitions in every language (spec/abi-v1.md): this is the value of
`pctl partition --plugin FILE --partitions N KEY`, of the Go client and of the broker."""

from __future__ import annotations

import hashlib
import os
from importlib import resources
import threading
from typing import Iterable, Mapping, Optional, Sequence, Union

from .errors import BadRequest
from .runtime import MAX_KEY, MAX_PARTITIONS, CallError, Plugin, encode_config

Key = Union[bytes, bytearray, memoryview, str]
Config = Union[bytes, Mapping[str, str], Iterable[str], None]


def builtin_names() -> list[str]:
    """The names of the built-in partitioners the package carries, sorted."""
    d = resources.files("pctl").joinpath("builtin")
    return sorted(f.name[:-len(".wasm")] for f in d.iterdir() if f.name.endswith(".wasm"))


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise BadRequest(f"a key is bytes or str, not {type(key).__name__}")


def _config_bytes(config: Config) -> bytes:
    if config is None:
        return b""
    if isinstance(config, (bytes, bytearray, memoryview)):
        return bytes(config)
    if isinstance(config, str):
        raise BadRequest('config is bytes, a mapping {"K": "V"} or a list of "K=V" strings, not one str')
    return encode_config(config)


class Partitioner:
    """A partitioner module (spec/abi-v1.md) loaded with a config, ready to partition keys.

    Thread-safe: calls are serialised on one instance (a partition call takes microseconds).
    Deterministic: the result depends only on (key, n, config). When a call fails (trap, limit,
    bad result) it raises :class:`pctl.PluginFailed` naming the plugin, and the instance is
    discarded and replaced by a fresh one for the next call (§3), so a failure never turns into a
    partition and never poisons later calls."""

    def __init__(self, module: bytes, *, config: Config = None, source: str = ""):
        """`module` is the module's bytes, `config` the topic config: canonical bytes
        (abi-v1.md §2.5), a mapping of K to V or a list of "K=V" strings. `source` names the
        module in errors (a file name). Raises :class:`pctl.PluginFailed` if the module is
        refused (not WebAssembly, missing exports, forbidden imports, rejected config, ...)."""
        self._module = bytes(module)
        self._config = _config_bytes(config)
        self._source = source
        self._lock = threading.Lock()
        self._plugin: Optional[Plugin] = Plugin.open(self._module, source=source, config=self._config)
        self.digest: str = hashlib.sha256(self._module).hexdigest()
        self.metadata: dict = dict(self._plugin.metadata)
        self.profile: str = self._plugin.profile

    @classmethod
    def load(cls, module: Union[str, os.PathLike, bytes, bytearray], *, config: Config = None) -> "Partitioner":
        """A partitioner from a .wasm file's path or from the module's bytes."""
        if isinstance(module, (bytes, bytearray)):
            return cls(bytes(module), config=config)
        path = os.fspath(module)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise BadRequest(f"read plugin {path}: {e.strerror or e}; give the path of a compiled .wasm module") from None
        return cls(data, config=config, source=path)

    @classmethod
    def builtin(cls, name: str, *, config: Config = None) -> "Partitioner":
        """A built-in partitioner by name ("kafka-murmur2", "jump", ...: see :func:`builtin_names`).
        Its module is in the package (``pctl/builtin``, byte for byte the repository's
        plugins/builtin), so this needs no file and no broker."""
        if name not in builtin_names():
            raise BadRequest(f"{name!r} is not a built-in partitioner; the built-ins are {', '.join(builtin_names())}")
        data = resources.files("pctl").joinpath("builtin", name + ".wasm").read_bytes()
        return cls(data, config=config, source="built-in " + name)

    @property
    def name(self) -> str:
        """The module's declared name (metadata), "unnamed" without metadata."""
        return self.metadata.get("name", "unnamed")

    @property
    def version(self) -> str:
        return self.metadata.get("version", "0.0.0")

    @property
    def config(self) -> bytes:
        return self._config

    def __repr__(self) -> str:
        return f"<pctl.Partitioner {self.name} {self.version} sha256:{self.digest[:12]}>"

    def _instance(self) -> Plugin:
        if self._plugin is None:
            self._plugin = Plugin.open(self._module, source=self._source, config=self._config)
        return self._plugin

    def partition(self, key: Key, n: int) -> int:
        """The partition of `key` (bytes, or str as UTF-8) among `n` partitions: an int in
        [0, n). The empty key is a key. Raises :class:`pctl.BadRequest` for a key over 64 KiB or
        `n` outside [1, 2^31-1], :class:`pctl.PluginFailed` when the module fails."""
        k = _key_bytes(key)
        _check_n(n)
        if len(k) > MAX_KEY:
            raise BadRequest(f"key too long: {len(k)} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
        with self._lock:
            try:
                return self._instance().partition(k, n)
            except CallError:
                self._plugin = None  # discard the instance (abi-v1.md §3)
                raise

    def partition_many(self, keys: Sequence[Key], n: int) -> list[int]:
        """The partitions of many keys, in order, with as few crossings into the module as its
        batch export allows. All or nothing: a failure raises and returns no partition."""
        ks = [_key_bytes(k) for k in keys]
        _check_n(n)
        for i, k in enumerate(ks):
            if len(k) > MAX_KEY:
                raise BadRequest(f"key too long: key {i} has {len(k)} bytes; keys are at most {MAX_KEY} bytes (spec/abi-v1.md §1.1)")
        with self._lock:
            try:
                return list(self._instance().partition_all(ks, n))
            except CallError:
                self._plugin = None
                raise


def _check_n(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
        raise BadRequest(f"invalid partition count: {n!r}; n is an integer in [1, {MAX_PARTITIONS}]")
