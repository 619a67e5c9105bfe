"""The cross-language consume command (the same in every SDK):

    consume --server URL --creds FILE --topic T --group G [--from-beginning] [--from now|beginning|current-epoch]
            [--idle-exit D] [--max N]

Runs one member of consumer group G on topic T and prints every record it is given as one JSON line,
exactly as ``pctl consume T --group G --format jsonl --timestamps`` prints it::

    {"topic":"t","partition":0,"epoch":1,"seq":5,"key":"k","value":"v","producer":"p","pseq":3,"ts":1733...}

- a key or value that is not valid UTF-8 is given as "key_b64" / "value_b64" (standard base64)
  instead; a keyless record has no key field; "producer" and "pseq" are omitted when the record has
  no Pctl-Producer / Pctl-Seq; "ts" is the delivery time in unix nanoseconds;
- with --misplaced deliver, a record stored outside its key's partition (spec/protocol.md §6.8) is
  printed with "misplaced":true, "expected_partition" (absent when its key or epoch is unusable)
  and "misplaced_reason"; with stop (the default) the member stops before it (exit 1), with skip
  it goes past it; every one is reported on standard error;
- a tombstone (it deletes its key, spec/protocol.md §10.2) has "tombstone":true, a backfilled copy
  "backfill":"<epoch>/<partition>/<seq>" (§10.4);
- strings are escaped as Go's encoding/json does (<, >, & and U+2028/U+2029 as \\u escapes), so the
  lines are byte for byte those of the Go command.

A record is acknowledged (committed) only after its line was written out, so a member killed at any
moment never loses a record it printed. It runs until SIGINT/SIGTERM (it commits and leaves the
group; exit 0), until --max N records were printed (exit 0), or until --idle-exit D passed without
a new record (exit 0). D is a Go duration (500ms, 5s, 1m30s). Exit 2: bad arguments, unknown topic,
bad group name; exit 1: refused, broker unreachable or failed. --server and --creds default to
$PCTL_SERVER and $PCTL_CREDS."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import signal
import sys
import time
from typing import IO, Optional

from . import client as pctl_client
from .consumer import Consumer
from .errors import BadRequest, NotFound, PctlError
from .record import Record

_DUR_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s: str) -> float:
    """A Go duration ("1m30s", "500ms", "0") in seconds. Raises ValueError."""
    if s in ("0", "+0", "-0"):
        return 0.0
    if s.startswith("-"):
        raise ValueError(f"duration {s!r} is negative")
    rest = s.lstrip("+")
    total, pos = 0.0, 0
    if not rest:
        raise ValueError(f"invalid duration {s!r}")
    while pos < len(rest):
        m = _DUR_RE.match(rest, pos)
        if not m:
            raise ValueError(f"invalid duration {s!r} (e.g. 500ms, 5s, 1m30s)")
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total


_ESC = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
        "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_ESC.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in _ESC})
_NEEDS_ESC = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029]')


def go_json_string(s: str) -> str:
    """s as Go's encoding/json writes a string (HTML-safe escaping)."""
    return '"' + _NEEDS_ESC.sub(lambda m: _ESC[m.group(0)], s) + '"'


def jsonl_line(topic: str, r: Record, ts: int) -> str:
    """The line `pctl consume --format jsonl --timestamps` prints for a record delivered at ts (ns)."""
    parts = ['{"topic":', go_json_string(topic), ',"partition":', str(r.partition), ',"epoch":', str(r.epoch),
             ',"seq":', str(r.seq)]
    for name, v in (("key", r.key), ("value", r.value)):
        if v is None:
            continue
        try:
            parts += [',"', name, '":', go_json_string(v.decode("utf-8"))]
        except UnicodeDecodeError:
            parts += [',"', name, '_b64":"', base64.b64encode(v).decode("ascii"), '"']
    if r.producer:
        parts += [',"producer":', go_json_string(r.producer)]
    if r.producer_seq:
        parts += [',"pseq":', str(r.producer_seq)]
    if ts:
        parts += [',"ts":', str(ts)]
    mp = r.misplaced
    if mp is not None:
        parts.append(',"misplaced":true')
        if mp.expected >= 0:
            parts += [',"expected_partition":', str(mp.expected)]
        parts += [',"misplaced_reason":', go_json_string(mp.reason)]
    if r.tombstone:
        parts.append(',"tombstone":true')
    if r.backfill is not None:
        parts.append(',"backfill":"%d/%d/%d"' % r.backfill)
    parts.append("}\n")
    return "".join(parts)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="consume", description="Consume a pctl topic as a member of a consumer group; one JSON line per record.")
    p.add_argument("--server", default=os.environ.get("PCTL_SERVER"), help="broker URL (default $PCTL_SERVER, else nats://127.0.0.1:4222)")
    p.add_argument("--creds", default=os.environ.get("PCTL_CREDS"), help="NKey seed file: consumer.nk or admin.nk (default $PCTL_CREDS)")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--group", required=True, help="consumer group name")
    p.add_argument("--member", default=None, help="member id in the group (default: random)")
    p.add_argument("--from-beginning", action="store_true", help="a new group starts at the first record of every partition")
    p.add_argument("--from", dest="start", default=None, choices=["now", "beginning", "current-epoch"],
                   help="where a new group starts (default: now; current-epoch on a compacted topic)")
    p.add_argument("--idle-exit", default="0", help="exit after this Go duration without a new record (0: never)")
    p.add_argument("--max", type=int, default=0, help="exit after N records (0: no limit)")
    p.add_argument("--heartbeat", default="1s", help="how often the member announces itself and rebalances (Go duration)")
    p.add_argument("--misplaced", default="stop", choices=["stop", "deliver", "skip"],
                   help="a record outside its key's partition (protocol §6.8): stop before it (default), deliver it flagged, or skip it")
    p.add_argument("--assignor", default=None, choices=["modulo", "sticky"],
                   help="a new group's assignor (protocol §6.2): modulo (default) or sticky; an existing group keeps its own")
    return p


