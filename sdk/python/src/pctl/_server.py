"""The nats-server version pctl's clients need, and the check that refuses an older server
(spec/protocol.md §5.1 for the producer: fast batches; §6.1 for a consumer: the conditioned write
that proves a group absent, which a server older than 2.11 ignores). The producer and the consumer
share it: one minimum, one comparison, one form of message."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import Unavailable

if TYPE_CHECKING:
    from .client import Client

MIN_SERVER = "2.14.0"
"""The oldest nats-server the producer and the consumer work with."""


def version_at_least(v: str, major: int, minor: int) -> bool:
    """Whether "major.minor.patch[-suffix]" (a leading "v" allowed) is at least major.minor. The
    patch and a pre-release suffix are not compared: "2.14.0-RC.1" is 2.14."""
    parts = v.lstrip("v").split(".", 2)
    if len(parts) < 2:
        return False
    try:
        ma, mi = int(parts[0]), int(parts[1].split("-", 1)[0])
    except ValueError:
        return False
    return ma > major or (ma == major and mi >= minor)


def check_server(v: str, server: str, who: str, why: str) -> None:
    """Raises Unavailable when `v` (the version the server at `server` reports in INFO) is older
    than MIN_SERVER; `who` needs it ("pctl's consumer"), for `why` (the feature, the spec)."""
    if not version_at_least(v, 2, 14):
        raise Unavailable(f"the server at {server} runs nats-server {v or '(unknown version)'!r}; {who} needs "
                          f"{MIN_SERVER} or later on every node ({why}): upgrade the NATS servers")


def server_version(client: "Client") -> str:
    """The version the server a client is connected to reports (its INFO)."""
    nc = client.nc
    v = ""
    srv = getattr(nc, "_current_server", None)
    if srv is not None and getattr(srv, "server_version", None):
        v = str(srv.server_version)
    return v or str((getattr(nc, "_server_info", None) or {}).get("version") or "")


def require_server(client: "Client", who: str, why: str) -> None:
    """check_server on the server a client is connected to."""
    check_server(server_version(client), client.server, who, why)
