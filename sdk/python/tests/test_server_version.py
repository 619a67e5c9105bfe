"""The nats-server version the producer and the consumer need (pctl._server, spec/protocol.md §5.1,
§6.1), offline: the comparison against 2.14 on versions as nats-server releases print them in
INFO, and the refusal's code and message. Expected values are the release order, not this code:
2.11.0-RC.1 and 2.10.22 are older than 2.14, 3.0.0 newer although its minor is 0, 1.99.0 older
although its minor is 99. The same rows as internal/natsver's TestAtLeast."""

import asyncio
import re

import pytest

import pctl
from pctl import _server
from pctl.errors import Unavailable


@pytest.mark.parametrize("v,want", [
    ("2.14.0", True), ("2.14.0-RC.1", True), ("v2.15.2", True), ("2.15.2", True), ("2.20.0", True), ("3.0.0", True),
    ("2.13.9", False), ("2.11.0-RC.1", False), ("2.11.4", False), ("2.10.22", False), ("2.9.25", False),
    ("1.99.0", False), ("", False), ("2", False), ("garbage", False), ("x.14.0", False),
])
def test_version_at_least(v, want):
    assert _server.version_at_least(v, 2, 14) is want


def test_min_server():
    assert _server.MIN_SERVER == "2.14.0"
    assert _server.version_at_least(_server.MIN_SERVER, 2, 14)


@pytest.mark.parametrize("v", ["2.14.0", "v2.15.2", "2.14.0-RC.1"])
def test_check_server_passes(v):
    _server.check_server(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1")


@pytest.mark.parametrize("v", ["2.10.22", "2.11.0-RC.1", "2.13.9"])
def test_check_server_refuses(v):
    with pytest.raises(Unavailable) as ei:
        _server.check_server(v, "nats://127.0.0.1:4222", "pctl's consumer", "spec/protocol.md §6.1")
    assert ei.value.code == "unavailable"
    for part in ["nats://127.0.0.1:4222", repr(v), "pctl's consumer needs 2.14.0 or later", "§6.1", "upgrade the NATS servers"]:
        assert part in str(ei.value), (v, str(ei.value), part)


# --- against a real broker: the consumer refuses before any group key -------------------------------

async def _version_proxy(host: str, port: int, claim: str):
    """A TCP proxy to host:port that rewrites "version" in every INFO line the server sends to
    `claim` (nats-server cannot be told to report another version)."""
    tasks = []

    async def pipe(r, w, rewrite):
        try:
            while True:
                line = await r.readline() if rewrite else await r.read(65536)
                if not line:
                    break
                if rewrite and line.startswith(b"INFO "):
                    line = re.sub(rb'"version":"[^"]*"', b'"version":"' + claim.encode() + b'"', line, count=1)
                w.write(line)
                await w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def handle(cr, cw):
        sr, sw = await asyncio.open_connection(host, port, limit=1 << 24)
        tasks.extend([asyncio.ensure_future(pipe(sr, cw, True)), asyncio.ensure_future(pipe(cr, sw, False))])

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, limit=1 << 24)
    return srv, f"nats://127.0.0.1:{srv.sockets[0].getsockname()[1]}", tasks


async def _group_keys(c, tid: str, group: str) -> list:
    si = await c.nc.jetstream().stream_info("KV_pctl-groups", subjects_filter=f"$KV.pctl-groups.{tid}.{group}.>")
    return list((si.state.subjects or {}).keys())


def test_consumer_refuses_old_server(broker):
    """spec/protocol.md §6.1, "The server version a consumer needs": against a real broker, through
    a proxy that rewrites the version of the server's INFO, the consumer (and the producer, §5.1)
    refuse 2.10.22, 2.11.0-RC.1 and 2.13.9 with Unavailable naming the proxy, the version, the
    minimum and what to do, and the group has no key; the proxy claiming 2.14.0 passes, and so does
    the real server directly (the member creates its group)."""
    topic = broker.create_topic(2)
    host, port = broker.url.removeprefix("nats://").split(":")

    async def go():
        async with await pctl.connect(broker.url, broker.admin) as admin:
            tid = (await admin.topic(topic)).id
            for claim in ["2.10.22", "2.11.0-RC.1", "2.13.9", "2.14.0"]:
                srv, url, tasks = await _version_proxy(host, int(port), claim)
                group = "g" + claim.replace(".", "_").replace("-", "_")
                try:
                    async with await pctl.connect(url, broker.consumer) as c, await pctl.connect(url, broker.producer) as pc:
                        assert _server.server_version(c) == claim
                        if claim == "2.14.0":
                            cn = await c.consumer(topic, group)
                            await cn.close()
                            await (await pc.producer(topic)).close()
                            await pctl.reset_group(c, topic, group + "_reset", "beginning")
                            continue
                        with pytest.raises(Unavailable) as ei:
                            await c.consumer(topic, group)
                        for part in [url, repr(claim), "pctl's consumer needs 2.14.0 or later", "§6.1", "upgrade the NATS servers"]:
                            assert part in str(ei.value), (claim, str(ei.value), part)
                        assert await _group_keys(admin, tid, group) == []
                        with pytest.raises(Unavailable, match="pctl's producer needs 2.14.0 or later"):
                            await pc.producer(topic)
                        # A reset of a group that does not exist would create it (§6.6): refused
                        # before any key.
                        with pytest.raises(Unavailable, match="pctl's group reset needs 2.14.0 or later"):
                            await pctl.reset_group(c, topic, group + "_reset", "beginning")
                        assert await _group_keys(admin, tid, group + "_reset") == []
                finally:
                    srv.close()
                    for t in tasks:
                        t.cancel()
            async with await pctl.connect(broker.url, broker.consumer) as c:
                cn = await c.consumer(topic, "real")
                await cn.close()
            assert any(k.endswith(".g.created") for k in await _group_keys(admin, tid, "real"))

    asyncio.run(go())
