"""Canonical config bytes of spec/abi-v1.md §2.5, with the validation of Go's
partitioner.EncodeConfig: lines "K=V\\n" sorted by K (bytewise), K matching [A-Za-z0-9_.-]+ and
given at most once, V UTF-8 without "\\n"; no pairs is the empty config."""

from __future__ import annotations

import json
import re
from typing import Iterable, Mapping, Union

from ..errors import BadRequest

_KEY_RE = re.compile(r"[A-Za-z0-9_.-]+")


class ConfigError(BadRequest):
    """A pair that breaks the rules; the message starts with "bad partitioner config"."""


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def encode_config(pairs: Union[Iterable[str], Mapping[str, str]]) -> bytes:
    """Encodes "K=V" strings (str; command-line arguments), or a mapping of K to V, canonically."""
    items: list[tuple[str, str]] = []
    if isinstance(pairs, Mapping):
        items = [(str(k), str(v)) for k, v in pairs.items()]
    else:
        for p in pairs:
            k, sep, v = p.partition("=")
            if not sep:
                raise ConfigError(f"bad partitioner config: {_q(p)} has no '='; write KEY=VALUE")
            items.append((k, v))
    seen: dict[str, str] = {}
    for k, v in items:
        if not _KEY_RE.fullmatch(k):
            raise ConfigError(f"bad partitioner config: key {_q(k)} must match [A-Za-z0-9_.-]+")
        try:
            v.encode("utf-8")
            ok = "\n" not in v
        except UnicodeEncodeError:  # lone surrogates: argv bytes that were not UTF-8
            ok = False
        if not ok:
            raise ConfigError(f"bad partitioner config: value of {_q(k)} must be UTF-8 without newlines")
        if k in seen:
            raise ConfigError(f"bad partitioner config: key {_q(k)} given twice ({_q(seen[k])} and {_q(v)})")
        seen[k] = v
    # Keys are ASCII, so code point order is byte order.
    return b"".join(f"{k}={seen[k]}\n".encode("utf-8") for k in sorted(seen))
