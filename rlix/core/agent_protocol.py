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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

PROTOCOL_VERSION: Final = 1
# A line longer than this is refused before it is parsed: a client cannot make
# the agent buffer unbounded input.
MAX_LINE_BYTES: Final = 1 << 20
# At most this many descriptors per message (the kernel's own cap is 253).
MAX_FDS: Final = 8
# Bounds on what is inside a line, checked while it is parsed: Python's json
# would otherwise raise ValueError past 4,300 digits and RecursionError at a
# few thousand levels, which no caller expects. The protocol's deepest message
# (a park manifest inside a reply) is 5 levels; its largest number a byte count.
MAX_DEPTH: Final = 32
MAX_NUMBER_CHARS: Final = 24
# Connections one pod may hold open to its node's agent at once (each is a
# thread and a descriptor there): a process connects once, and a pod runs a
# few (trainer ranks, engine workers); the next one is refused with the count.
MAX_POD_CONNECTIONS: Final = 64

# Requests a client sends to the agent.
OP_HELLO: Final = "hello"  # {"hooks": [names], "parked": manifest|null, "client": name/revision}
# {"phase": "rollout", "wait": true?}; with "wait" the reply comes once the node's
# phase gate lets the process in (at once without a gate): {"since", "waited_s", "expired"}.
# Without it, from a client of revision 2 or later, the phase it is in now (below).
OP_PHASE: Final = "phase"
OP_USAGE: Final = "usage"  # {"gpu": 0, "memory_mib": 1024, "utilization": 0.5}; simulated only
# {}; reply {"activeReplicas": ActiveReplicas document or null}: which replicas of
# the caller's job's elastic rollout role run (rlix.io/active-replicas).
OP_ACTIVE_REPLICAS: Final = "active-replicas"
# Requests an operator-side controller sends (refused from inside a pod).
# suspend-pod: {"pod_uid": "...", "target": Location (a target), "reason": Reason}
OP_SUSPEND_POD: Final = "suspend-pod"
OP_RESUME_POD: Final = "resume-pod"  # {"pod_uid": "...", "reason": Reason}
OP_STATUS: Final = "status"  # {}
# Requests the agent sends to a client.
OP_SUSPEND: Final = "suspend"  # {"target": Location}; reply: the manifest (+ "export")
OP_RELEASE: Final = "release"  # {}; the agent holds a copy: free the exported memory
OP_REGROW: Final = "regrow"  # {"manifest"}; reallocate and export empty buffers to fill
OP_RESUME: Final = "resume"  # {"manifest": {...}}; reply carries the checksums

# The hello's "client": the library and its revision. Revision 2 and later say,
# with a phase report without "wait", the phase the process is in now, inside a
# block (a nested block ended, or it reconnected mid-block): where the agent
# runs the phase gate, that process works in that phase at once. Revision 3
# and later, told that the gate parks ("parksAtGate"), ask the gate to enter a
# phase even while parked and wait for its answer however long: the gate
# brings a pod it parked back at its turn, which it can only do for a pod that
# asks, and holds a pod whose memory does not fit past the wait's bound.
CLIENT_NAME: Final = "rlix-python"
CLIENT_REVISION: Final = 3
_PHASE_NOW_REVISION: Final = 2
_ASKS_WHILE_PARKED_REVISION: Final = 3


def _revision(client: object) -> int | None:
    if not isinstance(client, str):
        return None
    name, _, revision = client.partition("/")
    return int(revision) if name == CLIENT_NAME and revision.isdigit() else None


def reports_phase_now(client: object) -> bool:
    """Whether a hello's "client" says its wait-less phase reports are the phase
    it is in now (revision 2 or later of this library)."""
    revision = _revision(client)
    return revision is not None and revision >= _PHASE_NOW_REVISION


def asks_gate_while_parked(client: object) -> bool:
    """Whether a hello's "client" asks a parking gate to enter while parked and
    waits for its answer without a bound of its own (revision 3 or later)."""
    revision = _revision(client)
    return revision is not None and revision >= _ASKS_WHILE_PARKED_REVISION


CLIENT_OPS: Final = frozenset({OP_HELLO, OP_PHASE, OP_USAGE, OP_ACTIVE_REPLICAS})
CONTROL_OPS: Final = frozenset({OP_SUSPEND_POD, OP_RESUME_POD, OP_STATUS})
AGENT_OPS: Final = frozenset({OP_SUSPEND, OP_RELEASE, OP_REGROW, OP_RESUME})

# Fields allowed per op (besides v/id/op). Anything else is an error, so a typo
# or a forged identity claim is loud instead of silently ignored.
_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    OP_HELLO: frozenset({"hooks", "client", "parked"}),
    OP_PHASE: frozenset({"phase", "wait", "safe_points", "loading"}),
    OP_USAGE: frozenset({"gpu", "memory_mib", "utilization"}),
    OP_ACTIVE_REPLICAS: frozenset(),
    OP_SUSPEND_POD: frozenset({"pod_uid", "target", "reason"}),
    OP_RESUME_POD: frozenset({"pod_uid", "reason"}),
    OP_STATUS: frozenset(),
    OP_SUSPEND: frozenset({"target"}),
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
    obj = _loads(line)
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


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")


