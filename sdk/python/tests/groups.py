"""Helpers of the consumer tests: producing with the SDK, member processes in any language (the
Python `consume` command and Go's `pctl consume`), and independent checks of what a group
delivered: every acknowledged record, per-key order, and the partition of every record as
`pctl partition` computes it for the record's epoch."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import pctl
from conftest import SDK


async def produce(broker, topic: str, records: list, producer_id: Optional[str] = None, **kw) -> list:
    """Sends (key, value) records in order with the SDK's producer; returns their RecordMetadata."""
    async with await pctl.connect(broker.url, broker.producer) as c:
        p = await c.producer(topic, producer_id=producer_id)
        futs = [await p.send(k, v, **kw) for k, v in records]
        res = await asyncio.gather(*futs)
        await p.close()
        return list(res)


def write_sent(path: Path, producer_id: str, records: list, metas: list) -> None:
    """A `pctl verify --sent` file for records the SDK's producer sent."""
    with open(path, "w") as f:
        for (k, _), m in zip(records, metas):
            d = {"producer": producer_id, "pseq": m.producer_seq, "acked": True}
            if k is None:
                d["nokey"] = True
            else:
                d["key"] = base64.b64encode(k if isinstance(k, bytes) else k.encode()).decode()
            f.write(json.dumps(d) + "\n")


class Member:
    """A group member in its own process: the Python SDK's `consume` command or Go's `pctl consume`
    (jsonl with delivery timestamps), writing its records to a file."""

    def __init__(self, broker, lang: str, topic: str, group: str, out: Path, *extra: str):
        self.lang, self.out = lang, out
        self.stdout = open(out, "wb")
        self.stderr_path = out.with_suffix(".err")
        self.stderr = open(self.stderr_path, "wb")
        if lang == "python":
            cmd = [str(SDK / "consume"), "--server", broker.url, "--creds", broker.consumer, "--topic", topic, "--group", group, *extra]
        elif lang == "go":
            cmd = [str(broker.bin), "consume", topic, "--group", group, "--format", "jsonl", "--timestamps",
                   "--server", broker.url, "--creds", broker.consumer, *extra]
        else:
            raise ValueError(lang)
        self.proc = subprocess.Popen(cmd, stdout=self.stdout, stderr=self.stderr)

    def records(self) -> list:
        out = []
        with open(self.out, "rb") as f:
            for line in f:
                if line.endswith(b"\n"):
                    out.append(json.loads(line))
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.stdout.close()
        self.stderr.close()
        return rc

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.stdout.close()
        self.stderr.close()

    def log(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def record_key(r: dict) -> Optional[bytes]:
    if "key" in r:
        return r["key"].encode()
    if "key_b64" in r:
        return base64.b64decode(r["key_b64"])
    return None


def wait_delivered(members: list, want: set, timeout: float = 120) -> set:
    """Waits until the members together delivered every (producer, pseq) in `want`."""
    deadline = time.monotonic() + timeout
    got: set = set()
    while time.monotonic() < deadline:
        got = {(r["producer"], r["pseq"]) for m in members for r in m.records()}
        if want <= got:
            return got
        time.sleep(0.2)
    return got


def merged(members: list) -> list:
    """Every delivery of the members, in delivery order (by their timestamps)."""
    rs = [r for m in members for r in m.records()]
    rs.sort(key=lambda r: r["ts"])
    return rs


def order_violations(deliveries: list, value_order=int) -> list:
    """Per key, the values of first deliveries must increase (the producer sent a key's records
    with increasing values). Returns the violations found: (key, earlier value, later value)."""
    seen: set = set()
    last: dict = {}
    bad = []
    for r in deliveries:
        k = record_key(r)
        if k is None:
            continue
        ident = (r.get("producer"), r.get("pseq"))
        if ident in seen:
            continue  # a redelivery after a crash: allowed, in order
        seen.add(ident)
        v = value_order(r["value"])
        if k in last and v < last[k]:
            bad.append((k, last[k], v))
        last[k] = max(v, last.get(k, v))
    return bad


def placements(broker, keys: list, plugin: str, n: int) -> dict:
    """`pctl partition` of each key (the independent placement)."""
    p = broker.pctl("partition", "--plugin", plugin, "--partitions", str(n), "--hex",
                    stdin="".join(k.hex() + "\n" for k in keys), remote=False)
    return dict(zip(keys, map(int, p.stdout.split())))


def epochs_of(broker, topic: str) -> list:
    """(epoch, plugin name, partitions) of every epoch, from the broker's descriptor."""
    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            t = await c.topic(topic)
            return [(e.epoch, e.partitioner.name, e.partitions) for e in t.epochs]
    return asyncio.run(go())


def misplaced(broker, topic: str, deliveries: list) -> list:
    """Deliveries whose partition is not the key's partition in the record's epoch."""
    keys = sorted({record_key(r) for r in deliveries if record_key(r) is not None})
    want = {e: placements(broker, keys, plugin, n) for e, plugin, n in epochs_of(broker, topic)}
    return [r for r in deliveries if record_key(r) is not None and want[r["epoch"]][record_key(r)] != r["partition"]]


def verify(broker, sent: Path, group: str, members: list) -> subprocess.CompletedProcess:
    args = ["verify", "--sent", str(sent)]
    for m in members:
        args += ["--delivered", f"{group}={m.out}"]
    return broker.pctl(*args, remote=False, check=False)
