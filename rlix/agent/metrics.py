"""Prometheus metrics of the node agent (``--metrics-port``, ``--metrics-host``).

Two kinds, on a registry of its own (tests run several agents' code in one
process):

* events, counted as they happen: suspensions and resumes by reason, target
  and outcome, with latency histograms (a suspend waits for the pod's next
  phase boundary, so its buckets reach minutes);
* state, read at scrape time from what the agent already holds, so a scrape
  is never stale and nothing is kept twice: GPU memory used and total,
  utilisation and idleness per GPU, bytes parked per suspended pod and place,
  and each pod's current phase and seconds spent per phase.

Every series carries ``node``: a DaemonSet's pods are told apart by node, not
by the ``instance`` address Prometheus happens to scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rlix.agent.gpus import MIB, GpuInfo
from rlix.agent.parking_state import SuspendedPod
from rlix.core.phases import Phase

# Below this SM utilisation a GPU counts as idle (NVML samples over a window;
# a GPU holding a parked or sleeping engine reads 0).
IDLE_UTILIZATION = 0.01
SUSPEND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass
class _PodPhases:
    namespace: str
    name: str
    current: Phase
    entered: float  # monotonic
    seconds: dict[Phase, float] = field(default_factory=dict)  # closed intervals only


class PhaseTimes:
    """Seconds each pod has spent per phase, from the phase reports the agent serves."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, _PodPhases] = {}  # pod uid ->

    def enter(self, uid: str, namespace: str, name: str, phase: Phase) -> None:
        now = self._clock()
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                self._pods[uid] = _PodPhases(namespace, name, phase, now)
                return
            if pod.current is not phase:
                spent = pod.seconds.get(pod.current, 0.0) + now - pod.entered
                pod.seconds[pod.current] = spent
                pod.current, pod.entered = phase, now

    def snapshot(self) -> list[tuple[str, str, Phase, dict[Phase, float]]]:
        """(namespace, name, current phase, seconds per phase including the open one)."""
        now = self._clock()
        with self._lock:
            out = []
            for pod in self._pods.values():
                seconds = dict(pod.seconds)
                seconds[pod.current] = seconds.get(pod.current, 0.0) + now - pod.entered
                out.append((pod.namespace, pod.name, pod.current, seconds))
            return out


class AgentMetrics:
    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        self.phases = PhaseTimes()
        self.suspensions = Counter(
            "rlix_agent_suspensions",
            "Suspend-pod requests by reason, target and outcome (ok, failed)",
            ["node", "reason", "target", "outcome"],
            registry=self.registry,
        )
        self.resumes = Counter(
            "rlix_agent_resumes",
            "Resume-pod requests by reason and outcome (ok, failed)",
            ["node", "reason", "outcome"],
            registry=self.registry,
        )
        self.suspend_seconds = Histogram(
            "rlix_agent_suspend_seconds",
            "Time to suspend a pod (until every process parked), by reason and target",
            ["node", "reason", "target"],
            buckets=SUSPEND_BUCKETS,
            registry=self.registry,
        )
        self.memory_overruns = Counter(
            "rlix_agent_memory_overruns",
            "Times a pod's processes started holding more device memory on a GPU than the "
            "pod's budget (rlix.io/gpu-memory-mib at its peak phase)",
            ["node", "namespace", "pod"],
            registry=self.registry,
        )
        self.loads_outside_gate = Counter(
            "rlix_agent_loads_outside_gate",
            "Pods whose role sets loadsThroughGate seen allocating device memory before "
            "they asked the phase gate (a LoadedOutsideGate event on the pod)",
            ["node", "namespace", "pod"],
            registry=self.registry,
        )
        self.over_budget_bytes = Gauge(
            "rlix_agent_pod_memory_over_budget_bytes",
            "Device memory a pod holds on a GPU beyond its budget, while it does",
            ["node", "namespace", "pod", "gpu"],
            registry=self.registry,
        )
        self.phase_gate_waits = Histogram(
            "rlix_agent_phase_gate_wait_seconds",
            "How long a process waited at the phase gate before entering a busy phase, "
            "by outcome (turn: the GPU was its to take; bound: it went in at "
            "--phase-gate-max-wait)",
            ["node", "outcome"],
            buckets=(*SUSPEND_BUCKETS, 600, 1800),
            registry=self.registry,
        )
        self.phase_gate_waiting = Gauge(
            "rlix_agent_phase_gate_waiting",
            "Processes waiting at the phase gate now (each pod of them carries "
            "rlix.io/waiting-for-turn)",
            ["node"],
            registry=self.registry,
        )
        self.resume_seconds = Histogram(
            "rlix_agent_resume_seconds",
            "Time to resume a pod (memory back and checked), by reason",
            ["node", "reason"],
            buckets=SUSPEND_BUCKETS,
            registry=self.registry,
        )

    def watch(
        self,
        gpus: Callable[[], list[GpuInfo]],
        suspended: Callable[[], Iterable[SuspendedPod]],
    ) -> None:
        """Read GPU state and suspended pods at every scrape."""
        self.registry.register(_StateCollector(self.node, gpus, suspended, self.phases))

    def serve(self, port: int, addr: str) -> None:
        start_http_server(port, addr=addr, registry=self.registry)


