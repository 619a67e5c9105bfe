"""The exceptions of the pctl SDK.

Every error the SDK raises is a :class:`PctlError`. Its ``code`` is one of the error codes of
``spec/protocol.md`` §3, so a caller can branch on a class (``except pctl.NotFound``) or on the
code (``e.code == "not_found"``), and an error that crossed the wire (a broker reply with
``Pctl-Error``) maps back to the same class as one raised locally.

    PctlError                        code
    ├── BadRequest (ValueError)      bad_request         bad arguments, a record that can never be sent
    ├── NotFound (LookupError)       not_found           unknown topic or plugin
    ├── Exists                       exists
    ├── Conflict                     conflict
    ├── InUse                        in_use
    ├── PluginRejected               plugin_rejected     the broker's conformance check refused a module
    ├── PluginFailed                 plugin_failed       a module failed to load or to partition
    │   ├── runtime.LoadError                            refused at load (names the file/plugin)
    │   └── runtime.CallError                            a call into the module failed (names the plugin)
    ├── Fenced                       fenced
    ├── ChangeInProgress             change_in_progress
    ├── PermissionDenied (PermissionError) permission    names the subject and the role it needs
    ├── Unavailable (ConnectionError) unavailable        broker unreachable, no answer, topic being created
    │   └── MsgIdInProcess                               a record's id refused as "in process" (10158)
    ├── OutOfSequence                out_of_sequence     the produce service missed an earlier request (§5.2)
    ├── Unsupported                  unsupported         needs something this implementation lacks (§6.1)
    └── InternalError                internal
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "PctlError", "BadRequest", "NotFound", "Exists", "Conflict", "InUse", "PluginRejected",
    "PluginFailed", "Fenced", "ChangeInProgress", "PermissionDenied", "Unavailable", "MsgIdInProcess",
    "OutOfSequence", "Unsupported", "InternalError", "error_from_code", "role_hint",
]


class PctlError(Exception):
    """Base of every pctl error. ``code`` is the wire code of spec/protocol.md §3, ``message`` a
    one-line explanation that says what to do next, ``detail`` optional JSON data from the broker
    (for ``plugin_rejected``: the conformance report)."""

    code = "internal"

    def __init__(self, message: str, *, detail: Any = None):
        super().__init__(message)
        self.message = message
        self.detail = detail


class BadRequest(PctlError, ValueError):
    """Bad arguments: a bad topic or producer id, a key over 64 KiB, a record the stream refuses
    (larger than its maximum message size), a partition count out of range."""
    code = "bad_request"


class NotFound(PctlError, LookupError):
    """The topic or plugin does not exist."""
    code = "not_found"


class Exists(PctlError):
    """The topic or plugin already exists."""
    code = "exists"


class Conflict(PctlError):
    """A concurrent change won (compare-and-set lost); retry."""
    code = "conflict"


class InUse(PctlError):
    """The plugin is used by a topic and cannot be deleted."""
    code = "in_use"


class PluginRejected(PctlError):
    """The broker's conformance check refused a module; ``detail`` holds the report."""
    code = "plugin_rejected"


class PluginFailed(PctlError):
    """A partitioner module failed: it could not be loaded, or a call into it trapped, ran out of
    its limits or returned a bad result. ``plugin`` is its metadata name (or the file it came
    from) and ``digest`` its SHA-256 when known; the message names both."""
    code = "plugin_failed"

    def __init__(self, message: str, *, plugin: str = "", digest: str = "", detail: Any = None):
        super().__init__(message, detail=detail)
        self.plugin = plugin
        self.digest = digest


class Fenced(PctlError):
    """An epoch was fenced (the producer handles this itself; it reaches callers only from the
    broker's produce service)."""
    code = "fenced"


class ChangeInProgress(PctlError):
    """Another epoch change of the topic is in progress."""
    code = "change_in_progress"


class PermissionDenied(PctlError, PermissionError):
    """The connection's credentials may not use a subject. ``subject`` is the refused subject,
    ``role`` the role it needs (``"producer"``, ``"consumer"``, ``"admin"`` or ``""`` when
    unknown) and ``creds`` the credentials file the connection used."""
    code = "permission"

    def __init__(self, message: str, *, subject: str = "", role: str = "", creds: str = "", detail: Any = None):
        super().__init__(message, detail=detail)
        self.subject = subject
        self.role = role
        self.creds = creds


class Unavailable(PctlError, ConnectionError):
    """The broker cannot be reached or did not answer, or the topic is being created or deleted."""
    code = "unavailable"


