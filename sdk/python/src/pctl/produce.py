"""The cross-language produce command (the same in every SDK; sdk/crosslang runs them all):

    produce --server URL --creds FILE --topic T --producer-id ID < lines

Reads `key<TAB>value` lines from stdin (UTF-8; a line without a tab is a keyless record whose
value is the line; a final newline is optional and a \\r before a newline is dropped), sends them
with the SDK's producer in order, and prints one JSON line per record to stdout when its fate is
known:

    {"pseq": n, "acked": true, "partition": p, "epoch": e, "seq": s}
    {"pseq": n, "acked": false, "partition": null, "epoch": null, "seq": null, "error": "..."}

pseq is the record's Pctl-Seq (1-based, in stdin order). Exit 0 when every record was
acknowledged, 1 when one was not (or the producer failed), 2 for bad arguments or an unknown
topic. --server and --creds default to $PCTL_SERVER and $PCTL_CREDS. With --tombstone-marker M a
line `key<TAB>M` sends a tombstone for key (spec/protocol.md §10.2) instead of the value M."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import threading
from typing import Callable, Optional

from . import client as pctl_client
from .errors import BadRequest, NotFound, PctlError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="produce", description="Produce key<TAB>value lines from stdin to a pctl topic.")
    p.add_argument("--server", default=os.environ.get("PCTL_SERVER"), help="broker URL (default $PCTL_SERVER, else nats://127.0.0.1:4222)")
    p.add_argument("--creds", default=os.environ.get("PCTL_CREDS"), help="NKey seed file: producer.nk or admin.nk (default $PCTL_CREDS)")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--producer-id", default=None, help="producer id for Pctl-Producer and Nats-Msg-Id (default: random); "
                   "given, the records' deduplication tokens are digests of their contents, so that a re-run under the "
                   "same id stores nothing twice")
    p.add_argument("--tombstone-marker", default=None, help="a line key<TAB>M with this value M sends a tombstone for key")
    p.add_argument("--ack-timeout", type=float, default=5.0, help="seconds before an unacknowledged publish is retried (default 5)")
    return p


def _reader(loop: asyncio.AbstractEventLoop, q: "asyncio.Queue[Optional[list]]") -> None:
    """Reads stdin in a thread (a pipe or a file alike) and hands over batches of complete lines
    as soon as they arrive (up to 64 KiB at a time: a writer that pauses between lines gets them
    sent at once, not when 64 KiB have come); the last line may lack its newline."""
    stdin = sys.stdin.buffer
    rest = b""
    while True:
        chunk = stdin.read1(1 << 16)
        if not chunk:
            if rest:
                loop.call_soon_threadsafe(q.put_nowait, [rest])
            loop.call_soon_threadsafe(q.put_nowait, None)
            return
        rest += chunk
        i = rest.rfind(b"\n")
        if i < 0:
            continue
        lines = rest[:i].split(b"\n")  # a \r before a newline is dropped by _split
        rest = rest[i + 1:]
        loop.call_soon_threadsafe(q.put_nowait, lines)


def _split(line: bytes) -> tuple:
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    key, tab, value = line.partition(b"\t")
    if not tab:
        return None, line
    return key, value


async def _run(args: argparse.Namespace, out) -> int:
    try:
        c = await pctl_client.connect(args.server, args.creds, name=f"pctl-python produce {args.producer_id or ''}".strip(),
                                      ack_timeout=args.ack_timeout)
    except PctlError as e:
        print(f"produce: {e}", file=sys.stderr)
        return 2 if isinstance(e, BadRequest) else 1
    try:
        try:
            # An id given for an idempotent re-run: content tokens, so that the re-run's ids equal
            # the first run's (spec/protocol.md §5.1, as `pctl produce --producer-id`).
            producer = await c.producer(args.topic, producer_id=args.producer_id, content_tokens=bool(args.producer_id),
                                        logf=_logf if os.environ.get("PCTL_PRODUCE_LOG") else None)
        except PctlError as e:
            print(f"produce: {e}", file=sys.stderr)
            return 2 if isinstance(e, (BadRequest, NotFound)) else 1
        failed = 0

        def report(pseq: int, fut: asyncio.Future) -> None:
            nonlocal failed
            if fut.cancelled():
                failed += 1
                rec = {"pseq": pseq, "acked": False, "partition": None, "epoch": None, "seq": None, "error": "cancelled"}
            elif fut.exception() is not None:
                failed += 1
                rec = {"pseq": pseq, "acked": False, "partition": None, "epoch": None, "seq": None, "error": str(fut.exception())}
            else:
                m = fut.result()
                rec = {"pseq": pseq, "acked": True, "partition": m.partition, "epoch": m.epoch, "seq": m.seq}
            out.write(json.dumps(rec) + "\n")

        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue(maxsize=0)
        threading.Thread(target=_reader, args=(loop, q), daemon=True).start()

        async def flusher() -> None:
            # Reports go out within 50 ms of their acknowledgement (the output is buffered).
            while True:
                await asyncio.sleep(0.05)
                out.flush()
        flushing = asyncio.ensure_future(flusher())
        pseq = 0
        marker = None if args.tombstone_marker is None else args.tombstone_marker.encode()
        fatal: Optional[PctlError] = None
        while fatal is None:
            lines = await q.get()
            if lines is None:
                break
            for line in lines:
                key, value = _split(line)
                pseq += 1
                tomb = marker is not None and key is not None and value == marker
                try:
                    fut = await producer.send(key, b"" if tomb else value, tombstone=tomb)
                except PctlError as e:
                    fatal = e
                    failed += 1
                    out.write(json.dumps({"pseq": pseq, "acked": False, "partition": None, "epoch": None, "seq": None, "error": str(e)}) + "\n")
                    break
                fut.add_done_callback(functools.partial(_report_at, report, pseq))
        try:
            await producer.close()
        except PctlError as e:
            fatal = fatal or e
        await asyncio.sleep(0)  # let the last callbacks run
        flushing.cancel()
        out.flush()
        if os.environ.get("PCTL_PRODUCE_LOG"):
            _logf(f"producer {producer.id}: {pseq} records, {producer.settled} batches settled, {producer.confirmed_by_reading} "
                  f"batches read back on a cluster, {producer.key_splits} batches ended early for a key already in them, "
                  f"{producer.holes} holes re-sent, {producer.resent} re-sent after a fence")
        if fatal is not None:
            print(f"produce: {fatal}", file=sys.stderr)
        if failed or fatal is not None:
            print(f"produce: {failed} of {pseq} records not acknowledged", file=sys.stderr)
            return 1
        return 0
    finally:
        await c.close()


def _logf(line: str) -> None:
    print(f"produce: {line}", file=sys.stderr, flush=True)


def _report_at(report: Callable[[int, asyncio.Future], None], pseq: int, fut: asyncio.Future) -> None:
    report(pseq, fut)


def main(argv: Optional[list] = None) -> int:
    args = _parser().parse_args(argv)
    out = open(sys.stdout.fileno(), "w", buffering=1 << 16, closefd=False, encoding="utf-8")
    try:
        return asyncio.run(_run(args, out))
    except KeyboardInterrupt:
        return 130
    finally:
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
