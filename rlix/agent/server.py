"""The agent's unix socket server: authenticate each peer, dispatch its requests.

Who may do what is decided by the kernel's peer credentials alone:

* a process inside a pod may report its own phase and usage and announce hooks;
* a host process running as the agent's user (the operator-side controller or
  an administrator on the node) may suspend, resume and query, and so may a
  process in the agent's own pod (``kubectl exec ... rlix agent``);
* everything else is refused with a reason.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rlix.agent.connections import Connection
from rlix.agent.gpus import BackendUnsupportedError, GpuBackend, gpu_annotation_doc
from rlix.agent.identities import CgroupResolver, UnknownCallerError, peer_credentials
from rlix.agent.metrics import AgentMetrics
from rlix.agent.phase_gate import PhaseGate
from rlix.agent.preemption import Preemption, rfc3339
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.rosters import Rosters
from rlix.core import agent_protocol as proto
from rlix.core.names import (
    ANNOTATION_ITERATIONS,
    ANNOTATION_NODE_GPUS,
    ANNOTATION_PHASE,
    ANNOTATION_PHASE_SINCE,
    ANNOTATION_WAITING_FOR_TURN,
)
from rlix.core.phases import Phase

log = logging.getLogger(__name__)
# How often the accept loop comes back to the interpreter to run a pending
# signal handler (``serve_forever``).
ACCEPT_WAKE_S = 0.5
# Out of descriptors or memory, accept fails until connections close: wait
# this long and accept again, rather than stop serving every pod on the node.
ACCEPT_RETRY_S = 0.1
_ACCEPT_LATER = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class AgentServer:
    def __init__(
        self,
        *,
        socket_path: Path,
        node_name: str,
        resolver: CgroupResolver,
        backend: GpuBackend,
        publisher: BackgroundPublisher,
        preemption: Preemption,
        now: Callable[[], datetime],
        socket_mode: int = 0o666,
        control_pod_uid: str | None = None,
        metrics: AgentMetrics | None = None,
        rosters: Rosters | None = None,
        gate: PhaseGate | None = None,
    ) -> None:
        # The agent's own pod: `kubectl exec` into it runs `rlix agent ...`,
        # which is a process in a pod but is the node's administrator.
        self._control_pod_uid = control_pod_uid or None
        self._path = socket_path
        self._node = node_name
        self._resolver = resolver
        self._backend = backend
        self._publisher = publisher
        self.preemption = preemption
        self._now = now
        self._mode = socket_mode
        # pod uid -> (phase, since, times it left training)
        self._phases: dict[str, tuple[Phase, str, int]] = {}
        # pod uid -> its processes waiting at the gate -> the phase each asked for
        self._waiting: dict[str, dict[Connection, Phase]] = {}
        # pod uid -> its connections open now (at most MAX_POD_CONNECTIONS)
        self._pod_connections: dict[str, int] = {}
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._last_gpu_doc: str | None = None
        # The publish loop and suspend/resume (Preemption.on_memory_moved) both
        # publish: read and submit under one lock, or an older reading could be
        # submitted after a newer one and stay published.
        self._gpu_doc_lock = threading.Lock()
        self.metrics = metrics or AgentMetrics(node_name)
        # Each pod's elastic roster, filled by the conducting loop (None: no API server).
        self.rosters = rosters or Rosters()
        # The phase gate (--phase-gate): None answers every phase report at once.
        self.gate = gate

    # -- lifecycle ---------------------------------------------------------------
    def bind(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.unlink(missing_ok=True)  # a stale socket from a killed agent
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self._path))
        # Any pod may connect (the socket is mounted into pods); what each may
        # do is decided per connection from its peer credentials.
        os.chmod(self._path, self._mode)
        sock.listen(128)
        self._sock = sock

    def serve_forever(self) -> None:
        assert self._sock is not None, "call bind() first"
        # Never block for good: the kernel may hand SIGTERM to any thread, and
        # Python runs the handler (which stops this loop) on the main thread
        # only once it comes back to the interpreter. Accepted sockets are
        # blocking again (socket.accept with no default timeout).
        self._sock.settimeout(ACCEPT_WAKE_S)
        short = False  # said once per shortage, not once per retry
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if exc.errno not in _ACCEPT_LATER or self._stop.is_set():
                    return  # the socket was closed (stop)
                if not short:
                    log.warning("cannot accept connections (%s): retrying", exc.strerror)
                short = True
                self._stop.wait(ACCEPT_RETRY_S)
                continue
            if short:
                log.warning("accepting connections again")
            short = False
            threading.Thread(target=self._serve_client, args=(client,), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()

    @property
    def stopped(self) -> threading.Event:
        """Set once the server stops (background loops end with it)."""
        return self._stop

    def publish_gpus(self) -> None:
        """Publish the node's GPU state if it changed since the last publication."""
        with self._gpu_doc_lock:
            doc = json.dumps(gpu_annotation_doc(self._backend.gpus()), separators=(",", ":"))
            if doc != self._last_gpu_doc:
                self._last_gpu_doc = doc
                self._publisher.node(self._node, {ANNOTATION_NODE_GPUS: doc})

    def publish_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.preemption.reap()
                self.preemption.reconcile_parks()
            except Exception:
                log.exception("releasing the memory of exited processes failed")
            try:
                self.publish_gpus()
            except Exception:
                log.exception("publishing GPU state failed")

    # -- connections ---------------------------------------------------------------
    def _serve_client(self, client: socket.socket) -> None:
        try:
            caller = self._resolver.resolve(peer_credentials(client))
        except (UnknownCallerError, OSError) as exc:
            _refuse(client, str(exc))
            return
        pod = caller.pod
        if pod is not None and not self._count_connection(pod.uid):
            limit = proto.MAX_POD_CONNECTIONS
            _refuse(
                client,
                f"pod {pod.key} has {limit} connections to this node agent open, "
                "the most one pod may hold; close one first",
            )
            return
        conn = Connection(client, caller, self._handle)
        try:
            if pod is not None:
                self.preemption.attach(conn)
            try:
                conn.serve()
            finally:
                if pod is not None:
                    self.preemption.detach(conn)
                    if self.gate is not None:
                        self.gate.leave(conn)
                        self._done_waiting(pod, conn)
        finally:
            if pod is not None:
                self._uncount_connection(pod.uid)

    def _count_connection(self, uid: str) -> bool:
        """Count one more connection of pod ``uid``; False at its limit (not counted)."""
        with self._lock:
            open_now = self._pod_connections.get(uid, 0)
            if open_now >= proto.MAX_POD_CONNECTIONS:
                return False
            self._pod_connections[uid] = open_now + 1
            return True

    def _uncount_connection(self, uid: str) -> None:
        with self._lock:
            left = self._pod_connections.pop(uid, 1) - 1
            if left > 0:
                self._pod_connections[uid] = left

    def _handle(self, conn: Connection, req: proto.Request) -> bytes | None:
        pod = conn.caller.pod
        if req.op in proto.AGENT_OPS:
            raise proto.ProtocolError(
                proto.E_FORBIDDEN, f"op {req.op!r} is sent by the agent, not to it", msg_id=req.id
            )
        if pod is not None and pod.uid == self._control_pod_uid and req.op in proto.CONTROL_OPS:
            return self._control_op(req)
        if req.op in proto.CLIENT_OPS:
            if pod is None:
                raise proto.ProtocolError(
                    proto.E_FORBIDDEN,
                    f"caller pid {conn.pid} is not in a pod; {req.op!r} is for pods only",
                    msg_id=req.id,
                )
            return self._client_op(conn, req)
        if pod is not None:
            raise proto.ProtocolError(
                proto.E_FORBIDDEN,
                f"control op {req.op!r} refused from inside pod {pod.key}",
                msg_id=req.id,
            )
        if conn.caller.creds.uid not in (0, os.getuid()):
            raise proto.ProtocolError(
                proto.E_FORBIDDEN,
                f"control ops need uid 0 or {os.getuid()}, caller has {conn.caller.creds.uid}",
                msg_id=req.id,
            )
        return self._control_op(req)

    def _client_op(self, conn: Connection, req: proto.Request) -> bytes | None:
        pod = conn.caller.pod
        assert pod is not None
        if req.op == proto.OP_HELLO:
            hooks = req.args.get("hooks", [])
            if not isinstance(hooks, list) or not all(isinstance(h, str) for h in hooks):
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, "'hooks' must be a list of strings", msg_id=req.id
                )
            conn.hooks = tuple(hooks)
            conn.reports_phase_now = proto.reports_phase_now(req.args.get("client"))
            conn.asks_while_parked = proto.asks_gate_while_parked(req.args.get("client"))
            state = self.preemption.on_hello(conn, req.args.get("parked"))
            # A client that is told of the gate asks it at each phase start
            # ("wait") and reports when it leaves its phases (idle); told that
            # it parks, it asks while parked too, and waits for the answer.
            gate = (
                None
                if self.gate is None
                else {
                    "maxWaitS": self.gate.max_wait_s,
                    "parksAtGate": self.gate.parks,
                    # A sync may park a process at its safe points: it may
                    # say which phases it stops at ("safe_points").
                    "stopsAtSafePoints": self.gate.parks,
                    # A weight sync may say it is a first allocation ("loading"),
                    # which parks no working pod (its length is not the sync's).
                    "takesLoading": True,
                }
            )
            return proto.encode_reply(req.id, pod=pod.key, node=self._node, phaseGate=gate, **state)
        if req.op == proto.OP_PHASE:
            raw = proto.require_str(req, "phase")
            phase = Phase.parse(raw)
            if phase is None:
                valid = ", ".join(p.value for p in Phase)
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, f"unknown phase {raw!r}; valid: {valid}", msg_id=req.id
                )
            wait = req.args.get("wait", False)
            if not isinstance(wait, bool):
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, "'wait' must be true or false", msg_id=req.id
                )
            safe_points = req.args.get("safe_points", False)
            if not isinstance(safe_points, bool):
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, "'safe_points' must be true or false", msg_id=req.id
                )
            loading = req.args.get("loading", False)
            if not isinstance(loading, bool):
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, "'loading' must be true or false", msg_id=req.id
                )
            if loading and phase is not Phase.WEIGHT_SYNC:
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD,
                    f"'loading' goes with weight-sync (the weights' first arrival), "
                    f"not {phase.value}",
                    msg_id=req.id,
                )
            if wait and self.gate is not None:
                return self._gated_phase(
                    conn, req.id, phase, safe_points=safe_points, loading=loading
                )
            since = self._set_phase(pod.uid, pod, phase)
            if self.gate is not None:  # in that phase now, inside a block, or not taking part
                self.gate.returned(pod.uid, conn, phase, adopt=conn.reports_phase_now)
            return proto.encode_reply(req.id, since=since)
        if req.op == proto.OP_ACTIVE_REPLICAS:
            roster = self.rosters.of(pod.uid)
            return proto.encode_reply(
                req.id, activeReplicas=roster.to_doc() if roster is not None else None
            )
        # OP_USAGE
        gpu = proto.require_number(req, "gpu", low=0, high=1023)
        mib = proto.require_number(req, "memory_mib", low=0, high=1 << 30)
        util = proto.require_number(req, "utilization", low=0.0, high=1.0)
        try:
            self._backend.report_usage(conn.pid, int(gpu), int(mib), util)
        except BackendUnsupportedError as exc:
            raise proto.ProtocolError(proto.E_UNSUPPORTED, str(exc), msg_id=req.id) from None
        except ValueError as exc:
            raise proto.ProtocolError(proto.E_BAD_FIELD, str(exc), msg_id=req.id) from None
        return proto.encode_reply(req.id)

    def _gated_phase(
        self,
        conn: Connection,
        msg_id: int,
        phase: Phase,
        *,
        safe_points: bool = False,
        loading: bool = False,
    ) -> bytes | None:
        """Let the process into ``phase`` through the gate: the reply now, or
        None and the reply once the gate lets it in (its phase is recorded
        and published then, not while it waits). ``safe_points``: it stops at
        safe points in ``phase``, so a partner's weight sync may park it there.
        ``loading``: the weight sync is its first allocation (``rlix.loading()``)."""
        pod = conn.caller.pod
        assert pod is not None and self.gate is not None

        def go(waited_s: float, expired: bool) -> None:
            self._done_waiting(pod, conn)
            since = self._set_phase(pod.uid, pod, phase)
            reply = proto.encode_reply(
                msg_id, since=since, waited_s=round(waited_s, 3), expired=expired
            )
            conn.send_if_open(reply)

        # Counted before the gate may call ``go`` (from another thread).
        self._start_waiting(pod, conn, phase)
        try:
            goes = self.gate.enter(
                pod.uid, conn, phase, go, safe_points=safe_points, loading=loading
            )
        except BaseException:
            self._done_waiting(pod, conn)
            raise
        if not goes:
            return None
        self._done_waiting(pod, conn)
        since = self._set_phase(pod.uid, pod, phase)
        return proto.encode_reply(msg_id, since=since, waited_s=0.0, expired=False)

    def _start_waiting(self, pod: Any, conn: Connection, phase: Phase) -> None:
        """A process of ``pod`` asks the gate for ``phase``: said on the pod
        (``rlix.io/waiting-for-turn``) while it waits. For one that goes in at
        once the publisher gathers the mark and its removal into the phase's
        patch (unless a publication falls between the two)."""
        with self._lock:
            self._waiting.setdefault(pod.uid, {})[conn] = phase
            self._count_waiting()
            self._publish_pod(pod, {ANNOTATION_WAITING_FOR_TURN: phase.value})

    def _done_waiting(self, pod: Any, conn: Connection) -> None:
        """``conn`` no longer waits (it went in, its bound came, it left): the
        mark goes once none of the pod's processes waits, or names another's phase."""
        with self._lock:
            waiting = self._waiting.get(pod.uid)
            if waiting is None or waiting.pop(conn, None) is None:
                return
            left = next(iter(waiting.values()), None)
            if left is None:
                del self._waiting[pod.uid]
            self._count_waiting()
            self._publish_pod(pod, {ANNOTATION_WAITING_FOR_TURN: left.value if left else None})

    def _count_waiting(self) -> None:
        waiting = sum(len(w) for w in self._waiting.values())
        self.metrics.phase_gate_waiting.labels(self._node).set(waiting)

    def _publish_pod(self, pod: Any, notes: dict[str, str | None]) -> None:
        """Submit under ``_lock``: two threads of one pod (its processes, the
        gate's) submit in the order they decided, so an older mark or phase is
        never published after a newer one."""
        if pod.namespace:
            self._publisher.pod(pod.namespace, pod.name, notes)

    def _set_phase(self, uid: str, pod: Any, phase: Phase) -> str:
        with self._lock:
            previous = self._phases.get(uid)
            if previous is not None and previous[0] is phase:
                return previous[1]  # same phase again: "since" does not move
            since = rfc3339(self._now())
            left_training = 0 if previous is None else previous[2]
            if previous is not None and previous[0] is Phase.TRAINING:
                left_training += 1
            self._phases[uid] = (phase, since, left_training)
            notes: dict[str, str | None] = {
                ANNOTATION_PHASE: phase.value,
                ANNOTATION_PHASE_SINCE: since,
            }
            if uid not in self._waiting:
                # No process of it waits: a mark a restarted agent's predecessor
                # left goes with this phase.
                notes[ANNOTATION_WAITING_FOR_TURN] = None
            if left_training:
                # Cumulative, so a publication that merges phases keeps the count.
                notes[ANNOTATION_ITERATIONS] = str(left_training)
            self._publish_pod(pod, notes)
        self.metrics.phases.enter(uid, pod.namespace, pod.name, phase)
        return since

    def _control_op(self, req: proto.Request) -> bytes:
        if req.op == proto.OP_STATUS:
            return proto.encode_reply(req.id, **self.status())
        if req.op == proto.OP_RESUME_POD and "target" in req.args:
            raise proto.ProtocolError(
                proto.E_BAD_FIELD, "'target' is for suspend-pod only", msg_id=req.id
            )
        uid = proto.require_str(req, "pod_uid")
        try:
            reason = proto.parse_reason(req.args.get("reason"))
            if req.op == proto.OP_SUSPEND_POD:
                target = proto.parse_target(req.args.get("target"))
                result = self._timed_suspend(uid, target, reason)
            else:
                result = self._timed_resume(uid, reason)
        except proto.ProtocolError as exc:
            raise proto.ProtocolError(exc.code, exc.message, msg_id=req.id) from None
        # The node's GPU state was published as the memory moved (on_memory_moved).
        return proto.encode_reply(req.id, **result)

    def _timed_suspend(
        self, uid: str, target: proto.Location, reason: proto.Reason
    ) -> dict[str, Any]:
        """Suspend, counted by outcome and timed when it succeeds (a refusal takes no time)."""
        node, place = self._node, target.place.value
        started = time.perf_counter()
        try:
            result = self.preemption.suspend_pod(uid, target)
        except proto.ProtocolError:
            self.metrics.suspensions.labels(node, reason.value, place, "failed").inc()
            raise
        elapsed = time.perf_counter() - started
        self.metrics.suspend_seconds.labels(node, reason.value, place).observe(elapsed)
        self.metrics.suspensions.labels(node, reason.value, place, "ok").inc()
        return result

    def _timed_resume(self, uid: str, reason: proto.Reason) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            result = self.preemption.resume_pod(uid)
        except proto.ProtocolError:
            self.metrics.resumes.labels(self._node, reason.value, "failed").inc()
            raise
        elapsed = time.perf_counter() - started
        self.metrics.resume_seconds.labels(self._node, reason.value).observe(elapsed)
        self.metrics.resumes.labels(self._node, reason.value, "ok").inc()
        return result

    def status(self) -> dict[str, Any]:
        with self._lock:
            phases = {
                uid: {"phase": p.value, "since": s} for uid, (p, s, _) in self._phases.items()
            }
        suspended = {
            uid: {str(pid): m.to_doc() for pid, m in rec.processes.items()}
            for uid, rec in dict(self.preemption.suspended).items()
        }
        return {
            "node": self._node,
            "backend": self._backend.name,
            "gpus": gpu_annotation_doc(self._backend.gpus()),
            "processes": [
                {
                    "pid": p.pid,
                    "gpu": p.gpu_index,
                    "usedMiB": p.used_mib,
                    "podUID": self._resolver.pod_uid(p.pid),
                }
                for p in self._backend.processes()
            ],
            "phases": phases,
            "pods": self.preemption.pods_doc(),
            "connected": self.preemption.sessions_doc(),
            # Pods whose suspend is in flight (waiting for park replies).
            "suspending": self.preemption.suspending(),
            "suspended": suspended,
            "stateProblems": self.preemption.load_problems,
            "phaseGate": None if self.gate is None else self.gate.status(),
        }


def _refuse(client: socket.socket, reason: str) -> None:
    """Tell an unidentifiable peer why, then hang up so it can read the reason.

    Closing a unix socket that still has unread input resets it and may drop
    our reply before the peer reads it, so half-close and drain briefly first.
    """
    with contextlib.suppress(OSError):
        client.sendall(proto.encode_error(None, proto.E_FORBIDDEN, reason))
        client.shutdown(socket.SHUT_WR)
        client.settimeout(1.0)
        while client.recv(65536):
            pass
    client.close()
