"""The agent's half of the conductor protocol, over its two ports.

The pods come from an in-memory lister and the suspend/resume from a fake
executor that keeps a record as ``Preemption`` does; what is under test is the
protocol logic: act once per generation, decide on the record (not on memory),
roll a failed suspend back, refuse what cannot be done, retry a failed resume.
The real ``Preemption`` behind it is covered by e2e/test_conductor.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from rlix.agent.conducting import RECONNECT_GRACE_S, Conducting, NodePod
from rlix.agent.preemption import rfc3339
from rlix.agent.rosters import Rosters
from rlix.core import agent_protocol as proto
from rlix.core.suspension import (
    ANNOTATION_ACTIVE_REPLICAS,
    ANNOTATION_AGENT_HEARTBEAT,
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    ActiveReplicas,
    DesiredSuspension,
    ObservedSuspension,
    Outcome,
    State,
)

UID = "aaaaaaaa-0000-4000-8000-000000000001"


@dataclass
class FakeExecutor:
    connected_pods: set[str] = field(default_factory=lambda: {UID})
    records: dict[str, int] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_suspend_after_parking: bool = False
    fail_resume: bool = False

    def suspend_pod(self, uid: str, target: proto.Location = proto.SELF) -> dict[str, Any]:
        self.calls.append(f"suspend {uid} {target}")
        if uid in self.records:
            raise proto.ProtocolError(proto.E_CONFLICT, "already suspended")
        self.records[uid] = 4096
        if self.fail_suspend_after_parking:
            raise proto.ProtocolError(proto.E_FAILED, "pid 7: no park reply within 30s")
        return {"pod_uid": uid}

    def resume_pod(self, uid: str) -> dict[str, Any]:
        self.calls.append(f"resume {uid}")
        if self.fail_resume:
            raise proto.ProtocolError(proto.E_FAILED, "pid 7 is not connected (yet)")
        self.records.pop(uid)
        return {"pod_uid": uid}

    def parked_bytes(self, uid: str) -> int | None:
        return self.records.get(uid)

    def keep_suspended(self, uid: str) -> None:
        self.calls.append(f"keep {uid}")

    def connected(self, uid: str) -> bool:
        return uid in self.connected_pods


@dataclass
class Pods:
    """The node's pods as the API server holds them, annotations merged on patch."""

    notes: dict[str, str] = field(default_factory=dict)
    node_notes: dict[str, str] = field(default_factory=dict)

    def __call__(self) -> list[NodePod]:
        return [NodePod(UID, "team-a", "rollout-0", dict(self.notes))]

    def pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self.notes.update({k: v for k, v in annotations.items() if v is not None})

    def node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        self.node_notes.update({k: v for k, v in annotations.items() if v is not None})

    def want(self, generation: int, state: State) -> None:
        desired = DesiredSuspension(generation, state, "Manual", "user")
        self.notes[ANNOTATION_DESIRED] = desired.to_json()

    def observed(self) -> ObservedSuspension:
        return ObservedSuspension.parse(self.notes[ANNOTATION_OBSERVED])


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


def loop(
    pods: Pods, executor: FakeExecutor, clock: Clock | None = None, **extra: Any
) -> Conducting:
    return Conducting(
        node="node-a",
        pods=pods,
        executor=executor,
        publisher=pods,
        now=clock or Clock(),
        rfc3339=rfc3339,
        **extra,
    )


def test_suspend_then_resume_each_once_per_generation() -> None:
    pods, executor = Pods(), FakeExecutor()
    conducting = loop(pods, executor)
    pods.want(1, State.SUSPENDED)
    conducting.pass_once()
    conducting.pass_once()
    seen = pods.observed()
    assert (seen.generation, seen.outcome, seen.parked_bytes) == (1, Outcome.SUSPENDED, 4096)
    assert executor.calls == [f"suspend {UID} self"]
    pods.want(2, State.RUNNING)
    conducting.pass_once()
    conducting.pass_once()
    assert pods.observed().outcome is Outcome.RESUMED and pods.observed().generation == 2
    assert executor.calls == [f"suspend {UID} self", f"resume {UID}"]
    assert ANNOTATION_AGENT_HEARTBEAT in pods.node_notes


def test_a_restarted_agent_reports_a_suspend_its_record_holds_and_does_not_redo_it() -> None:
    pods, executor = Pods(), FakeExecutor(records={UID: 4096})
    pods.want(1, State.SUSPENDED)  # asked, done, but the report was never written
    loop(pods, executor).pass_once()
    assert pods.observed().outcome is Outcome.SUSPENDED
    # Suspended once, not twice; where the phase gate had parked it, a suspension now.
    assert executor.calls == [f"keep {UID}"]


def test_a_suspend_that_fails_part_way_is_rolled_back() -> None:
    pods, executor = Pods(), FakeExecutor(fail_suspend_after_parking=True)
    pods.want(1, State.SUSPENDED)
    loop(pods, executor).pass_once()
    seen = pods.observed()
    assert (seen.outcome, seen.state, seen.parked_bytes) == (Outcome.ROLLED_BACK, State.RUNNING, 0)
    assert "no park reply" in seen.error
    assert executor.calls == [f"suspend {UID} self", f"resume {UID}"]
    assert UID not in executor.records, "the pod keeps its memory and runs on"


