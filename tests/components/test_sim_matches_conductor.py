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

from datetime import UTC, datetime

from rlix.core.policy.conduct import Kind
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.sim.engine import DecisionRecord, simulate
from rlix.core.sim.schedulers import rlix
from rlix.operator.suspensions import decide_on_cluster
from tests.builders.objects import node_object, pod_object
from tests.core.test_sim_helpers import mix_of, spec


def test_every_preemption_of_a_simulated_run_is_what_the_conductor_decides() -> None:
    low = [spec(f"t/low{i}", i, priority=0, iterations=30, model="32b") for i in range(4)]
    high = [
        spec(
            "t/high", 4, arrival=1000.0, priority=10, preemptible=False, iterations=5, model="32b"
        ),
        spec("t/high2", 5, arrival=1500.0, priority=20, preemptible=False, iterations=5),
    ]
    records: list[DecisionRecord] = []
    simulate(mix_of(*low, *high, nodes=2), rlix(), trace=records.append)
    preempted = [r for r in records if r.kind == "preempt"]
    assert preempted, "the scenario should make the simulator preempt"
    for record in preempted:
        nodes = [node_object(n) for n in record.snapshot.nodes.values()]
        pods = [pod_object(w) for w in record.snapshot.workloads]
        actions = decide_on_cluster(
            nodes, pods, [record.request], RLixPolicy(), now=datetime.fromtimestamp(0, UTC)
        )
        parked = sorted(a.job for a in actions if a.kind is Kind.SUSPEND)
        assert parked == sorted(record.victims), (record.time, parked, record.victims)
        assert all(a.requester == record.request.job for a in actions if a.kind is Kind.SUSPEND)
