"""The vector runner of conformance/hosts/README.md, a thin command line over the Python SDK's ABI
host (sdk/python, package pctl.runtime):

    run [run] --wasm FILE --partitions N [--config K=V ...] [--config-hex HEX]

Hex keys on stdin (one per line, an empty line is the empty key), one partition per line on
stdout. Exit 1 for a module failure at run time, 2 for usage, bad input or a module refused at
load; the message on stderr names the plugin and the failure class."""

from __future__ import annotations

import binascii
import json
import re
import sys

from pctl.runtime import CLASS, MAX_KEY, MAX_PARTITIONS, CallError, ConfigError, LoadError, Plugin, UsageError, encode_config

USAGE = "usage: run --wasm FILE --partitions N [--config K=V ...] [--config-hex HEX] < hex keys, one per line"


class _Usage(Exception):
    pass


def _parse_args(argv: list[str]) -> dict:
    a = {"wasm": None, "partitions": None, "config": [], "config_hex": None}
    # The command's own name may come first (`run run --wasm ...`, the form the Go test uses).
    i = 1 if argv[:1] == ["run"] else 0
    while i < len(argv):
        flag, val = argv[i], None
        if flag.startswith("--") and "=" in flag:
            flag, val = flag.split("=", 1)
        if flag in ("-h", "--help"):
            raise _Usage("")
        names = {"--wasm": "wasm", "--partitions": "partitions", "--config": "config", "--config-hex": "config_hex"}
        if flag not in names:
            raise _Usage(f"unknown argument {json.dumps(flag)}")
        if val is None:
            if i + 1 >= len(argv):
                raise _Usage(f"{flag} needs a value")
            i += 1
            val = argv[i]
        if flag == "--config":
            a["config"].append(val)
        else:
            a[names[flag]] = val
        i += 1
    if not a["wasm"]:
        raise _Usage("--wasm FILE is required")
    if a["partitions"] is None:
        raise _Usage("--partitions N is required")
    if a["config_hex"] is not None and a["config"]:
        raise _Usage("give --config or --config-hex, not both")
    return a


def _parse_n(s: str) -> int:
    if not re.fullmatch(r"[0-9]+", s) or not 1 <= int(s) <= MAX_PARTITIONS:
        raise UsageError(f"{CLASS.BAD_N}: --partitions {json.dumps(s)} must be an integer in [1, {MAX_PARTITIONS}]")
    return int(s)


_HEX_LINE = re.compile(rb"(?:[0-9a-fA-F]{2})*\r?")
_HEX_INPUT = re.compile(rb"(?:(?:[0-9a-fA-F]{2})*\r?\n)*(?:(?:[0-9a-fA-F]{2})*\r?)?")


def _parse_keys(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not _HEX_INPUT.fullmatch(data):
        for i, line in enumerate(lines):
            if not _HEX_LINE.fullmatch(line):
                raise UsageError(f"stdin line {i + 1}: {json.dumps(line[:40].decode('latin-1'))} is not a key in hex (an even number of hex digits; an empty line is the empty key)")
    keys = [binascii.unhexlify(line[:-1] if line.endswith(b"\r") else line) for line in lines]
    for i, k in enumerate(keys):
        if len(k) > MAX_KEY:
            raise UsageError(f"{CLASS.KEY_TOO_LONG}: stdin line {i + 1} has {len(k)} bytes; the limit is {MAX_KEY} (spec/abi-v1.md §1.1)")
    return keys


def main(argv: list[str]) -> int:
    try:
        a = _parse_args(argv)
    except _Usage as e:
        sys.stderr.write(f"run: {e}\n{USAGE}\n" if str(e) else f"{USAGE}\n")
        return 2
    try:
        n = _parse_n(a["partitions"])
        if a["config_hex"] is not None:
            if not re.fullmatch(r"(?:[0-9a-fA-F]{2})*", a["config_hex"]):
                raise UsageError(f"bad partitioner config: --config-hex {json.dumps(a['config_hex'][:40])} is not hex")
            config = bytes.fromhex(a["config_hex"])
        else:
            config = encode_config(a["config"])
        try:
            with open(a["wasm"], "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"read plugin {a['wasm']}: {e.strerror or e}") from None
        keys = _parse_keys(sys.stdin.buffer.read())
        plugin = Plugin.open(data, source=a["wasm"], config=config)
    except (UsageError, ConfigError, LoadError) as e:
        sys.stderr.write(f"run: {e}\n")
        return 2
    try:
        out = plugin.partition_all(keys, n)
    except CallError as e:
        sys.stderr.write(f"run: {e}\n")
        return 1
    if out:
        sys.stdout.write("\n".join(map(str, out)) + "\n")
    return 0
