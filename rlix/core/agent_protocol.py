"""The node agent's local protocol: versioned, line-delimited JSON over a unix socket.

It lives in the pure core because both ends speak it and the components may not
import each other: the agent (``rlix.agent``) and the client library
(``rlix.client``) each import this module instead of spelling field names.

One message per line, UTF-8 JSON objects. Either side may send a *request*
(``{"v": 1, "id": 7, "op": "phase", ...}``); the other answers with a *reply*
that echoes the id (``{"v": 1, "re": 7, "ok": true, ...}`` or
``{"v": 1, "re": 7, "ok": false, "error": {"code": ..., "message": ...}}``).
Both directions share one connection, so the agent can ask the client to
suspend without the client polling.

No message ever carries the caller's identity: the agent takes it from the
kernel's peer credentials of the socket, so a field like ``pod`` is rejected.

A message may carry file descriptors (SCM_RIGHTS ancillary data sent with its
line); its envelope then says how many (``"fds": 1``), so the reader can pair
them with the right line. Only relocation uses them: a client hands the agent
the sealed memfd its parked bytes were exported into (see
``docs/node-agent.md``, "Relocation").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

PROTOCOL_VERSION: Final = 1
# A line longer than this is refused before it is parsed: a client cannot make
# the agent buffer unbounded input.
MAX_LINE_BYTES: Final = 1 << 20
# At most this many descriptors per message (the kernel's own cap is 253).
MAX_FDS: Final = 8

# Requests a client sends to the agent.
OP_HELLO: Final = "hello"  # {"hooks": [names], "parked": manifest|null}
OP_PHASE: Final = "phase"  # {"phase": "rollout"}
OP_USAGE: Final = "usage"  # {"gpu": 0, "memory_mib": 1024, "utilization": 0.5}; simulated only
# Requests an operator-side controller sends (refused from inside a pod).
OP_SUSPEND_POD: Final = "suspend-pod"  # {"pod_uid": "...", "target": "self"|"host"|"gpu:<i>"}
OP_RESUME_POD: Final = "resume-pod"  # {"pod_uid": "..."}
OP_STATUS: Final = "status"  # {}
# Requests the agent sends to a client.
OP_SUSPEND: Final = "suspend"  # {"relocate": bool}; reply: the manifest (+ "export")
OP_RELEASE: Final = "release"  # {}; the agent holds a copy: free the exported memory
OP_REGROW: Final = "regrow"  # {"manifest"}; reallocate and export empty buffers to fill
OP_RESUME: Final = "resume"  # {"manifest": {...}}; reply carries the checksums

CLIENT_OPS: Final = frozenset({OP_HELLO, OP_PHASE, OP_USAGE})
CONTROL_OPS: Final = frozenset({OP_SUSPEND_POD, OP_RESUME_POD, OP_STATUS})
AGENT_OPS: Final = frozenset({OP_SUSPEND, OP_RELEASE, OP_REGROW, OP_RESUME})

# Where a suspend parks memory (the control op's "target").
TARGET_SELF: Final = "self"  # in the client's own pinned pool (the default)
TARGET_HOST: Final = "host"  # relocated: host memory the agent owns (tmpfs park file)
TARGET_GPU_PREFIX: Final = "gpu:"  # relocated: spare HBM of GPU <i> of the node

# Fields allowed per op (besides v/id/op). Anything else is an error, so a typo
# or a forged identity claim is loud instead of silently ignored.
_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    OP_HELLO: frozenset({"hooks", "client", "parked"}),
    OP_PHASE: frozenset({"phase"}),
    OP_USAGE: frozenset({"gpu", "memory_mib", "utilization"}),
    OP_SUSPEND_POD: frozenset({"pod_uid", "target"}),
    OP_RESUME_POD: frozenset({"pod_uid"}),
    OP_STATUS: frozenset(),
    OP_SUSPEND: frozenset({"relocate"}),
    OP_RELEASE: frozenset(),
    OP_REGROW: frozenset({"manifest"}),
    OP_RESUME: frozenset({"manifest"}),
}

# Error codes (stable strings; clients may branch on them).
E_MALFORMED: Final = "malformed"
E_VERSION: Final = "unsupported-version"
E_UNKNOWN_OP: Final = "unknown-op"
E_BAD_FIELD: Final = "bad-field"
E_FORBIDDEN: Final = "forbidden"
E_NOT_FOUND: Final = "not-found"
E_CONFLICT: Final = "conflict"
E_FAILED: Final = "failed"
E_UNSUPPORTED: Final = "unsupported"


class ProtocolError(Exception):
    """A message that cannot be accepted; ``code`` is one of the ``E_*`` strings."""

    def __init__(self, code: str, message: str, *, msg_id: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.msg_id = msg_id


@dataclass(frozen=True, slots=True)
class Request:
    id: int
    op: str
    args: Mapping[str, Any]
    nfds: int = 0  # descriptors announced in the envelope
    fds: tuple[int, ...] = ()  # the ones received with it (the reader attaches them)


@dataclass(frozen=True, slots=True)
class Reply:
    re: int
    ok: bool
    body: Mapping[str, Any]
    error_code: str | None = None
    error_message: str | None = None
    nfds: int = 0
    fds: tuple[int, ...] = ()


def encode_request(msg_id: int, op: str, *, nfds: int = 0, **args: Any) -> bytes:
    fds = {"fds": nfds} if nfds else {}
    return _line({"v": PROTOCOL_VERSION, "id": msg_id, "op": op, **fds, **args})


def encode_reply(re: int | None, *, nfds: int = 0, **body: Any) -> bytes:
    fds = {"fds": nfds} if nfds else {}
    return _line({"v": PROTOCOL_VERSION, "re": re, "ok": True, **fds, **body})


def encode_error(re: int | None, code: str, message: str) -> bytes:
    error = {"code": code, "message": message}
    return _line({"v": PROTOCOL_VERSION, "re": re, "ok": False, "error": error})


def _line(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Request | Reply:
    """Parse one line into a request or a reply, or raise :class:`ProtocolError`.

    The error carries the message id when one could be read, so the error reply
    can be matched to the request that caused it.
    """
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(E_MALFORMED, f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        obj = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(E_MALFORMED, f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(E_MALFORMED, f"expected a JSON object, got {type(obj).__name__}")
    raw_id = obj.get("id", obj.get("re"))
    msg_id = raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) else None
    version = obj.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            E_VERSION,
            f"protocol version {version!r} not supported; this side speaks {PROTOCOL_VERSION}",
            msg_id=msg_id,
        )
    nfds = obj.pop("fds", 0)
    if isinstance(nfds, bool) or not isinstance(nfds, int) or not 0 <= nfds <= MAX_FDS:
        raise ProtocolError(
            E_MALFORMED, f"'fds' must be an integer in [0, {MAX_FDS}], got {nfds!r}", msg_id=msg_id
        )
    if "re" in obj:
        return _decode_reply(obj, msg_id, nfds)
    if msg_id is None:
        raise ProtocolError(E_MALFORMED, "request needs an integer 'id'")
    op = obj.get("op")
    if not isinstance(op, str) or op not in _FIELDS:
        known = ", ".join(sorted(_FIELDS))
        raise ProtocolError(E_UNKNOWN_OP, f"unknown op {op!r}; known: {known}", msg_id=msg_id)
    args = {k: v for k, v in obj.items() if k not in {"v", "id", "op"}}
    extra = set(args) - _FIELDS[op]
    if extra:
        hint = ""
        if extra & {"pod", "pod_uid", "pid", "namespace"} and op in CLIENT_OPS:
            hint = " (the caller's identity comes from the socket's peer credentials)"
        raise ProtocolError(
            E_BAD_FIELD, f"op {op!r} does not take {sorted(extra)}{hint}", msg_id=msg_id
        )
    return Request(id=msg_id, op=op, args=args, nfds=nfds)


def _decode_reply(obj: Mapping[str, Any], msg_id: int | None, nfds: int) -> Reply:
    if msg_id is None:
        # An error about a line that had no id is still a valid reply (re: null).
        msg_id = -1
    ok = obj.get("ok")
    if not isinstance(ok, bool):
        raise ProtocolError(E_MALFORMED, "reply needs a boolean 'ok'", msg_id=msg_id)
    body = {k: v for k, v in obj.items() if k not in {"v", "re", "ok", "error"}}
    if ok:
        return Reply(re=msg_id, ok=True, body=body, nfds=nfds)
    error = obj.get("error")
    if not isinstance(error, dict):
        raise ProtocolError(E_MALFORMED, "error reply needs an 'error' object", msg_id=msg_id)
    return Reply(
        re=msg_id,
        ok=False,
        body=body,
        error_code=str(error.get("code", E_FAILED)),
        error_message=str(error.get("message", "")),
        nfds=nfds,
    )


def require_str(req: Request, field: str) -> str:
    value = req.args.get(field)
    if not isinstance(value, str) or not value:
        raise ProtocolError(
            E_BAD_FIELD, f"op {req.op!r} needs a non-empty string {field!r}", msg_id=req.id
        )
    return value


def require_number(req: Request, field: str, *, low: float, high: float) -> float:
    value = req.args.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ProtocolError(
            E_BAD_FIELD,
            f"op {req.op!r} needs a number {field!r} in [{low}, {high}], got {value!r}",
            msg_id=req.id,
        )
    return float(value)


def parse_target(value: Any) -> str:
    """Validate a suspend target: "self", "host" or "gpu:<index>"."""
    if value is None:
        return TARGET_SELF
    if isinstance(value, str):
        if value in (TARGET_SELF, TARGET_HOST):
            return value
        index = value.removeprefix(TARGET_GPU_PREFIX)
        if value.startswith(TARGET_GPU_PREFIX) and index.isdigit() and int(index) < 1024:
            return f"{TARGET_GPU_PREFIX}{int(index)}"
    raise ProtocolError(
        E_BAD_FIELD,
        f"'target' must be {TARGET_SELF!r} (the pod's own pinned pool), {TARGET_HOST!r} "
        f"(host memory the agent holds) or '{TARGET_GPU_PREFIX}<index>' (spare HBM of "
        f"that GPU), got {value!r}",
    )
