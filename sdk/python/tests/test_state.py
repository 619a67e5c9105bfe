"""The state handover API (spec/protocol.md §6.9) against a real broker: the running-total processor
of examples/stateful.py (its durable state in a KV bucket, exactly once by the input record that
last changed each key) in a sticky group on a linear-murmur2 topic: two members, a third joins,
the topic grows 4 -> 8, a member crashes right after a state write and before the acknowledgement
(its connection closed, nothing flushed or released). The final totals equal the totals computed
here directly from the input. The same checker fails on a processor that does not load a key's
state when the key arrives (what a consumer without the state API gives). Plus the option's
validation and a load error stopping the member."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

import pctl
from pctl._nats import js_request
from conftest import SDK

sys.path.insert(0, str(SDK / "examples"))
from stateful import KV, RunningTotal  # noqa: E402

KEYS = 30


async def _until(cond, timeout: float, what) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what()}")
        await asyncio.sleep(0.05)


async def _scenario(broker, *, loads: bool, crash: bool, grow: bool):
    topic = broker.create_topic(4, "linear-murmur2")
    bucket = f"{topic}-totals"
    async with await pctl.connect(broker.url, broker.admin) as admin:
        await js_request(admin, f"$JS.API.STREAM.CREATE.KV_{bucket}", {
            "name": f"KV_{bucket}", "subjects": [f"$KV.{bucket}.>"], "max_msgs_per_subject": 1, "allow_direct": True,
            "storage": "file", "num_replicas": 1, "discard": "new", "allow_rollup_hdrs": True, "deny_delete": True})
        expected: dict = {}
        p = await admin.producer(topic, producer_id=f"{topic}-p")
        sent = [0]

        async def send(n: int) -> None:
            futs = []
            for _ in range(n):
                i = sent[0]
                key = f"k{i % KEYS}".encode()
                amount = (i * 7) % 13 + 1
                t, c = expected.get(key, (0, 0))
                expected[key] = (t + amount, c + 1)
                futs.append(await p.send(key, str(amount).encode()))
                sent[0] += 1
            await asyncio.gather(*futs)

        seen: set = set()
        members: list = []
        logs: list = []

        async def start(name: str) -> dict:
            c = await pctl.connect(broker.url, broker.admin)
            rt = RunningTotal(KV(c, bucket, timeout=5.0), loads=loads)
            cn = await c.consumer(topic, "g", member=name, from_beginning=True, heartbeat=0.15, session_timeout=1.5,
                                  commit_interval=0.1, assignor="sticky", state=rt, logf=logs.append)
            m = {"name": name, "c": c, "cn": cn, "rt": rt, "crash_after": None, "crashed": False, "error": None}

            async def pump() -> None:
                try:
                    while True:
                        r = await cn.next(timeout=0.2)
                        if r is None:
                            if cn._closed:
                                return
                            continue
                        await rt.handle(r)
                        if m["crash_after"] is not None:
                            m["crash_after"] -= 1
                            if m["crash_after"] <= 0:
                                # A crash after the state write and before the acknowledgement.
                                m["crashed"] = True
                                await c.nc.close()
                                return
                        seen.add((r.partition, r.seq))
                except Exception as e:  # noqa: BLE001
                    m["error"] = e

            m["task"] = asyncio.ensure_future(pump())
            members.append(m)
            return m

        async def all_seen() -> None:
            await _until(lambda: len(seen) == sent[0], 30,
                         lambda: f"{sent[0]} records delivered, have {len(seen)}; log {logs[-15:]}")

        await start("a")
        await start("b")
        await send(200)
        await all_seen()
        await start("c")
        await _until(lambda: all(m["cn"].assignment for m in members), 20,
                     lambda: f"every member owns a partition: {[m['cn'].assignment for m in members]}")
        await send(200)
        await all_seen()
        if grow:
            broker.pctl("topic", "expand", topic, "--partitions", "8")
            await send(200)
            await all_seen()
        if crash:
            members[0]["crash_after"] = 20
            await send(200)
            await all_seen()
            assert members[0]["crashed"]
        for m in members:
            assert m["error"] is None, f"member {m['name']}: {m['error']!r}"
        for m in members:
            if m["crashed"]:
                try:
                    await asyncio.wait_for(m["cn"].close(clean=False), 10)
                except Exception:  # noqa: BLE001 - its connection is gone
                    pass
                continue
            await m["cn"].close()
            await m["task"]
            await m["c"].close()
        await p.close()
        stats = [{"name": m["name"], **m["rt"].stats} for m in members]
        store = KV(admin, bucket, timeout=5.0)
        got = {}
        for k in expected:
            e = await store.get(RunningTotal.token(k))
            st = json.loads(e.value) if e is not None else None
            got[k] = (st["total"], st["count"]) if st else None
        return expected, got, stats, sent[0]


def test_totals_survive_join_expansion_and_crash(broker):
    expected, got, stats, sent = asyncio.run(_scenario(broker, loads=True, crash=True, grow=True))
    assert sent == 800
    assert got == expected, f"stats {stats}"
    assert sum(s["loads"] for s in stats) >= KEYS, stats
    # The record member a applied and crashed on came again and was recognised.
    assert sum(s["duplicates"] for s in stats) >= 1, stats
    # The third member took keys that had state: it loaded them.
    assert next(s for s in stats if s["name"] == "c")["loads"] > 0, stats


def test_checker_fails_on_a_processor_that_does_not_load(broker):
    expected, got, _, _ = asyncio.run(_scenario(broker, loads=False, crash=False, grow=False))
    wrong = [k for k in expected if got.get(k) is None or got[k][0] != expected[k][0]]
    assert wrong, "a processor that starts moved keys from zero ends with the input's totals: the checker sees nothing"


def test_state_needs_gating_and_methods(broker):
    topic = broker.create_topic(2)

    class H:
        def load(self, ks):
            pass

        def flush(self, ks):
            pass

    class NoFlush:
        def load(self, ks):
            pass

    async def go():
        async with await pctl.connect(broker.url, broker.admin) as c:
            with pytest.raises(pctl.BadRequest, match="gating"):
                await c.consumer(topic, "g", state=H(), gating=False)
            with pytest.raises(pctl.BadRequest, match="flush"):
                await c.consumer(topic, "g", state=NoFlush())
    asyncio.run(go())
    assert isinstance(H(), pctl.StateHandler)


def test_load_error_stops_the_member(broker):
    topic = broker.create_topic(2)

    class Failing:
        def load(self, ks):
            raise OSError("disk full")

        def flush(self, ks):
            pass

    async def go():
        async with await pctl.connect(broker.url, broker.admin) as c:
            p = await c.producer(topic, producer_id=f"{topic}-p")
            await (await p.send(b"x", b"1"))
            await p.close()
            cn = await c.consumer(topic, "g", from_beginning=True, heartbeat=0.15, state=Failing())
            delivered = []
            with pytest.raises(pctl.InternalError, match=r"state load of key b'x'.*disk full"):
                async for r in cn:
                    delivered.append(r)
            assert delivered == []
            await cn.close()
    asyncio.run(go())


def test_one_member_across_an_expansion_loads_and_flushes_alternate(broker):
    """One member across 4 -> 8: the handler's calls alternate per key (no load of a held key, no
    flush of a key not held), every record comes with its key loaded, the close flushes every held
    key. Fails when keys revoked flushes a key and keeps holding it."""
    topic = broker.create_topic(4, "linear-murmur2")

    class Log:
        def __init__(self):
            self.held: dict = {}
            self.wrong: list = []

        def load(self, ks):
            for k in ks.keys:
                if k in self.held:
                    self.wrong.append(f"load of {k!r}, held for {self.held[k]}")
                self.held[k] = ks.partition

        async def flush(self, ks):
            for k in ks.keys:
                if k not in self.held:
                    self.wrong.append(f"flush ({ks.reason.value}) of {k!r}, not held")
                self.held.pop(k, None)

    async def go():
        st = Log()
        async with await pctl.connect(broker.url, broker.admin) as c:
            p = await c.producer(topic, producer_id=f"{topic}-p")
            cn = await c.consumer(topic, "g", from_beginning=True, heartbeat=0.15, state=st)
            n = [0]

            async def send():
                await asyncio.gather(*[await p.send(f"k{i % 20}".encode(), b"1") for i in range(40)])

            async def drain(want: int) -> None:
                deadline = time.monotonic() + 20
                while n[0] < want:
                    assert time.monotonic() < deadline, f"{want} deliveries, have {n[0]}"
                    r = await cn.next(timeout=0.2)
                    if r is None:
                        continue
                    if r.key not in st.held:
                        st.wrong.append(f"record of {r.key!r} delivered without its state loaded")
                    n[0] += 1

            await send()
            await drain(40)
            assert len(st.held) == 20
            broker.pctl("topic", "expand", topic, "--partitions", "8")
            await send()
            await drain(80)
            await p.close()
            await cn.close()
        assert st.wrong == []
        assert st.held == {}, f"held after close: {sorted(st.held)}"
    asyncio.run(go())
