"""The partition reader never stalls for good (spec/protocol.md §6.7), against a real broker: a
pull request lost on the way, the server deleting the reader's consumer, a message lost in
delivery (a gap), the last message lost (only a heartbeat tells), the stale-stream check, and a
broker restart under a consumer-group member. Each fault is injected into the real connection;
each run must deliver every record once, in order."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time

import pytest

import pctl
from conftest import READY, Broker
from groups import produce
from pctl import _nats
from pctl.reader import StreamReader


def run(coro):
    return asyncio.run(coro)


async def read_all(r: StreamReader, want: int, limit: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + limit
    while len(out) < want and time.monotonic() < deadline:
        out += await r.next_batch(timeout=max(0.01, deadline - time.monotonic()))
    return out


def fill(broker, n: int) -> str:
    topic = broker.create_topic(1)
    run(produce(broker, topic, [(f"k{i}".encode(), f"{i}".encode()) for i in range(n)]))
    return topic


def test_a_lost_pull_request_is_noticed_and_issued_again(broker):
    topic = fill(broker, 300)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            orig = c.nc.publish
            dropped = []

            async def lossy(subject, payload=b"", reply="", headers=None):
                if subject.startswith("$JS.API.CONSUMER.MSG.NEXT.") and not dropped:
                    dropped.append(subject)  # lost on the way: the server never sees it
                    return
                await orig(subject, payload, reply=reply, headers=headers)

            c.nc.publish = lossy
            r = StreamReader(c, f"PCTL_{topic}_0", 1, heartbeat=0.2, expires=1.0)
            got = await read_all(r, 300)
            await r.close()
            return dropped, got, r.stats

    dropped, got, st = run(go())
    assert dropped, "the fault was injected"
    assert [x.seq for x in got] == list(range(1, 301)), "every record once, in order"
    assert st.lost_pulls >= 1


def test_a_consumer_deleted_by_the_server_is_recreated(broker):
    topic = fill(broker, 400)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c, await pctl.connect(broker.url, broker.admin) as admin:
            r = StreamReader(c, f"PCTL_{topic}_0", 1, heartbeat=0.2, batch=50, max_buffer=100)
            got = await read_all(r, 100)
            await _nats.js_request(admin, f"$JS.API.CONSUMER.DELETE.PCTL_{topic}_0.{r._consumer}", {})
            got += await read_all(r, 300)
            await r.close()
            return got, r.stats

    got, st = run(go())
    assert [x.seq for x in got] == list(range(1, 401))
    assert st.created >= 2


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_message_lost_in_delivery_is_read_again(broker, which):
    # middle: the next message shows a gap in the consumer sequence; last: nothing follows, and
    # the idle heartbeat's Nats-Last-Consumer says what was sent.
    topic = fill(broker, 200)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            r = StreamReader(c, f"PCTL_{topic}_0", 1, heartbeat=0.2)
            drop_seq = 77 if which == "middle" else 200
            dropped = []
            orig = r._on_msg

            def lossy(subject, reply, data, headers):
                if reply and not dropped:
                    ack = _nats.parse_ack(reply)
                    if ack and ack[1] == drop_seq:
                        dropped.append(drop_seq)
                        return
                orig(subject, reply, data, headers)

            r._on_msg = lossy
            got = await read_all(r, 200)
            await r.close()
            return dropped, got, r.stats

    dropped, got, st = run(go())
    assert dropped
    assert [x.seq for x in got] == list(range(1, 201)), "the lost message is read again, nothing twice"
    assert st.gaps >= 1 and st.created >= 2


def test_the_stale_check_catches_what_nothing_else_does(broker):
    topic = fill(broker, 50)

    async def go():
        async with await pctl.connect(broker.url, broker.consumer) as c:
            r = StreamReader(c, f"PCTL_{topic}_0", 1, heartbeat=0.3)
            first = await read_all(r, 50)
            table = c.nc._pctl_raw  # the raw subscriptions' handlers (pctl._nats)
            orig = table[r._sub.sid]
            table[r._sub.sid] = lambda *a: None  # a reader that hears nothing at all any more
            await produce(broker, topic, [(b"k", f"{i}".encode()) for i in range(50, 60)])
            await asyncio.sleep(0.3)
            found = await r.check_stale()
            table[r._sub.sid] = orig
            rest = await read_all(r, 10)
            await r.close()
            return first, found, rest, r.stats

    first, found, rest, st = run(go())
    assert len(first) == 50
    assert found, "the stream (or its consumer) is ahead of a reader that received nothing"
    assert [x.seq for x in rest] == list(range(51, 61))
    assert st.stale_recoveries >= 1


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _FixedBroker(Broker):
    """A broker that listens on a fixed port, so that it can be stopped and started again."""

    def __init__(self, binary, data, port: int):
        self.port = port
        self._start(binary, data)

    def _start(self, binary, data) -> None:
        self.bin, self.data = binary, data
        self.proc = subprocess.Popen([str(binary), "serve", "--data", str(data), "--listen", f"127.0.0.1:{self.port}"],
                                     stdout=subprocess.PIPE, stderr=open(data.parent / "serve.log", "ab"), text=True)
        line = self.proc.stdout.readline()
        m = READY.search(line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"pctl serve did not start: {line!r}")
        self.url = m.group(1)
        self.admin, self.producer, self.consumer = (str(data / f"{r}.nk") for r in ("admin", "producer", "consumer"))

    def restart(self) -> None:
        self.stop()
        self._start(self.bin, self.data)


def test_a_member_goes_on_after_a_broker_restart(pctl_bin, tmp_path):
    b = _FixedBroker(pctl_bin, tmp_path / "data", _free_port())
    try:
        topic = b.create_topic(2)
        run(_restart_scenario(b, topic))
    finally:
        b.stop()


async def _restart_scenario(b: _FixedBroker, topic: str) -> None:
    await produce(b, topic, [(f"k{i % 10}".encode(), f"{i}".encode()) for i in range(200)])
    async with await pctl.connect(b.url, b.consumer) as c:
        cn = await c.consumer(topic, "survivor", from_beginning=True, heartbeat=0.3, session_timeout=3.0)
        got = []
        while len(got) < 200:
            r = await cn.next(timeout=20)
            assert r is not None, f"stalled before the restart at {len(got)}"
            got.append(r)
        await asyncio.to_thread(b.restart)
        await produce(b, topic, [(f"k{i % 10}".encode(), f"{i}".encode()) for i in range(200, 400)])
        deadline = time.monotonic() + 60
        while len({int(r.value) for r in got}) < 400 and time.monotonic() < deadline:
            r = await cn.next(timeout=5)
            if r is not None:
                got.append(r)
        await cn.close()
    values = [int(r.value) for r in got]
    assert set(values) == set(range(400)), f"every record after the restart: missing {sorted(set(range(400)) - set(values))[:10]}"
    per_key: dict = {}
    for v in values:
        per_key.setdefault(v % 10, []).append(v)
    for k, vs in per_key.items():
        firsts = list(dict.fromkeys(vs))
        assert firsts == sorted(firsts), f"key k{k} in order"
