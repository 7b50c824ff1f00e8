"""Gang admission: all pods or none, queue order, backfill, readable reasons."""

from __future__ import annotations

from rlix.core.phases import Phase
from rlix.core.policy.admission import GangRequest, WaitReason, admit, place_gang, queue_order
from rlix.core.sim.baselines import GANG_BINPACK, KUBE_DEFAULT
from rlix.core.snapshot import ClusterSnapshot, Node, Workload

MEM = {Phase.ROLLOUT: 40_000, Phase.TRAINING: 30_000}


def cluster(*free: int) -> ClusterSnapshot:
    """Nodes of 8 GPUs; node i has ``free[i]`` untouched GPUs (the rest held by a filler)."""
    nodes = [Node(f"n{i}", 8, 143_771) for i in range(len(free))]
    fillers = [
        Workload(f"x/f{i}", "x", "w", 8 - f, MEM, node=f"n{i}", gpu_indices=tuple(range(8 - f)))
        for i, f in enumerate(free)
        if f < 8
    ]
    return ClusterSnapshot.of(nodes, fillers)


def job(name: str, pods: int, gpus: int, priority: int = 0, arrival: float = 0.0) -> GangRequest:
    members = tuple(
        Workload(f"{name}/p{k}", name, "worker", gpus, MEM, priority=priority, gang_size=pods)
        for k in range(pods)
    )
    return GangRequest(name, priority, arrival, members)


def test_gang_is_admitted_only_when_every_pod_fits() -> None:
    # Two nodes with 8 and 4 free GPUs: a gang of two 8-GPU pods cannot run,
    # even though its first pod would fit.
    decision, after = place_gang(cluster(8, 4), job("a", 2, 8), KUBE_DEFAULT)
    assert not decision.admitted
    assert decision.reason is WaitReason.WAITING_FOR_GPUS
    assert "after placing 1 of 2 pods" in decision.message
    assert "Insufficient nvidia.com/gpu (4 free, pod needs 8)" in decision.message
    assert after == cluster(8, 4)  # nothing half-bound


def test_admitted_gang_binds_every_pod_on_distinct_gpus() -> None:
    decision, after = place_gang(cluster(8, 8), job("a", 2, 8), KUBE_DEFAULT)
    assert decision.admitted and decision.reason is None
    assert sorted(p.node for p in decision.placements) == ["n0", "n1"]
    assert all(p.gpus == tuple(range(8)) for p in decision.placements)
    assert {w.node for w in after.workloads if w.job == "a"} == {"n0", "n1"}


def test_queue_order_is_priority_then_arrival_then_name() -> None:
    requests = [job("c", 1, 1, 0, 1.0), job("b", 1, 1, 5, 9.0), job("a", 1, 1, 0, 1.0)]
    assert [r.job for r in queue_order(requests)] == ["b", "a", "c"]


def test_blocked_big_job_does_not_block_a_small_one_behind_it() -> None:
    # 6 free GPUs: the first-come 8-GPU job waits, the 2-GPU job behind it runs.
    decisions = admit(
        cluster(6), [job("big", 1, 8, 0, 0.0), job("small", 1, 2, 0, 1.0)], KUBE_DEFAULT
    )
    assert [(d.job, d.admitted) for d in decisions] == [("big", False), ("small", True)]
    assert decisions[0].message.endswith("1 x Insufficient nvidia.com/gpu (6 free, pod needs 8)")


def test_earlier_admissions_consume_capacity_for_later_ones() -> None:
    decisions = admit(cluster(8), [job("a", 1, 6), job("b", 1, 4, arrival=1.0)], GANG_BINPACK)
    assert [d.admitted for d in decisions] == [True, False]
    assert "0/1 nodes are available" in decisions[1].message


def test_spread_and_binpack_pick_opposite_nodes() -> None:
    # n0 has 8 free, n1 has 3 free: LeastAllocated spreads to n0, MostAllocated packs n1.
    spread, _ = place_gang(cluster(8, 3), job("a", 1, 2), KUBE_DEFAULT)
    pack, _ = place_gang(cluster(8, 3), job("a", 1, 2), GANG_BINPACK)
    assert spread.placements[0].node == "n0"
    assert pack.placements[0].node == "n1"
    assert pack.placements[0].gpus == (5, 6)


def test_admission_plans_only_on_nodes_the_pods_selector_and_tolerations_allow() -> None:
    """Admission pins a gang to its planned node, so it must plan where kube-scheduler
    would bind: the role template's nodeSelector and tolerations decide, like taints."""
    from dataclasses import replace

    from rlix.core.snapshot import Taint, Toleration

    real = Node(
        "real", 8, 143_771, labels=(("pool", "real"),), taints=(Taint("real-node", "true"),)
    )
    nodes = [Node("kwok", 8, 143_771, labels=(("pool", "kwok"),)), real]
    snap = ClusterSnapshot.of(nodes)
    request = job("a", 1, 8)
    picky = replace(request.pods[0], node_selector=(("pool", "real"),))
    decision, _ = place_gang(snap, replace(request, pods=(picky,)), GANG_BINPACK)
    assert not decision.admitted
    assert "taint real-node=true:NoSchedule the pod does not tolerate" in decision.message
    assert "nodeSelector pool=real" in decision.message

    tolerant = replace(picky, tolerations=(Toleration("real-node", "Exists"),))
    decision, _ = place_gang(snap, replace(request, pods=(tolerant,)), GANG_BINPACK)
    assert decision.admitted and [p.node for p in decision.placements] == ["real"]

    # A toleration of another key, or of another effect, does not help.
    for wrong in (
        Toleration("other", "Exists"),
        Toleration("real-node", "Exists", "", "NoExecute"),
    ):
        member = replace(picky, tolerations=(wrong,))
        decision, _ = place_gang(snap, replace(request, pods=(member,)), GANG_BINPACK)
        assert not decision.admitted


def test_an_admitted_job_is_told_which_gpus_it_shares_and_with_whom() -> None:
    from rlix.core.policy.rlix_policy import RLixPolicy

    small = {Phase.TRAINING: 30_000}

    def pair(name: str) -> GangRequest:
        return GangRequest(
            name, 0, 0.0,
            tuple(Workload(f"{name}/p{k}", name, "w", 1, small, gang_size=2) for k in range(2)),
        )  # fmt: skip

    # One node of two GPUs: a takes both (empty GPUs first), b goes beside it
    # in the same pass, c finds no room.
    snapshot = ClusterSnapshot.of([Node("n0", 2, 81_920)])
    a, b = admit(snapshot, [pair("a"), pair("b")], RLixPolicy())
    assert a.admitted and a.message == ""
    assert b.admitted and b.message == "shares GPUs n0/0, n0/1 with a"
    # With a's pods parked on GPU 0, the note says so.
    bound = [
        Workload(f"a/p{k}", "a", "w", 1, small, node="n0", gpu_indices=(k,), suspended=k == 0)
        for k in range(2)
    ]
    (c,) = admit(ClusterSnapshot.of([Node("n0", 2, 81_920)], bound), [pair("c")], RLixPolicy())
    assert c.admitted, c
    assert c.message == "shares GPU n0/1 with a; GPU n0/0 with a (parked)", c