def _loads(line: bytes) -> Any:
    """``json.loads`` with the nesting depth and number lengths bounded."""
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH:
        depth = deepest = 0
        for match in _BRACKET.finditer(_STRING.sub(b'""', line)):
            depth += 1 if match.group() in (b"[", b"{") else -1
            deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            raise ProtocolError(E_MALFORMED, f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(line, parse_int=_bounded_int, parse_float=_bounded_float)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(E_MALFORMED, f"not valid JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # the bounds above should make this unreachable
        raise ProtocolError(E_MALFORMED, f"not acceptable JSON: {exc}") from None


def _bounded_int(text: str) -> int:
    _check_number(text)
    return int(text)


def _bounded_float(text: str) -> float:
    _check_number(text)
    return float(text)


def _check_number(text: str) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise ProtocolError(
            E_MALFORMED, f"a number with {len(text)} digits (at most {MAX_NUMBER_CHARS})"
        )


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


class Place(StrEnum):
    """Who holds a parked process's memory: one name for it on every side.

    The same words name a suspend's *target* (what a controller asks for) and a
    manifest's *where* (where the memory is now), so a suspend to ``host`` ends
    with the memory recorded at ``host``, on the agent, the client and the CLI.
    """

    SELF = "self"  # the process itself, in its own pinned host pool
    DRIVER = "driver-checkpoint"  # the CUDA driver, inside the process (no hooks)
    EXPORTED = "exported"  # in transit: handed to the agent, the process still holds it
    HOST = "host"  # the agent: a park file, host memory on a tmpfs
    GPU = "gpu"  # the agent: the park file and a copy in spare HBM of one GPU


# The places a controller may ask for; the others are states a suspend passes.
TARGET_PLACES: Final = frozenset({Place.SELF, Place.HOST, Place.GPU})
MAX_GPU_INDEX: Final = 1023


@dataclass(frozen=True, slots=True)
class Location:
    """A :class:`Place`, and for :attr:`Place.GPU` which GPU of the node.

    On the wire it is one string: the place's value, or ``gpu:<index>``.
    """

    place: Place
    gpu: int | None = None

    def __post_init__(self) -> None:
        if (self.place is Place.GPU) != (self.gpu is not None):
            raise ValueError(f"a GPU index goes with place 'gpu' only ({self.place}, {self.gpu})")

    def __str__(self) -> str:
        return f"{Place.GPU.value}:{self.gpu}" if self.place is Place.GPU else self.place.value

    @property
    def agent_holds(self) -> bool:
        """The agent holds the only copy: the process kept nothing (relocated)."""
        return self.place in (Place.HOST, Place.GPU)

    @classmethod
    def parse(cls, value: Any) -> Location:
        """The one parse of a location string; raises ValueError naming the forms."""
        if isinstance(value, str):
            name, sep, index = value.partition(":")
            if not sep and name != Place.GPU.value and name in {p.value for p in Place}:
                return cls(Place(name))
            digits = sep and name == Place.GPU.value and index.isascii() and index.isdigit()
            if digits and len(index) <= 4 and int(index) <= MAX_GPU_INDEX:
                return cls(Place.GPU, int(index))
        forms = ", ".join(repr(p.value) for p in Place if p is not Place.GPU)
        raise ValueError(f"expected one of {forms} or 'gpu:<index>', got {value!r}")


SELF: Final = Location(Place.SELF)


def parse_target(value: Any) -> Location:
    """A suspend target: ``self`` (the default), ``host`` or ``gpu:<index>``."""
    if value is None:
        return SELF
    try:
        target = Location.parse(value)
    except ValueError:
        target = None
    if target is None or target.place not in TARGET_PLACES:
        raise ProtocolError(
            E_BAD_FIELD,
            f"'target' must be 'self' (the pod's own pinned pool), 'host' (host memory "
            f"the agent holds) or 'gpu:<index>' (spare HBM of that GPU), got {value!r}",
        )
    return target


class Reason(StrEnum):
    """Why a pod is suspended or resumed: the agent counts and times each by reason.

    A closed set, so a metric label cannot grow without bound: ``preemption``
    (a higher-priority job needs the GPUs, or gets them back), ``lending`` (a
    rollout tail's idle GPUs lent out, or returned), ``manual`` (an
    administrator, ``rlix agent``; the default).
    """

    PREEMPTION = "preemption"
    LENDING = "lending"
    MANUAL = "manual"


def parse_reason(value: Any) -> Reason:
    """The ``reason`` of a suspend-pod / resume-pod; absent means ``manual``."""
    if value is None:
        return Reason.MANUAL
    try:
        return Reason(value)
    except ValueError:
        valid = ", ".join(repr(r.value) for r in Reason)
        raise ProtocolError(
            E_BAD_FIELD, f"'reason' must be one of {valid}, got {value!r}"
        ) from None
