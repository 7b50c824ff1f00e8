"""A role's promise to load through the gate (``loadsThroughGate``), checked.

Where the node agents park at the gate, the extender pairs a pod whose role
sets ``loadsThroughGate`` (``rlix.io/loads-through-gate``) by turns with a
partner whose peak does not fit beside its own, trusting that its first
allocation waits at the gate (``rlix.loading()``) until the partner's memory
is parked. A pod that allocates first elsewhere (a TRL or RLlib trainer that
loads its model before it attaches, an engine server without the client)
breaks that promise: its load may land in memory a working partner holds,
and one of them runs out of memory.

The agent cannot stop a process from allocating, but it sees it: a pod so
marked that it saw holding at most a CUDA context on every GPU, then more on
one, before the pod ever asked the gate. It says so once per pod, with a
Warning event on the pod (``LoadedOutsideGate``: `kubectl describe` names who
to fix), a log line and a counter.

Only a pod's first load is judged, and only one this agent watched happen:
a pod first seen holding more than a context (it loaded before this agent
started, and may have asked the agent before it) is never judged, nor is
memory the agent itself brings back (a pod whose memory is parked is not
"holding little"), nor a pod once it has been seen loaded. A pod that loads
in less than one interval after it is first listed goes unjudged too: the
check errs towards silence, never towards a false accusation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rlix.agent.conducting import NodePod
from rlix.agent.gpus import GpuProcess
from rlix.agent.metrics import AgentMetrics
from rlix.agent.pod_watches import EventSink, held_mib, pod_facts
from rlix.core.policy.placement.sharing import CONTEXT_MIB

log = logging.getLogger(__name__)

REASON_LOADED_OUTSIDE_GATE = "LoadedOutsideGate"


@dataclass(frozen=True, slots=True)
class OutsideLoad:
    """Pod ``namespace/name`` holds ``used_mib`` on GPU ``gpu`` and never asked the gate."""

    uid: str
    namespace: str
    name: str
    gpu: int
    used_mib: int

    def message(self) -> str:
        return (
            f"holds {self.used_mib} MiB on GPU {self.gpu} but never asked the phase gate: its "
            "role sets loadsThroughGate, so where the agents park at the gate it may share the "
            "GPU by turns with a partner whose peak does not fit beside its own, and a load "
            "made outside rlix.loading() can run that GPU out of memory; wrap the first "
            "allocation (model load, engine start) in `with rlix.loading():`, or unset "
            "loadsThroughGate"
        )


def loads_through_gate(pod: NodePod) -> bool:
    """The pod's ``rlix.io/loads-through-gate``, read as the extender reads it."""
    return pod_facts(pod).workload.loads_through_gate


class PromiseWatch:
    """Every interval: which pods marked ``loadsThroughGate`` allocated
    before they asked the gate (module docstring); each reported once."""

    def __init__(
        self,
        *,
        processes: Callable[[], Iterable[GpuProcess]],
        pod_of_pid: Callable[[int], str | None],
        pods: Callable[[], Sequence[NodePod]],
        asked: Callable[[str], bool],
        parked: Callable[[str], bool],
        report: Callable[[OutsideLoad], None],
        keep_asked: Callable[[Iterable[str]], None] = lambda pods: None,
    ) -> None:
        """``asked``: whether the pod (uid) ever asked this agent's gate to go
        in (a phase, or ``rlix.loading()``); ``parked``: whether its memory is
        parked off its GPUs (the agent's records); ``report``: told of each
        broken promise, once per pod; ``keep_asked``: given the node's pods
        each pass, so that whoever answers ``asked`` forgets the others."""
        self._processes = processes
        self._pod_of_pid = pod_of_pid
        self._pods = pods
        self._asked = asked
        self._parked = parked
        self._report = report
        self._keep_asked = keep_asked
        self._small: set[str] = set()  # marked pods seen holding at most a context
        self._judged: set[str] = set()  # seen loaded once: out of the check for good

    def check(self) -> list[OutsideLoad]:
        """One pass; returns the broken promises reported by it."""
        listed = self._pods()
        self._keep_asked([p.uid for p in listed])
        marked = {p.uid: p for p in listed if loads_through_gate(p)}
        over: dict[str, list[tuple[int, int]]] = {}  # uid -> (GPU, MiB) beyond a context
        for (uid, gpu), used in sorted(
            held_mib(self._processes(), self._pod_of_pid, marked).items()
        ):
            if used > CONTEXT_MIB:
                over.setdefault(uid, []).append((gpu, used))
        found = []
        for uid, pod in marked.items():
            if uid in self._judged:
                continue
            if uid not in over:
                if not self._parked(uid):
                    self._small.add(uid)
                continue
            if uid in self._small and not self._asked(uid):
                gpu, used = over[uid][0]
                found.append(OutsideLoad(uid, pod.namespace, pod.name, gpu, used))
            self._judged.add(uid)
            self._small.discard(uid)
        self._small &= marked.keys()
        self._judged &= marked.keys()
        for load in found:
            self._report(load)
        return found


class OutsideLoadReports:
    """The agent's report of a broken promise: a log line, a Warning event on
    the pod (kube mode) and ``rlix_agent_loads_outside_gate``."""

    def __init__(self, *, node: str, events: EventSink | None, metrics: AgentMetrics | None):
        self._node = node
        self._events = events
        self._metrics = metrics

    def __call__(self, load: OutsideLoad) -> None:
        message = load.message()
        log.warning("pod %s/%s %s", load.namespace, load.name, message)
        if self._metrics is not None:
            self._metrics.loads_outside_gate.labels(self._node, load.namespace, load.name).inc()
        if self._events is not None:
            self._events.post(
                load, kind="Warning", reason=REASON_LOADED_OUTSIDE_GATE, message=message
            )
