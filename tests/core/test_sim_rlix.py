"""The simulator drives rlix.core.policy.placement through the adapter, unchanged."""

from __future__ import annotations

from rlix.core.phases import Phase
from rlix.core.policy.admission import GangRequest, WaitReason, place_gang, place_pod
from rlix.core.policy.placement import PlacementView, filter_nodes, score_nodes
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.sim.engine import DecisionRecord, SimConfig, simulate
from rlix.core.sim.interference import ASSUMED
from rlix.core.sim.schedulers import rlix
from rlix.core.sim.workload import JobProfile
from rlix.core.snapshot import ClusterSnapshot, Node, Workload
from tests.core.test_sim_helpers import load_s, mix_of, spec

MEM = {Phase.ROLLOUT: 40_000, Phase.SCORING: 15_000, Phase.TRAINING: 27_000}


def resident(job: str, node: str, phase: Phase) -> Workload:
    return Workload(
        f"{job}/p0", job, "actor-rollout-ref", 8, MEM, phase=phase, node=node,
        gpu_indices=tuple(range(8)),
    )  # fmt: skip


def test_rollout_pod_goes_next_to_training_not_next_to_rollout() -> None:
    # Two jobs on one node each: n0 trains (compute bound), n1 decodes (memory
    # bound). A new job entering rollout complements n0 and fights on n1.
    snapshot = ClusterSnapshot.of(
        [Node("n0", 8, 143_771), Node("n1", 8, 143_771)],
        [resident("t/train", "n0", Phase.TRAINING), resident("t/roll", "n1", Phase.ROLLOUT)],
    )
    pod = Workload("t/new/p0", "t/new", "actor-rollout-ref", 8, MEM)
    placement, reason = place_pod(snapshot, pod, RLixPolicy())
    assert placement is not None, reason
    assert placement.node == "n0"
    assert placement.gpus == tuple(range(8))


def test_adapter_answers_exactly_what_the_placement_package_answers() -> None:
    snapshot = ClusterSnapshot.of(
        [Node("n0", 8, 143_771), Node("n1", 8, 143_771)],
        [resident("t/train", "n0", Phase.TRAINING)],
    )
    pod = Workload("t/new/p0", "t/new", "actor-rollout-ref", 8, MEM)
    view = PlacementView(snapshot)
    direct = filter_nodes(view, pod, snapshot.nodes)
    adapted = RLixPolicy().filter(snapshot, pod)
    assert sorted(n for n, r in adapted.items() if r is None) == sorted(direct.feasible)
    scores = score_nodes(view, pod, direct.feasible)
    assert RLixPolicy().score(snapshot, pod, direct.feasible) == {
        n: s.score for n, s in scores.items()
    }


def test_two_jobs_overlap_on_one_node_and_finish_sooner_than_back_to_back() -> None:
    # Under the assumed matrix (same-shape pairs split the GPU, I = 1) the
    # overlap of loads and weight syncs is a small net gain.
    a, b = spec("t/a", 0), spec("t/b", 1, arrival=1.0)
    records: list[DecisionRecord] = []
    config = SimConfig(interference=ASSUMED)
    result = simulate(mix_of(a, b), rlix(), config, trace=records.append)
    alone = load_s(a) + JobProfile(a).timeline(0).total_s
    placed = [r for r in records if r.admission.admitted]
    assert [r.request.job for r in placed] == ["t/a", "t/b"]
    # The second job shares the first one's GPUs (the only node), by memory fit.
    assert placed[1].admission.placements[0].gpus == placed[0].admission.placements[0].gpus
    assert result.jobs == 2
    assert alone < result.makespan_s < 2 * alone  # overlapped, each slowed
    # Every decision replays identically through admission with the same policy.
    for record in placed:
        again, _ = place_gang(record.snapshot, record.request, RLixPolicy())
        assert again == record.admission


def test_under_the_measured_h200_matrix_same_shape_overlap_loses_to_back_to_back() -> None:
    # Measured time-slicing makes two saturating kernels of one shape slower
    # together than one after the other (I = 1.16 and 1.23 > 1): the same two
    # jobs as above now finish later than back to back would.
    a, b = spec("t/a", 0), spec("t/b", 1, arrival=1.0)
    result = simulate(mix_of(a, b), rlix())
    alone = load_s(a) + JobProfile(a).timeline(0).total_s
    assert result.makespan_s > 2 * alone


def test_waiting_jobs_get_a_reason_from_the_policy() -> None:
    snapshot = ClusterSnapshot.of([Node("n0", 4, 143_771)])
    pods = (Workload("t/x/p0", "t/x", "actor-rollout-ref", 8, MEM),)
    decision, _ = place_gang(snapshot, GangRequest("t/x", 0, 0.0, pods), RLixPolicy())
    assert not decision.admitted
    assert decision.reason is WaitReason.WAITING_FOR_GPUS
    assert "node has 4 GPUs, pod needs 8 on one node" in decision.message


def test_pods_of_one_gang_do_not_share_gpus_while_empty_nodes_exist() -> None:
    snapshot = ClusterSnapshot.of([Node("n0", 8, 143_771), Node("n1", 8, 143_771)])
    pods = tuple(
        Workload(f"t/g/p{k}", "t/g", "actor-rollout-ref", 8, MEM, gang_size=2) for k in range(2)
    )
    decision, _ = place_gang(snapshot, GangRequest("t/g", 0, 0.0, pods), RLixPolicy())
    assert decision.admitted
    assert {p.node for p in decision.placements} == {"n0", "n1"}