class _StateCollector(Collector):
    def __init__(
        self,
        node: str,
        gpus: Callable[[], list[GpuInfo]],
        suspended: Callable[[], Iterable[SuspendedPod]],
        phases: PhaseTimes,
    ) -> None:
        self._node = node
        self._gpus = gpus
        self._suspended = suspended
        self._phases = phases

    def collect(self) -> Iterator[Metric]:
        node = self._node
        labels = ["node", "gpu"]
        used = GaugeMetricFamily(
            "rlix_agent_gpu_memory_used_bytes", "Device memory in use per GPU", labels=labels
        )
        total = GaugeMetricFamily(
            "rlix_agent_gpu_memory_total_bytes", "Device memory per GPU", labels=labels
        )
        util = GaugeMetricFamily(
            "rlix_agent_gpu_utilization", "SM utilisation per GPU (0..1)", labels=labels
        )
        idle = GaugeMetricFamily(
            "rlix_agent_gpu_idle",
            f"1 while a GPU is idle (SM utilisation below {IDLE_UTILIZATION:.0%}), else 0",
            labels=labels,
        )
        for gpu in self._gpus():
            key = [node, str(gpu.index)]
            used.add_metric(key, gpu.used_mib * MIB)
            total.add_metric(key, gpu.memory_mib * MIB)
            util.add_metric(key, gpu.utilization)
            idle.add_metric(key, 1.0 if gpu.utilization < IDLE_UTILIZATION else 0.0)
        yield from (used, total, util, idle)

        parked = GaugeMetricFamily(
            "rlix_agent_parked_bytes",
            "Device memory a suspended pod has parked, by where it lies (self: the pod's "
            "pinned pool, host: the agent's park files, gpu:<i>: spare HBM; driver "
            "checkpoints report 0, the driver does not say)",
            labels=["node", "namespace", "pod", "place"],
        )
        by_place: dict[tuple[str, str, str], int] = {}
        for rec in self._suspended():
            for manifest in list(rec.processes.values()):  # the agent may be adding one
                where = (rec.namespace, rec.name, str(manifest.where))
                by_place[where] = by_place.get(where, 0) + manifest.nbytes
        for (namespace, pod, place), nbytes in sorted(by_place.items()):
            parked.add_metric([node, namespace, pod, place], nbytes)
        yield parked

        current = GaugeMetricFamily(
            "rlix_agent_pod_phase",
            "1 for the phase a pod last reported (a timeline of phases per pod)",
            labels=["node", "namespace", "pod", "phase"],
        )
        seconds = CounterMetricFamily(
            "rlix_agent_pod_phase_seconds",
            "Seconds a pod has spent in each phase, as its processes reported them",
            labels=["node", "namespace", "pod", "phase"],
        )
        for namespace, pod, phase, spent in self._phases.snapshot():
            current.add_metric([node, namespace, pod, phase.value], 1.0)
            for name, value in sorted(spent.items()):
                seconds.add_metric([node, namespace, pod, name.value], value)
        yield current
        yield seconds