class MsgIdInProcess(Unavailable):
    """One record: JetStream kept refusing its message id as "duplicate message id is in process"
    (API error 10158, spec/protocol.md §5.1.5), so the producer stopped re-sending it. Its fate is
    unknown (it may be stored): read the partition before producing it again. ``msg_id`` is the
    record's ``Nats-Msg-Id``, ``partition`` the partition that refused it, ``answers`` how many
    10158 answers it got (0 when it came from the produce service, whose reply does not say). Its
    code is ``unavailable`` (it is an :class:`Unavailable`); it crosses the wire, from the produce
    service, as ``unavailable`` with the detail ``"in_process": true`` (spec/protocol.md §3), which
    :func:`error_from_code` maps back to this class. A thin client does not re-send such a record
    under the same identity (§5.2 step 5)."""

    def __init__(self, message: str, *, msg_id: str = "", partition: int = -1, answers: int = 0, detail: Any = None):
        super().__init__(message, detail=detail)
        self.msg_id = msg_id
        self.partition = partition
        self.answers = answers


class OutOfSequence(PctlError):
    """The produce service refused a request because one before it (same producer) never arrived,
    or because it does not know the producer on its own subject (spec/protocol.md §5.2): re-send
    every unacknowledged record in order."""
    code = "out_of_sequence"


class Unsupported(PctlError):
    """The request or the group needs something this implementation lacks, for example a consumer
    group whose assignor it does not implement (spec/protocol.md §6.1)."""
    code = "unsupported"


class InternalError(PctlError):
    """The broker failed, or sent something the SDK cannot use (e.g. module bytes whose SHA-256
    is not the digest asked for)."""
    code = "internal"


_BY_CODE = {c.code: c for c in (BadRequest, NotFound, Exists, Conflict, InUse, PluginRejected, PluginFailed,
                                 Fenced, ChangeInProgress, PermissionDenied, Unavailable, OutOfSequence,
                                 Unsupported, InternalError)}


def is_topic_creating(e: BaseException) -> bool:
    """Whether ``e`` is the broker's answer for a topic whose creation has not finished:
    ``unavailable`` with the detail ``{"creating": true, "topic": T}`` (spec/protocol.md §3).
    Clients that wait for a new topic decide by the detail, never by the message's words."""
    d = getattr(e, "detail", None)
    return isinstance(e, Unavailable) and isinstance(d, dict) and d.get("creating") is True


def error_from_code(code: str, message: str, detail: Any = None) -> PctlError:
    """The exception for an error reply of the broker (spec/protocol.md §3). An unknown code
    becomes an :class:`InternalError` that keeps the code. An ``unavailable`` error whose detail
    has ``"in_process": true`` (a record whose Nats-Msg-Id is stuck, §5.1.5) becomes a
    :class:`MsgIdInProcess` with the detail's ``msg_id`` and ``partition`` (``answers`` 0: the wire
    does not say): a thin client MUST NOT re-send such a record under the same identity (§5.2
    step 5), and the message says to read the partition first. This holds for an error reply and
    for a batched request's per-record ``error`` object alike."""
    if code == "unavailable" and isinstance(detail, dict) and detail.get("in_process") is True:
        partition = detail.get("partition")
        partition = partition if isinstance(partition, int) and not isinstance(partition, bool) else -1
        msg_id = detail.get("msg_id") if isinstance(detail.get("msg_id"), str) else ""
        return MsgIdInProcess(
            f"{message or 'unavailable'} (not to be re-sent under the same identity, spec/protocol.md §5.2: the stream "
            f"refuses its id {msg_id} for its duplicate window, 2 minutes; the record's fate is unknown: read partition "
            f"{partition} of epoch {detail.get('epoch')} before producing it again, as a new record)",
            msg_id=msg_id, partition=partition, detail=detail)
    cls = _BY_CODE.get(code)
    if cls is None:
        e = InternalError(message or f"broker error {code}", detail=detail)
        e.code = code
        return e
    return cls(message or code.replace("_", " "), detail=detail)


def role_hint(subject: str) -> tuple[str, str]:
    """For a refused subject: (the role it needs, a sentence saying so). Mirrors broker/wire's
    RoleHint and the role table of spec/protocol.md §8."""
    subject = subject.lower()  # nats-py reports violations in lower case
    if subject.startswith("pctl.admin"):
        return "admin", "this needs the admin role (connect with the broker's admin.nk)"
    if subject.startswith("pctl.data") or subject.startswith("pctl.produce"):
        return "producer", "producing needs the producer or admin role (producer.nk)"
    if subject.startswith("$kv.pctl-groups") or subject.startswith("$js.api.consumer") or subject.startswith("$js.ack"):
        return "consumer", "consuming needs the consumer or admin role (consumer.nk)"
    return "", "check the role of the credentials you connect with"


def permission_denied(subject: str, creds: Optional[str], op: str = "publish to") -> PermissionDenied:
    """The PermissionDenied for a permissions violation the server reported on `subject`."""
    role, hint = role_hint(subject)
    who = f"the credentials {creds}" if creds else "this connection (no credentials)"
    return PermissionDenied(f"permission denied: {who} may not {op} {subject}: {hint}", subject=subject, role=role, creds=creds or "")
