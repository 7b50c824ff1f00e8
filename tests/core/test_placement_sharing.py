"""RLix's sharing rules (``rlix.core.policy.placement.sharing``): who may share a GPU."""

from __future__ import annotations

import pytest

from rlix.core.phases import Shape
from rlix.core.policy.placement import PlacementView, filter_nodes, node_load, score_nodes
from rlix.core.policy.placement.fit import fit
from rlix.core.policy.placement.sharing import (
    ASSUMED_CELLS,
    DEFAULT_RULES,
    MEASURED_H200_CELLS,
    SharingRules,
)
from rlix.core.sim.interference import ASSUMED, MEASURED_H200
from tests.builders.placement import cluster, node, pod

GiB = 1024

ASSUMED_RULES = SharingRules(ASSUMED_CELLS)
MEASURED_RULES = SharingRules(MEASURED_H200_CELLS)


def _rollout(name: str, job: str, *gpus: int, priority: int = 0):  # type: ignore[no-untyped-def]
    return (
        pod(name)
        .job(job)
        .gpus(len(gpus))
        .priority(priority)
        .memory(rollout=20 * GiB, training=20 * GiB)
        .phase("rollout")
        .on("n", *gpus)
    )


def _newcomer(gpus: int = 1, priority: int = 0):  # type: ignore[no-untyped-def]
    return (
        pod("new")
        .job("new")
        .gpus(gpus)
        .priority(priority)
        .memory(rollout=20 * GiB, training=20 * GiB)
        .build()
    )


def test_a_gpu_holds_at_most_two_jobs_whatever_memory_is_left() -> None:
    c = cluster().with_nodes(node("n").gpus(1))
    two = c.with_pods(_rollout("a-0", "a", 0), _rollout("b-0", "b", 0)).build()
    assert filter_nodes(PlacementView(two), _newcomer(), ["n"]).feasible == []
    one = c.with_pods(_rollout("a-0", "a", 0)).build()
    assert filter_nodes(PlacementView(one), _newcomer(), ["n"]).feasible == ["n"]
    three = SharingRules(interference=None, max_jobs_per_gpu=3)
    assert filter_nodes(PlacementView(two, rules=three), _newcomer(), ["n"]).feasible == ["n"]


def test_jobs_of_different_priority_never_share_a_gpu() -> None:
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(_rollout("a-0", "a", 0, priority=50))
    view = PlacementView(c.build())
    assert filter_nodes(view, _newcomer(priority=100), ["n"]).feasible == []
    assert filter_nodes(view, _newcomer(priority=0), ["n"]).feasible == []
    assert filter_nodes(view, _newcomer(priority=50), ["n"]).feasible == ["n"]


def test_a_pod_s_gpus_all_hold_the_same_partner() -> None:
    # a on GPUs 0-1, b on 2-3: a 2-GPU pod takes a's pair or b's, never one of each.
    c = (
        cluster()
        .with_nodes(node("n").gpus(4))
        .with_pods(_rollout("a-0", "a", 0, 1), _rollout("b-0", "b", 2, 3))
    )
    snap = c.build()
    load = node_load(snap.nodes["n"], snap.on_node("n"))
    assert fit(load, _newcomer(2)).ok
    chosen = score_nodes(PlacementView(snap), _newcomer(2), ["n"])["n"].gpus
    assert chosen in ((0, 1), (2, 3))
    assert not fit(load, _newcomer(3)).ok


def test_under_the_measured_h200_matrix_no_pair_of_busy_jobs_pays_so_nobody_shares() -> None:
    # Worst case over the phases of two RL jobs: a GEMV beside a GEMM delivers
    # 1/3.17 + 1/1.573 = 0.95 GPUs of progress, less than running them in turn.
    assert not MEASURED_RULES.shares_at_all(0)
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(_rollout("a-0", "a", 0))
    view = PlacementView(c.build(), rules=MEASURED_RULES)
    outcome = filter_nodes(view, _newcomer(), ["n"])
    assert outcome.feasible == []
    assert "sharing rules" in outcome.failed["n"]


def test_under_the_assumed_matrix_pairs_pay_but_the_protected_class_stays_alone() -> None:
    # Same shape: 2 / (1 + 1.0) = 1.0, at the threshold; compute/memory: 1.48.
    assert ASSUMED_RULES.shares_at_all(0)
    assert ASSUMED_RULES.shares_at_all(99)
    # The protected class (>= 100) would be slowed 2x by a same-shape partner.
    assert not ASSUMED_RULES.shares_at_all(100)
    c = cluster().with_nodes(node("n").gpus(1))
    low = c.with_pods(_rollout("a-0", "a", 0)).build()
    assert filter_nodes(PlacementView(low, rules=ASSUMED_RULES), _newcomer(), ["n"]).feasible
    top = c.with_pods(_rollout("a-0", "a", 0, priority=100)).build()
    view = PlacementView(top, rules=ASSUMED_RULES)
    assert filter_nodes(view, _newcomer(priority=100), ["n"]).feasible == []


def test_the_simulator_measures_with_the_numbers_the_policy_decides_with() -> None:
    assert MEASURED_H200.cells == MEASURED_H200_CELLS
    assert ASSUMED.cells == ASSUMED_CELLS
    assert DEFAULT_RULES.interference is None  # the cluster components' default: rules 1-3


def test_rules_refuse_a_malformed_matrix_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match="max_jobs_per_gpu = 0"):
        SharingRules(max_jobs_per_gpu=0)
    partial = tuple(c for c in MEASURED_H200_CELLS if c[:2] != (Shape.MEMORY, Shape.COMPUTE))
    with pytest.raises(ValueError, match="memory/compute"):
        SharingRules(partial)


def test_a_job_parked_in_place_does_not_keep_its_preemptor_off_the_gpu() -> None:
    # The conductor parks a victim in place; the higher-priority preemptor then
    # runs there. Parked, the victim slows nobody, so rule 3 does not apply to it.
    parked = _rollout("a-0", "a", 0, priority=0).suspended()
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(parked)
    view = PlacementView(c.build())
    assert filter_nodes(view, _newcomer(priority=10), ["n"]).feasible == ["n"]
