"""The trainer-side runtime: phases, safe points, and suspend/resume handling.

When a suspend takes effect (the contract trainers rely on):

* A suspend request from the agent is carried out at the process's next *phase
  boundary*: when no thread is inside a ``with rlix.phase(...)`` block, or when
  every thread that is inside one is waiting in ``rlix.safe_point()``. Tensors
  are therefore never moved while the trainer is using them.
* A process not inside any phase block is at a boundary: it is suspended at
  once. A trainer that touches registered tensors outside phase blocks must
  wrap that work in a phase block (or it may find them parked).
* While suspended, entering a phase block or calling ``safe_point()`` blocks
  until the agent resumes the process; the phase report is sent after resume.
* Long phases (a rollout of many batches) call ``rlix.safe_point()`` between
  batches, so a suspend does not wait for the whole phase.

Where the node agent runs the phase gate (``--phase-gate``; its hello reply
says so), entering a busy phase block waits until the agent lets the process
in (at most the gate's bound, which the reply also gives), and leaving the
outermost phase block tells the agent the process is idle. While it waits the
process is at a phase boundary, so a suspend can take effect. Leaving a block
nested in another (in this thread or another one) tells the agent the process
is back in the phase of the newest block still open, without waiting: it is
inside a block, where neither a suspend nor a turn may land.

No agent (``RLIX_AGENT_SOCKET`` unset): everything is a cheap no-op, so the same
script runs outside RLix unchanged. Phase names are still validated, so a typo
fails the same way everywhere.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any, Final

from rlix.client.export import Relocation
from rlix.client.hooks import HookRegistry, OffloadHook
from rlix.client.link import AgentLink, AgentUnavailableError
from rlix.core import agent_protocol as proto
from rlix.core.phases import Phase

log = logging.getLogger("rlix")

# What the hello says this library is: a revision whose phase reports without
# "wait" are the phase the process is in now (``agent_protocol.reports_phase_now``).
CLIENT: Final = f"{proto.CLIENT_NAME}/{proto.CLIENT_REVISION}"

# How much longer than the gate's own bound a process waits for its answer
# before it goes in anyway (an agent that stopped answering must not hold it).
GATE_SLACK_S = 30.0

# The first phase block waits this long at most for the link to connect, and
# then for the agent's answer to our hello, which says whether it runs a phase
# gate: a block opened before that answer would go in without asking (a
# model load into memory a partner holds). Once per process; an absent agent
# costs it once.
CONNECT_WAIT_S = 0.5
GREETING_WAIT_S = 2.0


def parse_phase(phase: str | Phase) -> Phase:
    parsed = phase if isinstance(phase, Phase) else Phase.parse(phase)
    if parsed is None:
        valid = ", ".join(p.value for p in Phase)
        raise ValueError(f"unknown phase {phase!r}; valid phases: {valid}")
    return parsed


class Runtime:
    def __init__(self, socket_path: str | None) -> None:
        self.hooks = HookRegistry()
        self._cv = threading.Condition()
        self._active = 0  # threads inside a phase block and not at a safe point
        self._suspend_requested = False
        self._suspended = False
        self._parked_doc: dict[str, Any] | None = None
        self._parked_hooks: list[OffloadHook] = []
        self._relocation: Relocation | None = None  # when the agent holds (or will hold) a copy
        self._target = proto.SELF  # where the current suspension was asked to park
        self.phase_now: Phase | None = None
        # Phase blocks open in any thread, oldest first: when one ends, the
        # process is in the phase of the newest block still open (or none).
        self._open: list[tuple[object, Phase]] = []
        self._open_lock = threading.Lock()
        # The agent's phase gate bound in seconds; None: the agent has no gate.
        self.gate_wait_s: float | None = None
        # The gate parks pods for each other's turns (``--park-at-gate``): ask
        # it while parked, and wait for its answer without a bound of our own.
        self.gate_parks = False
        self.gate_stops = False
        self.gate_loads = False  # it takes "loading" with a phase
        self._greeting = threading.Event()  # the agent answered a hello
        self._greeting_awaited = False
        self.link: AgentLink | None = None
        if socket_path:
            self.link = AgentLink(
                socket_path,
                on_request=self._on_agent_request,
                on_connect=self._hello,
                on_connect_reply=self._greeted,
            )

    @property
    def suspended(self) -> bool:
        with self._cv:
            return self._suspended

    # -- trainer side ------------------------------------------------------------
    @contextlib.contextmanager
    def phase(
        self, phase: str | Phase, *, safe_points: bool = False, loading: bool = False
    ) -> Iterator[Phase]:
        """A phase block (``rlix.phase``); ``loading``: a weight sync that is the
        process's first allocation (``rlix.loading``)."""
        parsed = parse_phase(phase)
        if self.link is None:  # no-op mode: one validation, nothing else
            previous, self.phase_now = self.phase_now, parsed
            try:
                yield parsed
            finally:
                self.phase_now = previous
            return
        self._await_greeting()
        gated = self.gate_wait_s is not None and self.phase_now is not parsed
        with self._cv:
            # A gate that parks brings a pod it parked back only when the pod
            # asks to go in: ask first, and wait for the memory afterwards.
            if not (gated and self.gate_parks):
                self._cv.wait_for(self._may_run)
            if not gated:
                self._active += 1
        token, previous = self._open_block(parsed)
        if gated:
            try:
                self._enter_through_gate(parsed, safe_points=safe_points, loading=loading)
                with self._cv:
                    self._cv.wait_for(self._may_run)  # a suspend may have come meanwhile
                    self._active += 1
            except BaseException:  # interrupted before the block: it never opened
                self._close_block(token)
                raise
        try:
            if previous is not parsed and not gated:
                self.link.notify(proto.OP_PHASE, phase=parsed.value)
            yield parsed
        finally:
            now = self._close_block(token)
            with self._cv:
                self._active -= 1
                self._cv.notify_all()
            if now is None:
                if self.gate_wait_s is not None:
                    # Out of every phase block: this process holds no GPU's turn.
                    self.link.notify(proto.OP_PHASE, phase=Phase.IDLE.value, wait=True)
            elif now is not parsed:
                # Back in an enclosing block's phase: said without waiting (a
                # suspend, or a turn at the gate, must not land inside a block).
                self.link.notify(proto.OP_PHASE, phase=now.value)

    @contextlib.contextmanager
    def loading(self) -> Iterator[Phase]:
        """The pod's first allocation, reported as a weight sync (``rlix.loading``)."""
        with self.phase(Phase.WEIGHT_SYNC, loading=True) as phase:
            yield phase

    def _await_greeting(self) -> None:
        """Before the first phase block: wait (bounded) to hear whether the agent
        gates phases (``CONNECT_WAIT_S``, ``GREETING_WAIT_S``)."""
        if self.link is None or self._greeting_awaited:
            return
        self._greeting_awaited = True
        if self.link.connected.wait(CONNECT_WAIT_S):
            self._greeting.wait(GREETING_WAIT_S)

    def _open_block(self, phase: Phase) -> tuple[object, Phase | None]:
        """Note a block of ``phase`` open; its token, and the phase the process was in."""
        token = object()
        with self._open_lock:
            previous = self._open[-1][1] if self._open else None
            self._open.append((token, phase))
            self.phase_now = phase
        return token, previous

    def _close_block(self, token: object) -> Phase | None:
        """Note the block ``token`` closed; the phase the process is in now."""
        with self._open_lock:
            self._open = [(t, p) for t, p in self._open if t is not token]
            self.phase_now = self._open[-1][1] if self._open else None
            return self.phase_now

    def _enter_through_gate(
        self, phase: Phase, *, safe_points: bool = False, loading: bool = False
    ) -> None:
        """Report ``phase`` and wait until the agent's phase gate lets us in;
        ``safe_points``: say that this block calls ``safe_point()``, and
        ``loading``: that it is the first allocation (each where the agent
        takes it: an older one refuses a field it does not know)."""
        assert self.link is not None and self.gate_wait_s is not None
        extra: dict[str, bool] = {}
        if safe_points and self.gate_stops:
            extra["safe_points"] = True
        if loading and self.gate_loads:
            extra["loading"] = True
        fut = self.link.request(proto.OP_PHASE, phase=phase.value, wait=True, **extra)
        # A parking gate holds a pod whose memory does not fit past the bound
        # (going in would run the GPU out of memory); a lost agent still ends
        # the wait (AgentUnavailableError).
        bound = None if self.gate_parks else self.gate_wait_s + GATE_SLACK_S
        try:
            reply = fut.result(timeout=bound)
        except AgentUnavailableError as exc:  # reconnecting: the next hello says what it offers
            log.debug("rlix: entering %s without the phase gate: %s", phase.value, exc)
            return
        except Exception as exc:  # no answer (agent stuck): go in, as without a gate
            log.warning("rlix: no answer from the phase gate (%s); entering %s", exc, phase.value)
            return
        if not reply.ok:
            log.warning("rlix agent refused a phase report: %s", reply.error_message)
        elif reply.body.get("expired"):
            log.info(
                "rlix: entered %s beside a working neighbour after %.0f s at the phase gate "
                "(its bound)",
                phase.value,
                reply.body.get("waited_s", 0.0),
            )

    def safe_point(self) -> None:
        """Let a pending suspend happen here (inside a long phase); else return at once."""
        if self.link is None:
            return
        with self._cv:
            if self._may_run():
                return
            self._active -= 1
            self._cv.notify_all()
            self._cv.wait_for(self._may_run)
            self._active += 1

    def _may_run(self) -> bool:
        return not self._suspend_requested and not self._suspended

    def register(self, hook: OffloadHook) -> None:
        self.hooks.add(hook)
        if self.link is not None:
            self.link.notify(proto.OP_HELLO, **self._hello_args())

    # -- agent side (runs on the link's request thread) --------------------------
    def _hello_args(self) -> dict[str, Any]:
        with self._cv:
            parked = self._parked_doc if self._suspended else None
        return {"hooks": self.hooks.names(), "parked": parked, "client": CLIENT}

    def _greeted(self, op: str, reply: proto.Reply) -> None:
        """The agent's answer to our hello: whether it runs a phase gate."""
        if op != proto.OP_HELLO:
            return
        try:
            self._read_greeting(reply)
        finally:
            self._greeting.set()

    def _read_greeting(self, reply: proto.Reply) -> None:
        gate = reply.body.get("phaseGate")
        bound = gate.get("maxWaitS") if isinstance(gate, dict) else None
        if isinstance(bound, int | float) and not isinstance(bound, bool) and bound > 0:
            self.gate_wait_s = float(bound)
        else:
            self.gate_wait_s = None
        parks = isinstance(gate, dict) and gate.get("parksAtGate") is True
        self.gate_parks = self.gate_wait_s is not None and parks
        # Whether it takes "safe_points" with a phase (an older agent refuses
        # a field it does not know).
        self.gate_stops = (
            self.gate_parks and isinstance(gate, dict) and gate.get("stopsAtSafePoints") is True
        )
        self.gate_loads = (
            self.gate_wait_s is not None
            and isinstance(gate, dict)
            and gate.get("takesLoading") is True
        )

    def _hello(self) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = [(proto.OP_HELLO, self._hello_args())]
        if self.phase_now is not None:
            out.append((proto.OP_PHASE, {"phase": self.phase_now.value}))
        return out

    def _on_agent_request(self, req: proto.Request) -> bytes | tuple[bytes, list[int]]:
        if req.op == proto.OP_SUSPEND:
            manifest, export, fds = self._suspend(proto.parse_target(req.args.get("target")))
            if export is None:
                return proto.encode_reply(req.id, manifest=manifest)
            line = proto.encode_reply(req.id, nfds=len(fds), manifest=manifest, export=export)
            return line, fds
        if req.op == proto.OP_RELEASE:
            self._release()
            return proto.encode_reply(req.id)
        if req.op == proto.OP_REGROW:
            export, fds = self._regrow()
            return proto.encode_reply(req.id, nfds=len(fds), export=export), fds
        if req.op == proto.OP_RESUME:
            return proto.encode_reply(req.id, checksums=self._resume(req.args.get("manifest")))
        raise proto.ProtocolError(proto.E_UNKNOWN_OP, f"client does not handle {req.op!r}")

    def _suspend(
        self, target: proto.Location
    ) -> tuple[dict[str, Any], dict[str, Any] | None, list[int]]:
        hooks = self.hooks.hooks()
        if not hooks:
            raise proto.ProtocolError(proto.E_UNSUPPORTED, "no offload hooks registered")
        with self._cv:
            if self._suspended:
                # A repeated request (the agent restarted): the same answer.
                assert self._parked_doc is not None
                return self._parked_doc, None, []
            self._suspend_requested = True
            self._cv.wait_for(lambda: self._active == 0)
        entries: list[dict[str, Any]] = []
        done: list[OffloadHook] = []
        relocation: Relocation | None = None
        export: dict[str, Any] | None = None
        fds: list[int] = []
        movable = [h for h in hooks if target.agent_holds and getattr(h, "relocatable", False)]
        try:
            if movable:
                relocation = Relocation(movable)
                moved, export, fds = relocation.export()
                entries += moved
                hooks = [h for h in hooks if h not in movable]
            for hook in hooks:
                for name, (nbytes, checksum) in hook.offload().items():
                    key = f"{hook.name}/{name}"
                    entries.append({"name": key, "nbytes": nbytes, "checksum": checksum})
                done.append(hook)
        except BaseException:
            for hook in done:  # undo, so a failed suspend leaves a working process
                hook.restore()
            if relocation is not None:
                relocation.done()  # nothing was freed yet: just forget the export
            with self._cv:
                self._suspend_requested = False
                self._cv.notify_all()
            raise
        doc: dict[str, Any] = {"where": str(proto.SELF), "entries": entries}
        if relocation is not None:
            doc.update(where=proto.Place.EXPORTED.value, size=relocation.size)
        with self._cv:
            self._parked_hooks = done
            self._parked_doc = doc
            self._relocation = relocation
            self._target = target
            self._suspended = True
            self._suspend_requested = False
        return doc, export, fds

    def _relocation_now(self, op: str) -> Relocation:
        with self._cv:
            if not self._suspended or self._relocation is None:
                raise proto.ProtocolError(
                    proto.E_CONFLICT, f"{op!r}: this process has no relocated memory"
                )
            return self._relocation

    def _release(self) -> None:
        relocation = self._relocation_now(proto.OP_RELEASE)
        try:
            relocation.release()
        except ValueError as exc:
            raise proto.ProtocolError(proto.E_CONFLICT, str(exc)) from None
        with self._cv:
            assert self._parked_doc is not None
            # The agent took the memory where it was asked to: one name for it.
            self._parked_doc = {**self._parked_doc, "where": str(self._target)}

    def _regrow(self) -> tuple[dict[str, Any] | None, list[int]]:
        relocation = self._relocation_now(proto.OP_REGROW)
        try:
            return relocation.regrow()
        except ValueError as exc:
            raise proto.ProtocolError(proto.E_CONFLICT, str(exc)) from None

    def _resume(self, manifest: Any) -> dict[str, str]:
        with self._cv:
            if not self._suspended or self._parked_doc is None:
                raise proto.ProtocolError(proto.E_CONFLICT, "this process is not suspended")
            recorded = {e["name"]: e["checksum"] for e in self._parked_doc["entries"]}
        if isinstance(manifest, dict):
            theirs = {e.get("name") for e in manifest.get("entries", []) if isinstance(e, dict)}
            if theirs != set(recorded):
                raise proto.ProtocolError(
                    proto.E_CONFLICT,
                    f"resume manifest names {sorted(map(str, theirs))}, parked {sorted(recorded)}",
                )
        checksums: dict[str, str] = {}
        if self._relocation is not None:
            try:
                checksums.update(self._relocation.finish())
            except ValueError as exc:
                raise proto.ProtocolError(proto.E_CONFLICT, str(exc)) from None
        for hook in self._parked_hooks:
            for name, checksum in hook.restore().items():
                checksums[f"{hook.name}/{name}"] = checksum
        self._parked_hooks = []
        # Checked here too, not only by the agent: the trainer must not run on
        # memory that did not come back intact, so it stays suspended.
        bad = sorted(n for n, c in recorded.items() if checksums.get(n) != c)
        if bad:
            log.error("rlix: restored memory differs from what was parked: %s", bad)
            raise proto.ProtocolError(
                proto.E_FAILED,
                f"integrity check failed: mismatched {bad}; this process stays suspended "
                "rather than train on memory that did not come back bit for bit",
            )
        if self._relocation is not None:
            self._relocation.done()
        with self._cv:
            self._suspended = False
            self._parked_doc = None
            self._relocation = None
            self._cv.notify_all()
        return checksums
