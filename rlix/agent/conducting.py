"""The agent's half of the conductor protocol: carry out what pods on this node ask.

The conductor never calls the agent; it writes ``rlix.io/desired-suspension``
on a pod (see :mod:`rlix.core.suspension`). This loop lists the pods bound to
this node, and for each whose desired generation it has not answered yet, it
suspends or resumes the pod through the same :class:`Preemption` the socket's
``suspend-pod`` uses, then writes ``rlix.io/observed-suspension`` with that
generation. It also writes the node's heartbeat, by which the conductor knows
someone is here to act.

Restart safety comes from deciding on the agent's own record, not on memory:
a suspend whose pod the record already holds is reported, never done twice;
a resume of a pod with no record is reported done. A suspend that fails part
way is rolled back before it is reported, so a pod is never left half parked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from rlix.agent.rosters import Rosters
from rlix.core import agent_protocol as proto
from rlix.core.suspension import (
    ANNOTATION_AGENT_HEARTBEAT,
    ANNOTATION_OBSERVED,
    ObservedSuspension,
    Outcome,
    PodSuspension,
    Refusal,
    State,
)

log = logging.getLogger(__name__)

# How often the heartbeat is written: well inside AGENT_STALE_S.
HEARTBEAT_S = 15.0
# A failed resume is retried this often (the memory stays parked meanwhile).
RESUME_RETRY_S = 5.0
# How long after the agent starts a suspend of a pod with no connected process
# waits, unanswered, for one to connect, before it is refused. A restarted agent
# is found by its clients within their reconnect backoff (at most 1 s, see
# rlix.client.link), but a desired suspension already on the pod is seen at the
# first pass: refusing it then would answer for a trainer that is on its way back.
RECONNECT_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class NodePod:
    uid: str
    namespace: str
    name: str
    annotations: Mapping[str, str]


class PodLister(Protocol):
    def __call__(self) -> Sequence[NodePod]: ...


class Executor(Protocol):
    """What of :class:`rlix.agent.preemption.Preemption` this loop uses."""

    def suspend_pod(self, uid: str, target: proto.Location = ...) -> dict[str, Any]: ...

    def resume_pod(self, uid: str) -> dict[str, Any]: ...

    def parked_bytes(self, uid: str) -> int | None: ...

    def keep_suspended(self, uid: str) -> None: ...

    def connected(self, uid: str) -> bool: ...


class Publish(Protocol):
    def pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...

    def node(self, node: str, annotations: Mapping[str, str | None]) -> None: ...


class Conducting:
    def __init__(
        self,
        *,
        node: str,
        pods: PodLister,
        executor: Executor,
        publisher: Publish,
        now: Callable[[], datetime],
        rfc3339: Callable[[datetime], str],
        rosters: Rosters | None = None,
        reconnect_grace_s: float = RECONNECT_GRACE_S,
        hand_over: Callable[[str], bool] | None = None,
    ) -> None:
        """``hand_over`` (``--park-at-gate``: ``Preemption.hand_to_gate``): a
        resume is first offered to the phase gate, which brings the pod's
        memory back at its turn, where it fits beside the pods that work; True
        where it took it (reported resumed: from then on the pod takes turns,
        and is not suspended)."""
        self._node = node
        self._pods = pods
        self._executor = executor
        self._publisher = publisher
        self._now = now
        self._rfc3339 = rfc3339
        self._rosters = rosters
        self._hand_over = hand_over
        self._grace_until = now() + timedelta(seconds=reconnect_grace_s)
        # uid -> the generation this process answered (the published annotation
        # may lag behind the list: do not act twice on one generation meanwhile).
        self._answered: dict[str, int] = {}
        self._last_heartbeat: datetime | None = None
        self._failed_at: dict[str, datetime] = {}
        # The last listing, for the agent's other readers of the node's pods (the
        # overrun watch): one list call per pass serves them all. A tuple,
        # replaced whole, so a reader on another thread sees one listing or the next.
        self._listed: tuple[NodePod, ...] = ()

    def listed(self) -> Sequence[NodePod]:
        """The node's pods as this loop last listed them (empty before its first pass)."""
        return self._listed

    def heartbeat(self) -> None:
        now = self._now()
        last = self._last_heartbeat
        if last is None or (now - last).total_seconds() >= HEARTBEAT_S:
            self._last_heartbeat = now
            self._publisher.node(self._node, {ANNOTATION_AGENT_HEARTBEAT: self._rfc3339(now)})

    def pass_once(self) -> list[ObservedSuspension]:
        """One look at the node's pods; returns what was reported (tests, logs)."""
        self.heartbeat()
        reported = []
        pods = self._listed = tuple(self._pods())
        if self._rosters is not None:
            self._rosters.update({p.uid: p.annotations for p in pods})
        live = {p.uid for p in pods}
        self._answered = {u: g for u, g in self._answered.items() if u in live}
        for pod in pods:
            state = PodSuspension.of(pod.annotations)
            desired = state.desired
            if desired is None or not self._due(pod.uid, state):
                continue
            observed = self._act(pod, desired.state, desired.target, desired.generation)
            if observed is None:
                continue  # not answered yet: asked again at the next pass
            self._answered[pod.uid] = desired.generation
            if observed.outcome is Outcome.FAILED:
                self._failed_at[pod.uid] = self._now()
            else:
                self._failed_at.pop(pod.uid, None)
            self._publisher.pod(pod.namespace, pod.name, {ANNOTATION_OBSERVED: observed.to_json()})
            log.info(
                "%s/%s generation %d: %s%s",
                pod.namespace,
                pod.name,
                observed.generation,
                observed.outcome.value,
                f" ({observed.error})" if observed.error else "",
            )
            reported.append(observed)
        return reported

    def _due(self, uid: str, state: PodSuspension) -> bool:
        desired = state.desired
        assert desired is not None
        if state.pending:
            return self._answered.get(uid, 0) < desired.generation
        observed = state.observed
        # A resume that failed is retried: the pod's memory must come back.
        if observed is None or observed.outcome is not Outcome.FAILED:
            return False
        if desired.state is not State.RUNNING:
            return False
        failed = self._failed_at.get(uid)
        return failed is None or (self._now() - failed).total_seconds() >= RESUME_RETRY_S

    def _act(
        self, pod: NodePod, want: State, target: proto.Location, generation: int
    ) -> ObservedSuspension | None:
        """What was done about this generation; None while it must wait (unanswered)."""
        at = self._rfc3339(self._now())

        def report(state: State, outcome: Outcome, error: str = "") -> ObservedSuspension:
            parked = self._executor.parked_bytes(pod.uid) or 0
            return ObservedSuspension(generation, state, outcome, parked, error, at)

        if want is State.SUSPENDED:
            if self._executor.parked_bytes(pod.uid) is not None:
                # Done before: not twice. Parked by the phase gate for a turn, it
                # becomes a suspension, which the gate no longer brings back.
                self._executor.keep_suspended(pod.uid)
                return report(State.SUSPENDED, Outcome.SUSPENDED)
            if not self._executor.connected(pod.uid):
                if self._now() < self._grace_until:
                    return None  # its processes may still be reconnecting to this agent
                return report(
                    State.RUNNING,
                    Outcome.REFUSED,
                    f"{Refusal.NOT_REGISTERED.value}: no process of the pod is connected to "
                    "this node's agent with its memory registered",
                )
            try:
                self._executor.suspend_pod(pod.uid, target)
            except proto.ProtocolError as exc:
                return self._roll_back(pod, generation, at, exc.message)
            return report(State.SUSPENDED, Outcome.SUSPENDED)
        if self._executor.parked_bytes(pod.uid) is None:
            return report(State.RUNNING, Outcome.RESUMED)  # not parked (any more)
        if self._hand_over is not None and self._hand_over(pod.uid):
            # Its memory, still parked (the report says how much), comes back
            # at its turn at the gate: restored now, it could land in memory a
            # working partner holds, or grows into in its phase.
            return report(State.RUNNING, Outcome.RESUMED)
        try:
            self._executor.resume_pod(pod.uid)
        except proto.ProtocolError as exc:
            if self._executor.parked_bytes(pod.uid) is None:
                return report(State.RUNNING, Outcome.RESUMED)
            return report(State.SUSPENDED, Outcome.FAILED, exc.message)
        return report(State.RUNNING, Outcome.RESUMED)

    def _roll_back(self, pod: NodePod, generation: int, at: str, error: str) -> ObservedSuspension:
        """Undo whatever part of a failed suspend took effect: the pod runs on, whole."""
        if self._executor.parked_bytes(pod.uid) is not None:
            try:
                self._executor.resume_pod(pod.uid)
            except proto.ProtocolError as exc:
                parked = self._executor.parked_bytes(pod.uid) or 0
                # Part of it is parked and will not come back yet: say so, and the
                # conductor's next resume (a new generation) retries it.
                return ObservedSuspension(
                    generation,
                    State.SUSPENDED,
                    Outcome.FAILED,
                    parked,
                    f"suspend failed ({error}); rolling back failed too ({exc.message})",
                    at,
                )
        return ObservedSuspension(generation, State.RUNNING, Outcome.ROLLED_BACK, 0, error, at)

    def run(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                self.pass_once()
            except Exception:
                log.exception("carrying out desired suspensions failed; retrying")