async def _run(args: argparse.Namespace, idle: float, heartbeat: float, out: IO[str]) -> int:
    try:
        c = await pctl_client.connect(args.server, args.creds, name=f"pctl-python consume {args.group}")
    except PctlError as e:
        print(f"consume: {e}", file=sys.stderr)
        return 2 if isinstance(e, BadRequest) else 1
    n = 0
    why = "interrupted"
    start = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    cn: Optional[Consumer] = None
    status = 0

    async def on_revoked(_partitions: list) -> None:
        # A partition handed to another member: what was printed is committed first, so that the
        # next owner does not deliver it again (duplicates only after a crash).
        out.flush()
        if cn is not None:
            await cn.commit()

    def on_misplaced(r: Record) -> None:
        key = "-" if r.key is None else r.key.decode("utf-8", "backslashreplace")
        print(f"consume: misplaced record: partition {r.partition} seq {r.seq} epoch {r.epoch} key {key}: "
              f"{r.misplaced.reason if r.misplaced else ''} (--misplaced {args.misplaced})", file=sys.stderr)

    try:
        try:
            cn = await c.consumer(args.topic, args.group, member=args.member, from_beginning=args.from_beginning,
                                  auto_commit=False, heartbeat=heartbeat, session_timeout=max(6.0, 3 * heartbeat),
                                  on_revoked=on_revoked, misplaced=args.misplaced, on_misplaced=on_misplaced,
                                  start=args.start, assignor=args.assignor)
        except PctlError as e:
            print(f"consume: {e}", file=sys.stderr)
            return 2 if isinstance(e, (BadRequest, NotFound)) else 1
        last = time.monotonic()
        last_flush = last
        dirty = False
        while not stop.is_set():
            now = time.monotonic()
            if idle > 0 and now - last >= idle:
                why = f"no new record for {args.idle_exit}"
                break
            wait = 0.1
            if idle > 0:
                wait = min(wait, max(0.001, idle - (now - last)))
            rec = await cn.next(timeout=wait)
            if rec is not None:
                out.write(jsonl_line(args.topic, rec, time.time_ns()))
                n += 1
                dirty = True
                last = time.monotonic()
            if dirty and (rec is None or time.monotonic() - last_flush >= 0.1 or (args.max and n >= args.max)):
                # Printed, then acknowledged: a record is committed only once its line is out.
                out.flush()
                last_flush = time.monotonic()
                dirty = False
                await cn.commit()
            if args.max and n >= args.max:
                why = f"--max {args.max} reached"
                break
        out.flush()
        if dirty:
            await cn.commit()
    except PctlError as e:
        print(f"consume: {e}", file=sys.stderr)
        why, status = "failed", 1
    finally:
        if cn is not None:
            try:
                out.flush()
                await cn.commit()
            except PctlError:
                pass
            await cn.close()
        await c.close()
        print(f"consume: {args.topic} group {args.group}: {n} records in {time.monotonic() - start:.3f}s ({why})", file=sys.stderr)
    return status


def main(argv: Optional[list] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        idle = parse_duration(args.idle_exit)
        heartbeat = parse_duration(args.heartbeat)
    except ValueError as e:
        print(f"consume: {e}", file=sys.stderr)
        return 2
    if args.max < 0:
        print(f"consume: --max {args.max}: give a positive count, or 0 for no limit", file=sys.stderr)
        return 2
    if heartbeat <= 0:
        print(f"consume: --heartbeat {args.heartbeat}: give a positive duration", file=sys.stderr)
        return 2
    out = open(sys.stdout.fileno(), "w", buffering=1 << 16, closefd=False, encoding="utf-8", newline="\n")
    try:
        return asyncio.run(_run(args, idle, heartbeat, out))
    except KeyboardInterrupt:
        return 0
    finally:
        try:
            out.flush()
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main())
