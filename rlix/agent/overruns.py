"""Device memory over a pod's budget: seen by the agent, reported, never enforced.

A pod's budget is the per-GPU memory it declared at its peak phase
(``rlix.io/gpu-memory-mib``, written by the operator from the RLJob; the same
number its ResourceClaim consumes). Admission, the claim's consumed capacity
and the conductor all trust that number; a pod that holds more makes every one
of them wrong about its GPU, so the agent compares what each pod's processes
hold on each GPU (NVML, or the simulated backend's reports) with it.

Why report and not kill: an overrun is usually a configuration error (a vLLM
``gpu_memory_utilization`` set for a whole GPU, a batch that grew); killing a
training step for it would lose work the owner would rather keep. The event
names the pod, the GPU and both numbers, once when the overrun starts and once
when it ends; the metric counts overruns and shows the excess while it lasts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rlix.agent.conducting import NodePod
from rlix.agent.gpus import GpuProcess
from rlix.agent.metrics import AgentMetrics
from rlix.agent.pod_watches import EventSink, held_mib, pod_facts

log = logging.getLogger(__name__)

REASON_OVERRUN = "GPUMemoryOverrun"
REASON_WITHIN = "GPUMemoryWithinBudget"


@dataclass(frozen=True, slots=True)
class Overrun:
    """Pod ``namespace/name`` holds ``used_mib`` on GPU ``gpu``, over ``budget_mib``."""

    uid: str
    namespace: str
    name: str
    gpu: int
    used_mib: int
    budget_mib: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.uid, self.gpu)

    def message(self) -> str:
        return (
            f"holds {self.used_mib} MiB on GPU {self.gpu}, {self.used_mib - self.budget_mib} MiB "
            f"over its budget of {self.budget_mib} MiB (rlix.io/gpu-memory-mib at its peak "
            "phase; its GPU claim, admission and the conductor count only the budget)"
        )


def budget_mib(pod: NodePod) -> int | None:
    """The pod's per-GPU budget, or None when it declared no memory (nothing to check)."""
    facts = pod_facts(pod)
    if facts.errors or not facts.workload.memory_mib:
        return None  # an unreadable declaration is the extender's to report
    return facts.workload.peak_memory_mib or None


def overruns(
    processes: Iterable[GpuProcess],
    pod_of_pid: Callable[[int], str | None],
    pods: Sequence[NodePod],
) -> list[Overrun]:
    """Every (pod, GPU) whose processes together hold more than the pod's budget."""
    by_uid = {pod.uid: pod for pod in pods}
    held = held_mib(processes, pod_of_pid, by_uid)
    out = []
    budgets: dict[str, int | None] = {}
    for (uid, gpu), used in sorted(held.items()):
        if uid not in budgets:
            budgets[uid] = budget_mib(by_uid[uid])
        budget = budgets[uid]
        if budget is not None and used > budget:
            pod = by_uid[uid]
            out.append(Overrun(uid, pod.namespace, pod.name, gpu, used, budget))
    return out


class Reporter(Protocol):
    """Where overruns go: an event on the pod, and the agent's metrics."""

    def started(self, overrun: Overrun) -> None: ...

    def ended(self, overrun: Overrun) -> None: ...

    def current(self, overruns: Mapping[tuple[str, int], Overrun]) -> None: ...


class OverrunWatch:
    """Compares usage with budgets every interval; reports each overrun's start and end."""

    def __init__(
        self,
        *,
        processes: Callable[[], Iterable[GpuProcess]],
        pod_of_pid: Callable[[int], str | None],
        pods: Callable[[], Sequence[NodePod]],
        reporter: Reporter,
    ) -> None:
        self._processes = processes
        self._pod_of_pid = pod_of_pid
        self._pods = pods
        self._reporter = reporter
        self._open: dict[tuple[str, int], Overrun] = {}

    def check(self) -> list[Overrun]:
        """One pass; returns the overruns that hold now."""
        now = {o.key: o for o in overruns(self._processes(), self._pod_of_pid, self._pods())}
        # The gauge first: whoever sees an event finds the metric already agreeing.
        self._reporter.current(now)
        for key, overrun in now.items():
            if key not in self._open:
                self._reporter.started(overrun)
        for key, overrun in self._open.items():
            if key not in now:
                self._reporter.ended(overrun)
        self._open = now
        return list(now.values())


class OverrunReports:
    """The agent's reporter: log, an event on the pod (kube mode), and the metrics."""

    def __init__(self, *, node: str, events: EventSink | None, metrics: AgentMetrics | None):
        self._node = node
        self._events = events
        self._metrics = metrics

    def started(self, overrun: Overrun) -> None:
        message = overrun.message()
        log.warning("pod %s/%s %s", overrun.namespace, overrun.name, message)
        if self._metrics is not None:
            self._metrics.memory_overruns.labels(self._node, overrun.namespace, overrun.name).inc()
        if self._events is not None:
            self._events.post(overrun, kind="Warning", reason=REASON_OVERRUN, message=message)

    def ended(self, overrun: Overrun) -> None:
        message = f"back within its budget of {overrun.budget_mib} MiB on GPU {overrun.gpu}"
        log.info("pod %s/%s %s", overrun.namespace, overrun.name, message)
        if self._events is not None:
            self._events.post(overrun, kind="Normal", reason=REASON_WITHIN, message=message)

    def current(self, overruns: Mapping[tuple[str, int], Overrun]) -> None:
        if self._metrics is None:
            return
        gauge = self._metrics.over_budget_bytes
        gauge.clear()
        for o in overruns.values():
            excess = (o.used_mib - o.budget_mib) * 2**20
            gauge.labels(self._node, o.namespace, o.name, str(o.gpu)).set(excess)
