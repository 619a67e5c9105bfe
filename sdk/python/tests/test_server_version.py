"""The nats-server version the producer and the consumer need (pctl._server, spec/protocol.md §5.1,
§6.1), offline: the comparison against 2.14 on versions as nats-server releases print them in
INFO, and the refusal's code and message. Expected values are the release order, not this code:
2.11.0-RC.1 and 2.10.22 are older than 2.14, 3.0.0 newer although its minor is 0, 1.99.0 older
although its minor is 99. The same rows as internal/natsver's TestAtLeast."""

import pytest

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
