"""A role's promise to load through the gate (``loadsThroughGate``), checked
by the agent: a pod so marked, seen holding at most a CUDA context, then
more, before it ever asked the gate, is reported once; nobody else is."""

from __future__ import annotations

from rlix.agent.conducting import NodePod
from rlix.agent.gate_promises import (
    REASON_LOADED_OUTSIDE_GATE,
    OutsideLoad,
    OutsideLoadReports,
    PromiseWatch,
    loads_through_gate,
)
from rlix.agent.gpus import GpuProcess
from rlix.agent.metrics import AgentMetrics
from rlix.agent.phase_gate import ASKED_KEPT_S, PhaseGate
from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import CONTEXT_MIB, SharingRules


def pod(uid: str, *, marked: bool = True) -> NodePod:
    notes = {names.ANNOTATION_LOADS_THROUGH_GATE: "true"} if marked else {}
    return NodePod(uid=uid, namespace="ns", name=f"pod-{uid}", annotations=notes)


class Node:
    """What the watch reads: the listing, each pod's MiB on GPU 0 (one
    process per pod, pid = the pod's uid), who asked, who is parked."""

    def __init__(self, *pods: NodePod) -> None:
        self.pods = list(pods)
        self.mib: dict[str, int] = {}
        self.asked: set[str] = set()
        self.parked: set[str] = set()
        self.reported: list[OutsideLoad] = []
        self.kept: list[list[str]] = []

    def watch(self) -> PromiseWatch:
        return PromiseWatch(
            processes=lambda: [
                GpuProcess(pid=int(uid), gpu_index=0, used_mib=mib)
                for uid, mib in self.mib.items()
                if mib > 0
            ],
            pod_of_pid=str,
            pods=lambda: self.pods,
            asked=self.asked.__contains__,
            parked=self.parked.__contains__,
            report=self.reported.append,
            keep_asked=lambda uids: self.kept.append(list(uids)),
        )


def test_the_mark_is_read_as_the_extender_reads_it() -> None:
    assert loads_through_gate(pod("1"))
    assert not loads_through_gate(pod("1", marked=False))
    odd = NodePod("1", "ns", "p", {names.ANNOTATION_LOADS_THROUGH_GATE: "maybe"})
    assert not loads_through_gate(odd)


def test_a_marked_pod_that_loads_before_it_asks_is_reported_once() -> None:
    node = Node(pod("1"))
    watch = node.watch()
    node.mib["1"] = CONTEXT_MIB  # a CUDA context before the load is no load
    assert watch.check() == []
    node.mib["1"] = 30000
    (found,) = watch.check()
    assert found == OutsideLoad("1", "ns", "pod-1", 0, 30000)
    assert "never asked the phase gate" in found.message()
    assert "rlix.loading()" in found.message()
    assert watch.check() == []  # once per pod
    assert node.reported == [found]
    assert node.kept == [["1"]] * 3  # the gate forgets only pods no longer listed


def test_nobody_else_is_accused() -> None:
    node = Node(
        pod("1"),  # asks the gate before it loads
        pod("2", marked=False),  # promised nothing
        pod("3"),  # loaded before this agent saw it (an agent restart)
        pod("4"),  # parked off its GPUs when first seen; the agent brings it back
        pod("5"),  # loads, is later suspended and resumed without asking
    )
    watch = node.watch()
    node.mib["3"] = 30000
    node.parked.add("4")
    assert watch.check() == []
    node.asked.add("1")
    node.mib.update({"1": 30000, "2": 30000, "5": 30000})
    node.parked.discard("4")
    node.mib["4"] = 30000
    node.asked.add("5")
    assert watch.check() == []
    node.mib["5"] = 0
    node.asked.discard("5")  # as if the gate had forgotten it: judged once, not again
    assert watch.check() == []
    node.mib["5"] = 30000
    assert watch.check() == []
    assert node.reported == []


def test_a_pod_that_left_and_came_back_under_its_uid_is_judged_afresh() -> None:
    node = Node(pod("1"))
    watch = node.watch()
    node.mib["1"] = 30000
    assert watch.check() == []  # first seen loaded: not judged
    node.pods, node.mib = [], {}
    assert watch.check() == []
    node.pods = [pod("1")]
    assert watch.check() == []
    node.mib["1"] = 30000
    assert [f.uid for f in watch.check()] == ["1"]


def test_the_gate_remembers_who_asked_until_the_pod_is_gone_a_while() -> None:
    now = [0.0]
    gate = PhaseGate(
        SharingRules(), 30.0, gpus=dict, parked=lambda uid: False, clock=lambda: now[0]
    )
    assert not gate.asked("a")
    assert gate.enter("a", object(), Phase.TRAINING, lambda waited, expired: None)
    assert gate.asked("a")
    gate.keep_asked([])  # not listed yet: a listing may lag a pod that just asked
    assert gate.asked("a")
    now[0] = ASKED_KEPT_S + 1
    gate.keep_asked(["a"])
    assert gate.asked("a")
    gate.keep_asked([])
    assert not gate.asked("a")


class Sink:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str, str]] = []

    def post(self, load: OutsideLoad, *, kind: str, reason: str, message: str) -> None:
        self.posted.append((load.name, kind, reason, message))


def test_a_report_is_a_warning_event_on_the_pod_and_a_count() -> None:
    metrics, sink = AgentMetrics("node-a"), Sink()
    reports = OutsideLoadReports(node="node-a", events=sink, metrics=metrics)
    load = OutsideLoad("1", "ns", "pod-1", 0, 30000)
    reports(load)
    assert sink.posted == [("pod-1", "Warning", REASON_LOADED_OUTSIDE_GATE, load.message())]
    labels = {"node": "node-a", "namespace": "ns", "pod": "pod-1"}
    assert metrics.registry.get_sample_value("rlix_agent_loads_outside_gate_total", labels) == 1
