"""The simulator and the operator's conductor choose the same victims.

The simulator records every preemption with the snapshot it decided on and
the gang that waited. Each recorded snapshot is turned into the Node and Pod
objects a cluster would hold, read by the operator's own readers
(``rlix.operator.suspensions``, over ``rlix.core.objects``), and decided by the
conductor: the jobs it parks must be the jobs the simulator preempted. A
benchmark of the simulator's in-place preemption therefore measures what the
conductor does on a cluster.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from rlix.core.policy.conduct import Kind
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.sim.engine import DecisionRecord, simulate
from rlix.core.sim.mixes import Mix
from rlix.core.sim.schedulers import rlix
from rlix.operator.suspensions import decide_on_cluster
from tests.builders.objects import node_object, pod_object
from tests.core.test_sim_helpers import mix_of, spec

# The simulator lets a waiting job in beside the memory it parks: the cluster
# it stands for publishes headroom for parked memory (docs/conductor.md, "What
# parking frees"), here room for one GPU's worth per GPU. On whole GPUs the
# conductor would park nobody for it.
HEADROOM = 2.0


def test_every_preemption_of_a_simulated_run_is_what_the_conductor_decides() -> None:
    low = [spec(f"t/low{i}", i, priority=0, iterations=30, model="32b") for i in range(4)]
    high = [
        spec(
            "t/high", 4, arrival=1000.0, priority=10, preemptible=False, iterations=5, model="32b"
        ),
        spec("t/high2", 5, arrival=1500.0, priority=20, preemptible=False, iterations=5),
    ]
    _conductor_agrees(mix_of(*low, *high, nodes=2))


def test_a_far_smaller_job_of_the_class_parks_the_same_job_in_both() -> None:
    # One class, sized: the short job arrives behind a long one that fills the
    # node and parks it (the simulator's ordering by size). Pods carry no size,
    # so the conductor gets the jobs' work left as the operator computes it.
    long = spec("t/long", 0, model="32b", iterations=200)
    short = spec("t/short", 1, arrival=600.0, model="32b")
    records = _conductor_agrees(mix_of(long, short), sized=True)
    assert [r.victims for r in records] == [("t/long",)]
    assert records[0].request.priority == 0  # its own class
    # Unsized (what a cluster without spec.iterations sees), nobody is parked.
    record = records[0]
    nodes = [node_object(n, headroom=HEADROOM) for n in record.snapshot.nodes.values()]
    pods = [pod_object(w) for w in record.snapshot.workloads]
    request = replace(
        record.request,
        work_left=0.0,
        pods=tuple(replace(p, work_left=0.0) for p in record.request.pods),
    )
    assert not decide_on_cluster(nodes, pods, [request], RLixPolicy(), now=EPOCH)
    # Sized, the job is told why its own class parked it.
    work = {"t/long": next(w.work_left for w in record.snapshot.workloads if w.job == "t/long")}
    (action,) = decide_on_cluster(
        nodes, pods, [record.request], RLixPolicy(), now=EPOCH, work_left=work
    )
    assert "(priority 0, its class: " in action.message, action.message
    assert "expected GPU-hours left against this job's" in action.message
    # On whole GPUs the parked job's GPU would stay counted: nobody is parked.
    whole = [node_object(n) for n in record.snapshot.nodes.values()]
    (said,) = decide_on_cluster(
        whole, pods, [record.request], RLixPolicy(), now=EPOCH, work_left=work
    )
    assert (said.kind, str(said.reason)) == (Kind.UNRESOLVED, "ParkingFreesNothing"), said


EPOCH = datetime.fromtimestamp(0, UTC)


def _conductor_agrees(mix: Mix, *, sized: bool = False) -> list[DecisionRecord]:
    records: list[DecisionRecord] = []
    simulate(mix, rlix(), trace=records.append)
    preempted = [r for r in records if r.kind == "preempt"]
    assert preempted, "the scenario should make the simulator preempt"
    for record in preempted:
        nodes = [node_object(n, headroom=HEADROOM) for n in record.snapshot.nodes.values()]
        pods = [pod_object(w) for w in record.snapshot.workloads]
        work = {w.job: w.work_left for w in record.snapshot.workloads if sized and w.work_left}
        actions = decide_on_cluster(
            nodes, pods, [record.request], RLixPolicy(), now=EPOCH, work_left=work
        )
        parked = sorted(a.job for a in actions if a.kind is Kind.SUSPEND)
        assert parked == sorted(record.victims), (record.time, parked, record.victims)
        assert all(a.requester == record.request.job for a in actions if a.kind is Kind.SUSPEND)
    return preempted
