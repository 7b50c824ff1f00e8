"""Overruns: what a pod holds on a GPU against the budget it declared."""

from __future__ import annotations

import json
from collections.abc import Mapping

from rlix.agent.conducting import NodePod
from rlix.agent.gpus import GpuProcess
from rlix.agent.metrics import AgentMetrics
from rlix.agent.overruns import (
    REASON_OVERRUN,
    REASON_WITHIN,
    Overrun,
    OverrunReports,
    OverrunWatch,
    budget_mib,
    overruns,
)
from rlix.core import names


def pod(uid: str, memory: object | None) -> NodePod:
    notes = {} if memory is None else {names.ANNOTATION_GPU_MEMORY_MIB: json.dumps(memory)}
    return NodePod(uid=uid, namespace="ns", name=f"pod-{uid}", annotations=notes)


PODS = [pod("a", {"rollout": 20000, "training": 30000}), pod("b", 10000), pod("c", None)]
PIDS = {1: "a", 2: "a", 3: "b", 4: "c", 5: None}


def test_the_budget_is_the_peak_phase_and_none_when_nothing_or_nonsense_is_declared() -> None:
    assert budget_mib(PODS[0]) == 30000
    assert budget_mib(PODS[1]) == 10000
    assert budget_mib(PODS[2]) is None
    bad = NodePod("d", "ns", "d", {names.ANNOTATION_GPU_MEMORY_MIB: "{not json"})
    assert budget_mib(bad) is None


def test_a_pods_processes_are_summed_per_gpu_and_only_declared_pods_are_judged() -> None:
    procs = [
        GpuProcess(pid=1, gpu_index=0, used_mib=20000),
        GpuProcess(pid=2, gpu_index=0, used_mib=15000),  # a: 35000 on GPU 0 > 30000
        GpuProcess(pid=2, gpu_index=1, used_mib=29000),  # a: within on GPU 1
        GpuProcess(pid=3, gpu_index=1, used_mib=10000),  # b: exactly its budget
        GpuProcess(pid=4, gpu_index=1, used_mib=90000),  # c: declared nothing
        GpuProcess(pid=5, gpu_index=1, used_mib=90000),  # a host process
        GpuProcess(pid=9, gpu_index=1, used_mib=90000),  # gone (no pod)
    ]
    found = overruns(procs, PIDS.get, PODS)
    assert found == [Overrun("a", "ns", "pod-a", 0, 35000, 30000)]
    assert "5000 MiB over its budget of 30000 MiB" in found[0].message()


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []
        self.now: list[Mapping[tuple[str, int], Overrun]] = []

    def started(self, overrun: Overrun) -> None:
        self.events.append(("started", overrun.uid, overrun.gpu))

    def ended(self, overrun: Overrun) -> None:
        self.events.append(("ended", overrun.uid, overrun.gpu))

    def current(self, overruns: Mapping[tuple[str, int], Overrun]) -> None:
        self.now.append(dict(overruns))


def test_an_overrun_is_reported_once_when_it_starts_and_once_when_it_ends() -> None:
    usage = {"mib": 40000}
    recorded = Recorded()
    watch = OverrunWatch(
        processes=lambda: [GpuProcess(pid=1, gpu_index=0, used_mib=usage["mib"])],
        pod_of_pid=PIDS.get,
        pods=lambda: PODS,
        reporter=recorded,
    )
    assert len(watch.check()) == 1
    usage["mib"] = 45000  # still over: no second report
    assert len(watch.check()) == 1
    usage["mib"] = 1000
    assert watch.check() == []
    assert watch.check() == []
    assert recorded.events == [("started", "a", 0), ("ended", "a", 0)]
    assert [len(n) for n in recorded.now] == [1, 1, 0, 0]


class Sink:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def post(self, overrun: Overrun, *, kind: str, reason: str, message: str) -> None:
        self.posted.append((kind, reason, message))


def test_reports_become_a_warning_event_a_counted_overrun_and_the_excess_while_it_lasts() -> None:
    metrics = AgentMetrics("node-a")
    sink = Sink()
    reports = OverrunReports(node="node-a", events=sink, metrics=metrics)
    over = Overrun("a", "ns", "pod-a", 0, 35000, 30000)
    reports.started(over)
    reports.current({over.key: over})
    labels = {"node": "node-a", "namespace": "ns", "pod": "pod-a"}
    sample = metrics.registry.get_sample_value
    assert sample("rlix_agent_memory_overruns_total", labels) == 1
    assert sample("rlix_agent_pod_memory_over_budget_bytes", {**labels, "gpu": "0"}) == 5000 * 2**20
    reports.ended(over)
    reports.current({})
    assert sample("rlix_agent_pod_memory_over_budget_bytes", {**labels, "gpu": "0"}) is None
    assert [(kind, reason) for kind, reason, _ in sink.posted] == [
        ("Warning", REASON_OVERRUN),
        ("Normal", REASON_WITHIN),
    ]
    assert "GPU 0" in sink.posted[0][2] and "30000 MiB" in sink.posted[1][2]
