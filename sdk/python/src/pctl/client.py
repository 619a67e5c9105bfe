"""A connection to a pctl broker: the broker API (spec/protocol.md §3), plugins fetched by digest
and verified, and the permission violations that NATS reports asynchronously."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import socket
from typing import TYPE_CHECKING, Any, Callable, Optional

import nats
import nats.aio.client
import nats.aio.msg
import nats.errors

from . import wire
from .errors import BadRequest, InternalError, PermissionDenied, Unavailable, error_from_code, permission_denied
from ._native import native_for
from .partitioner import Partitioner

if TYPE_CHECKING:
    from .consumer import Consumer
    from .producer import Producer

DEFAULT_SERVER = "nats://127.0.0.1:4222"

_VIOLATION_RE = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"', re.IGNORECASE)

# Verified module bytes by digest, shared by every client of the process: a digest names the
# same bytes forever (abi-v1.md §1).
_modules: dict[str, bytes] = {}


async def connect(server: Optional[str] = None, creds: Optional[str] = None, **kwargs: Any) -> "Client":
    """Connects to a broker; see :meth:`Client.connect`."""
    return await Client.connect(server, creds, **kwargs)


def _check_seed_file(path: str) -> str:
    """Refuses a credentials file that is missing or holds no NKey user seed, before connecting
    (nats-py would retry such a connection until connect_timeout). Returns the user's public key
    ("" when nkeys is not installed)."""
    hint = "use admin.nk, producer.nk or consumer.nk from the broker's data directory (creds= or PCTL_CREDS)"
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 16)
    except OSError as e:
        raise BadRequest(f"credentials {path}: {e.strerror or e}; {hint}") from None
    seeds = [w for w in text.split() if w.startswith(b"SU")]
    try:
        import nkeys
        kp = nkeys.from_seed(bytearray(seeds[0]))
        return kp.public_key.decode()
    except ImportError:
        return ""
    except Exception:  # noqa: BLE001 - nkeys raises its own error types
        raise BadRequest(f"credentials {path}: not an NKey user seed file (a line starting with SU); {hint}") from None


class Client:
    """A connection to a pctl broker. Use it from one asyncio event loop.

    ``async with await pctl.connect(...) as client:`` closes it at the end."""

    def __init__(self, nc: "nats.aio.client.Client", server: str, creds: str, timeout: float, ack_timeout: float,
                 native_builtins: bool = False):
        self._nc = nc
        self.native_builtins = native_builtins
        self.server = server
        self.creds = creds
        self.timeout = timeout
        self.ack_timeout = ack_timeout
        self._parts: dict[tuple, Partitioner] = {}
        self._violation_listeners: list[Callable[[str, str], None]] = []
        self._reconnect_listeners: list[Callable[[], None]] = []

    @classmethod
    async def connect(cls, server: Optional[str] = None, creds: Optional[str] = None, *, name: str = "pctl-python",
                      timeout: float = 30.0, connect_timeout: float = 10.0, ack_timeout: float = 5.0,
                      shared_inbox: bool = False, native_builtins: bool = False) -> "Client":
        """Connects to the broker at `server` (default ``$PCTL_SERVER``, else
        nats://127.0.0.1:4222; several URLs of one NATS cluster comma-separated) with the NKey seed file `creds` (default ``$PCTL_CREDS``; empty: no
        credentials): admin.nk, producer.nk or consumer.nk from the broker's data directory.

        `timeout` bounds each broker API request; `ack_timeout` the wait for a publish's
        acknowledgement, after which the publish is ambiguous and retried with the same
        deduplication id (spec/protocol.md §5.1); `connect_timeout` the first connection (after
        it, the connection reconnects forever). With NKey credentials the client receives its
        replies on the private inbox ``_INBOX_<public key>`` (spec/protocol.md §8.3), which scoped
        credentials (``pctl creds issue``) require; `shared_inbox` uses ``_INBOX`` instead, for a
        server configured before private inboxes existed. `native_builtins` lets producers and
        consumers partition with the Python implementation of a built-in when an epoch's module
        is exactly that built-in's (by digest), without config (the native fast path of
        spec/builtins.md; pinned to the modules by tests/test_native.py); default False: the
        WebAssembly module, the reference, runs. Raises :class:`pctl.Unavailable` when no
        broker answers, :class:`pctl.PermissionDenied` when it refuses the credentials."""
        server = server or os.environ.get("PCTL_SERVER") or DEFAULT_SERVER
        creds = creds if creds is not None else os.environ.get("PCTL_CREDS", "")
        pub = _check_seed_file(creds) if creds else ""
        client: Optional[Client] = None
        errors: list[BaseException] = []
        give_up = asyncio.Event()  # an error that waiting cannot cure

        async def on_error(e: BaseException) -> None:
            if client is not None:
                client._on_async_error(e)
                return
            errors.append(e)
            if isinstance(e, nats.errors.AuthorizationError) or "authorization" in str(e).lower():
                give_up.set()
            elif isinstance(e, (ConnectionRefusedError, socket.gaierror)):
                give_up.set()  # nothing listens there (or no such host): no use waiting

        async def on_reconnect() -> None:
            if client is not None:
                for f in list(client._reconnect_listeners):
                    f()

        nc = nats.aio.client.Client()
        servers = [u.strip() for u in server.split(",") if u.strip()]  # a cluster's URLs, comma-separated
        opts: dict[str, Any] = dict(servers=servers, name=name, error_cb=on_error, allow_reconnect=True,
                                    max_reconnect_attempts=-1, reconnect_time_wait=0.25, connect_timeout=2,
                                    reconnected_cb=on_reconnect, disconnected_cb=on_reconnect)
        if creds:
            opts["nkeys_seed"] = creds
            if pub and not shared_inbox:
                opts["inbox_prefix"] = f"_INBOX_{pub}"
        task = asyncio.ensure_future(nc.connect(**opts))
        auth_wait = asyncio.ensure_future(give_up.wait())
        try:
            done, _ = await asyncio.wait({task, auth_wait}, timeout=connect_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            auth_wait.cancel()
        if task not in done or task.exception() is not None:
            err = task.exception() if task in done else None
            if task not in done:
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 - cancelled or failed: we report below
                    pass
            try:
                await nc.close()
            except Exception:  # noqa: BLE001
                pass
            refused = any(isinstance(x, nats.errors.AuthorizationError) or "authorization" in str(x).lower() for x in errors)
            if refused or isinstance(err, nats.errors.AuthorizationError):
                raise PermissionDenied(f"the broker at {server} refused the credentials {creds or '(none)'}; use admin.nk, producer.nk or consumer.nk from the broker's data directory (creds= or PCTL_CREDS)", creds=creds) from None
            last = err or (errors[-1] if errors else None)
            why = f": {last}" if last and str(last) else f" within {connect_timeout:g}s"
            raise Unavailable(f"cannot connect to {server}{why}; is 'pctl serve' running? (server= or PCTL_SERVER)") from None
        client = cls(nc, server, creds, timeout, ack_timeout, native_builtins)
        return client

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def nc(self) -> "nats.aio.client.Client":
        """The underlying nats-py connection."""
        return self._nc

    async def close(self) -> None:
        """Closes the connection (pending publishes are flushed first)."""
        if not self._nc.is_closed:
            try:
                await self._nc.drain()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            if not self._nc.is_closed:
                await self._nc.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --- permission violations -------------------------------------------------------------------

    def _on_async_error(self, e: BaseException) -> None:
        m = _VIOLATION_RE.search(str(e))
        if not m:
            return
        op, subject = m.group(1).lower(), m.group(2)
        for f in list(self._violation_listeners):
            f(op, subject)

    def _on_violation(self, f: Callable[[str, str], None]) -> Callable[[], None]:
        """Registers f(op, subject) for every permissions violation the server reports. nats-py
        reports the subject in lower case: listeners compare case-insensitively."""
        self._violation_listeners.append(f)
        return lambda: self._violation_listeners.remove(f) if f in self._violation_listeners else None

    def _on_reconnect(self, f: Callable[[], None]) -> Callable[[], None]:
        """Registers `f` to run after the connection was lost and after it came back (readers
        re-create their server-side state then: requests in flight were lost)."""
        self._reconnect_listeners.append(f)
        return lambda: self._reconnect_listeners.remove(f) if f in self._reconnect_listeners else None

    def permission_error(self, subject: str, op: str = "publish") -> PermissionDenied:
        return permission_denied(subject, self.creds, "publish to" if op == "publish" else "subscribe to")

    # --- requests --------------------------------------------------------------------------------

    async def request(self, subject: str, body: Any = None, *, timeout: Optional[float] = None) -> "nats.aio.msg.Msg":
        """A broker API request (JSON body, or raw bytes). Returns the reply message; an error
        reply (header Pctl-Error) raises the PctlError of its code."""
        if body is None:
            data = b"{}"
        elif isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        else:
            data = json.dumps(body).encode()
        msg = await self.raw_request(subject, data, timeout=timeout)
        code = (msg.headers or {}).get(wire.HEADER_ERROR)
        if code:
            try:
                er = json.loads(msg.data)
            except ValueError:
                er = {}
            raise error_from_code(er.get("code") or code, er.get("message") or "", er.get("detail"))
        return msg

    async def raw_request(self, subject: str, data: bytes, *, headers: Optional[dict] = None,
                          timeout: Optional[float] = None) -> "nats.aio.msg.Msg":
        """A request/reply round trip. Raises :class:`pctl.PermissionDenied` when the server
        reports that the credentials may not publish to `subject`, :class:`pctl.Unavailable` when
        nothing answers (no responders, or no reply within `timeout`, default the client's)."""
        loop = asyncio.get_running_loop()
        violated: asyncio.Future = loop.create_future()

        low = subject.lower()

        def on_violation(op: str, subj: str) -> None:
            if subj.lower() == low and not violated.done():
                violated.set_result(op)

        stop = self._on_violation(on_violation)
        req = asyncio.ensure_future(self._nc.request(subject, data, timeout=timeout or self.timeout, headers=headers))
        try:
            done, _ = await asyncio.wait({req, violated}, return_when=asyncio.FIRST_COMPLETED)
            if violated in done:
                req.cancel()
                raise self.permission_error(subject, violated.result())
            try:
                return req.result()
            except nats.errors.NoRespondersError:
                raise Unavailable(f"no broker answers {subject}; is 'pctl serve' running and connected to {self.server}?") from None
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                # A violation may be reported just after the timeout.
                try:
                    op = await asyncio.wait_for(asyncio.shield(violated), 0.05)
                    raise self.permission_error(subject, op) from None
                except asyncio.TimeoutError:
                    pass
                raise Unavailable(f"the broker did not answer {subject} within {timeout or self.timeout:g}s") from None
            except nats.errors.Error as e:
                raise Unavailable(f"{subject}: {e}") from None
        finally:
            stop()
            if not req.done():
                req.cancel()

    async def request_json(self, subject: str, body: Any = None, *, timeout: Optional[float] = None) -> Any:
        msg = await self.request(subject, body, timeout=timeout)
        try:
            return json.loads(msg.data)
        except ValueError as e:
            raise InternalError(f"bad reply to {subject}: {e}") from None

    # --- topics and plugins ----------------------------------------------------------------------

    async def topic(self, name: str, *, timeout: Optional[float] = None) -> wire.Topic:
        """The topic's descriptor (spec/protocol.md §4). Raises :class:`pctl.NotFound` for an
        unknown topic."""
        wire.valid_name("topic name", name)
        return wire.Topic.from_reply(await self.request_json(wire.API_TOPIC_GET, {"topic": name}, timeout=timeout))

    async def module(self, digest: str) -> bytes:
        """A plugin's bytes by digest (64 hex digits), verified: their SHA-256 must equal the
        digest and the Pctl-Digest header (spec/protocol.md §3). Cached by digest."""
        if digest in _modules:
            return _modules[digest]
        if not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
            raise BadRequest(f"plugin digest {digest!r}: 64 lowercase hex digits")
        msg = await self.request(wire.API_PLUGIN_GET, {"plugin": digest})
        got = hashlib.sha256(msg.data).hexdigest()
        header = (msg.headers or {}).get(wire.HEADER_DIGEST, "")
        if got != digest or header != digest:
            raise InternalError(f"plugin {digest}: the bytes received hash to {got} (header {header or 'absent'}): refusing to run them")
        _modules[digest] = bytes(msg.data)
        return _modules[digest]

    async def partitioner(self, ref: wire.PartitionerRef) -> Partitioner:
        """The partitioner of an epoch: its module fetched by digest (verified, cached) and
        loaded with the epoch's config. Raises :class:`pctl.PluginFailed` naming the plugin."""
        k = (ref.digest, ref.config)
        p = self._parts.get(k)
        if p is None:
            data = await self.module(ref.digest)
            if self.native_builtins:  # the native fast path: a shipped built-in's exact digest only
                p = native_for(ref.digest, ref.config, data)
                if p is not None:
                    return self._parts.setdefault(k, p)
            source = f"plugin {ref.name or 'unnamed'}"
            # Compiling a large module takes a moment (once per digest: wasmtime's code is cached
            # on disk): keep the event loop free meanwhile.
            p = await asyncio.get_running_loop().run_in_executor(
                None, lambda: Partitioner(data, config=ref.config, source=source))
            p = self._parts.setdefault(k, p)
        return p

    async def producer(self, topic: str, **kwargs: Any) -> "Producer":
        """A producer for `topic`; see :class:`pctl.Producer` for the options."""
        from .producer import Producer
        return await Producer.create(self, topic, **kwargs)


    async def consumer(self, topic: str, group: str, **kwargs: Any) -> "Consumer":
        """Joins consumer group `group` on `topic` as a new member (spec/protocol.md §6) and returns
        it; iterate it with ``async for record in consumer``. Options (defaults in brackets):

        - `member` [random]: the member id, 1 to 64 of ``[A-Za-z0-9_-]``;
        - `from_beginning` [False]: a group that does not exist yet starts at the first record of
          every partition, else after the records present when it is created (partitions created
          later are always read from their first record);
        - `start` [None]: where a group that does not exist yet starts: "now", "beginning" (every
          epoch, gated) or "current-epoch" (the current epoch alone, no gates, every backfilled
          copy delivered: spec/protocol.md §10.5); None: "beginning" with from_beginning, on a
          compacted topic "current-epoch" when no backfill runs ("beginning" while one does),
          else "now";
        - `auto_commit` [True]: a record is acknowledged when the iterator is asked for the next
          one; False: only by ``await consumer.commit(record)`` (at-least-once processing: gates
          of other partitions open only on what you commit);
        - `heartbeat` [1.0 s], `session_timeout` [6.0 s], `commit_interval` [0.2 s];
        - `on_assigned`, `on_revoked` (lists of partitions), `on_keys_assigned`,
          `on_keys_revoked` (:class:`pctl.KeyChange`): callbacks, plain or async;
        - `gating` [True]: False delivers newer-epoch records without waiting for their keys'
          older partitions (per-key order across epoch changes is then NOT kept; for benchmarks);
        - `max_buffered` [512]: records fetched ahead per partition;
        - `logf`: receives the member's decisions (acquire, release, lost, gates waiting long).
        - `assignor` [None]: a new group's assignor (spec/protocol.md §6.2): "modulo" (the default)
          or "sticky" (keeps each key with the member that holds its state, §6.2.1; the group's
          leader records the assignment in ``g.assignment``); an existing group keeps its own, and
          one that differs from the assignor given raises :class:`pctl.Conflict`.
        - `state` [None]: a :class:`pctl.StateHandler` (``load(ks)``, ``flush(ks)``): the per-key
          state handover of spec/protocol.md §6.9 (needs gating).

        Needs the consumer or admin role."""
        from .consumer import Consumer
        return await Consumer.create(self, topic, group, **kwargs)