def test_a_pod_with_no_registered_process_is_refused_once_the_reconnect_grace_is_over() -> None:
    clock = Clock()
    pods, executor = Pods(), FakeExecutor(connected_pods=set())
    conducting = loop(pods, executor, clock)
    pods.want(1, State.SUSPENDED)
    conducting.pass_once()
    assert ANNOTATION_OBSERVED not in pods.notes, "unanswered while its trainer may reconnect"
    clock.t += timedelta(seconds=RECONNECT_GRACE_S)
    conducting.pass_once()
    seen = pods.observed()
    assert seen.outcome is Outcome.REFUSED and "NoMemoryRegistered" in seen.error
    assert executor.calls == []


def test_a_trainer_that_reconnects_within_the_grace_is_suspended() -> None:
    """A restarted agent sees the pending suspend before the trainer is back."""
    clock = Clock()
    pods, executor = Pods(), FakeExecutor(connected_pods=set())
    conducting = loop(pods, executor, clock)
    pods.want(1, State.SUSPENDED)
    conducting.pass_once()
    clock.t += timedelta(seconds=RECONNECT_GRACE_S / 2)
    executor.connected_pods.add(UID)
    conducting.pass_once()
    seen = pods.observed()
    assert (seen.generation, seen.outcome) == (1, Outcome.SUSPENDED)
    assert executor.calls == [f"suspend {UID} self"]


def test_a_failed_resume_is_retried_until_the_memory_is_back() -> None:
    clock = Clock()
    pods, executor = Pods(), FakeExecutor(records={UID: 4096}, fail_resume=True)
    conducting = loop(pods, executor, clock)
    pods.want(2, State.RUNNING)
    conducting.pass_once()
    assert pods.observed().outcome is Outcome.FAILED
    assert pods.observed().state is State.SUSPENDED
    conducting.pass_once()
    assert executor.calls == [f"resume {UID}"], "not retried at once"
    executor.fail_resume = False
    clock.t += timedelta(seconds=10)
    conducting.pass_once()
    assert pods.observed().outcome is Outcome.RESUMED
    assert executor.calls == [f"resume {UID}", f"resume {UID}"]


def test_a_resume_the_phase_gate_takes_is_reported_with_the_memory_still_parked() -> None:
    """With --park-at-gate the resume is offered to the gate first: where it
    takes the pod, nothing is restored now (the gate brings the memory back at
    its turn), and the report says so (resumed, its bytes still parked); where
    it does not, the resume is carried out as before."""
    pods, executor = Pods(), FakeExecutor(records={UID: 4096})
    offered: list[str] = []
    takes = True

    def hand_over(uid: str) -> bool:
        offered.append(uid)
        return takes

    conducting = loop(pods, executor, hand_over=hand_over)
    pods.want(2, State.RUNNING)
    conducting.pass_once()
    conducting.pass_once()
    seen = pods.observed()
    assert (seen.generation, seen.state, seen.outcome) == (2, State.RUNNING, Outcome.RESUMED)
    assert seen.parked_bytes == 4096 and executor.calls == [] and offered == [UID]
    executor.calls.clear()
    takes = False
    pods.want(3, State.RUNNING)
    conducting.pass_once()
    assert (pods.observed().generation, pods.observed().parked_bytes) == (3, 0)
    assert executor.calls == [f"resume {UID}"] and offered == [UID, UID]


def test_each_pass_hands_the_pods_rosters_to_the_socket() -> None:
    pods, executor, book = Pods(), FakeExecutor(), Rosters()
    conducting = loop(pods, executor, rosters=book)
    conducting.pass_once()
    assert book.of(UID) is None
    roster = ActiveReplicas("rollout", 2, 1, (0,), (1,))
    pods.notes[ANNOTATION_ACTIVE_REPLICAS] = roster.to_json()
    conducting.pass_once()
    assert book.of(UID) == roster


def test_each_pass_keeps_its_listing_for_the_agents_other_readers() -> None:
    pods = Pods()
    conducting = loop(pods, FakeExecutor())
    assert conducting.listed() == ()  # nothing listed yet: nothing to judge
    pods.notes["rlix.io/gpu-memory-mib"] = '{"rollout": 1000}'
    conducting.pass_once()
    (pod,) = conducting.listed()
    assert (pod.uid, pod.name, pod.annotations["rlix.io/gpu-memory-mib"]) == (
        UID,
        "rollout-0",
        '{"rollout": 1000}',
    )
    pods.notes["rlix.io/gpu-memory-mib"] = '{"rollout": 2000}'
    assert conducting.listed()[0].annotations["rlix.io/gpu-memory-mib"] == '{"rollout": 1000}'
    conducting.pass_once()  # the next pass's listing replaces it
    assert conducting.listed()[0].annotations["rlix.io/gpu-memory-mib"] == '{"rollout": 2000}'
