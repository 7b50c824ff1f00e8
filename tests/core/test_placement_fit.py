"""Filter scenarios: does a pod fit, and is the reason one a user can act on?"""

from __future__ import annotations

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement import (
    PlacementView,
    filter_nodes,
    fit,
    next_phase,
    node_load,
    owed_mib,
)
from rlix.core.snapshot import Workload
from tests.builders.placement import ClusterBuilder, cluster, node, pod

GiB = 1024


def outcome(c: ClusterBuilder, p: Workload, names: list[str] | None = None):  # type: ignore[no-untyped-def]
    snap = c.build()
    return filter_nodes(PlacementView(snap), p, names if names is not None else list(snap.nodes))


def test_empty_node_fits_and_offers_every_gpu() -> None:
    n = node("n1").gpus(8).build()
    verdict = fit(node_load(n, ()), pod("p").gpus(4).memory(40 * GiB).build())
    assert verdict.ok
    assert len(verdict.candidates) == 8


@pytest.mark.parametrize(
    ("node_b", "p", "resolvable", "words"),
    [
        (
            node("n").gpus(4),
            pod("p").gpus(8).memory(10 * GiB),
            False,
            "node has 4 GPUs, pod needs 8",
        ),
        (node("n").gpus(8, mib=40 * GiB), pod("p").memory(60 * GiB), False, "per GPU"),
        (node("n").gpus(0), pod("p"), False, "no GPUs"),
        (node("n").gpus(8).cordoned(), pod("p"), False, "cordoned"),
    ],
    ids=["too-few-gpus", "gpu-too-small", "no-gpus", "cordoned"],
)
def test_unresolvable_reasons(node_b, p, resolvable, words) -> None:  # type: ignore[no-untyped-def]
    res = outcome(cluster().with_nodes(node_b), p.build())
    assert res.feasible == []
    assert not res.failed
    assert words in res.unresolvable["n"]


def test_full_memory_is_resolvable_and_names_the_numbers() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(pod("big").gpus(2).memory(70 * GiB).phase("training").on("n", 0, 1))
    )
    res = outcome(c, pod("p").memory(20 * GiB).build())
    assert res.feasible == []
    assert "only 0 of 2 GPUs have 20.0 GiB free" in res.failed["n"]
    assert "next phase" in res.failed["n"]


def test_resident_owes_its_next_phase_not_just_the_current_one() -> None:
    # In scoring now (10 GiB) but training next (70 GiB): room for 20 GiB is gone.
    resident = pod("r").memory(rollout=30 * GiB, scoring=10 * GiB, training=70 * GiB)
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(resident.phase("scoring").on("n", 0))
    assert outcome(c, pod("p").memory(20 * GiB).build()).feasible == []
    # In training, the next phase (weight-sync, unlisted) costs the peak: still 70.
    c2 = cluster().with_nodes(node("n").gpus(1)).with_pods(resident.phase("training").on("n", 0))
    assert outcome(c2, pod("p").memory(20 * GiB).build()).feasible == []
    # In rollout (30) with scoring (10) next: 30 owed, 20 fits.
    c3 = cluster().with_nodes(node("n").gpus(1)).with_pods(resident.phase("rollout").on("n", 0))
    assert outcome(c3, pod("p").memory(20 * GiB).build()).feasible == ["n"]


def test_suspended_pod_keeps_room_to_return() -> None:
    parked = pod("parked").memory(60 * GiB).phase("rollout").suspended().on("n", 0)
    c = cluster().with_nodes(node("n").gpus(1)).with_pods(parked)
    assert outcome(c, pod("p").memory(30 * GiB).build()).feasible == []
    assert outcome(c, pod("p").memory(20 * GiB).build()).feasible == ["n"]


def test_undeclared_memory_means_the_whole_gpu() -> None:
    c = cluster().with_nodes(node("n").gpus(2)).with_pods(pod("plain").on("n", 0))
    # A declared pod fits next to nothing but the free GPU...
    assert outcome(c, pod("p").gpus(2).memory(1 * GiB).build()).feasible == []
    assert outcome(c, pod("p").gpus(1).memory(1 * GiB).build()).feasible == ["n"]
    # ...and an undeclared pod needs an untouched GPU.
    c2 = (
        cluster()
        .with_nodes(node("n").gpus(1))
        .with_pods(pod("small").memory(1 * GiB).phase("rollout").on("n", 0))
    )
    res = outcome(c2, pod("p").build())
    assert "whole GPU" in res.failed["n"]


def test_agent_measurement_is_a_floor() -> None:
    c = cluster().with_nodes(node("n").gpus(2).used(80 * GiB, 0))
    verdict = fit(node_load(c.build().nodes["n"], ()), pod("p").memory(10 * GiB).build())
    assert [g.index for g in verdict.candidates] == [1]


def test_known_gpu_indices_are_honoured() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(pod("r").memory(70 * GiB).phase("training").on("n", 1))
    )
    load = node_load(c.build().nodes["n"], c.build().workloads)
    assert [g.owed_mib for g in load.gpus] == [0, 70 * GiB]


def test_pods_without_indices_spread_to_emptiest_gpus() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("a").memory(10 * GiB).phase("training").on("n"),
            pod("b").memory(10 * GiB).phase("training").on("n"),
        )
    )
    load = node_load(c.build().nodes["n"], c.build().workloads)
    assert sorted(g.owed_mib for g in load.gpus) == [10 * GiB, 10 * GiB]


def test_unknown_node_is_unresolvable_and_gpu_less_pods_pass_everywhere() -> None:
    c = cluster().with_nodes(node("n").gpus(1))
    res = outcome(c, pod("p").build(), ["n", "ghost"])
    assert res.feasible == ["n"]
    assert "not in the rlix extender's cache" in res.unresolvable["ghost"]
    cpu_only = outcome(c, pod("p").gpus(0).build(), ["n", "ghost"])
    assert cpu_only.feasible == ["n", "ghost"]


def test_duplicate_names_are_answered_once() -> None:
    res = outcome(cluster().with_nodes(node("n").gpus(1)), pod("p").build(), ["n", "n"])
    assert res.feasible == ["n"]


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        (Phase.ROLLOUT, Phase.SCORING),
        (Phase.SCORING, Phase.TRAINING),
        (Phase.TRAINING, Phase.WEIGHT_SYNC),
        (Phase.WEIGHT_SYNC, Phase.ROLLOUT),
        (Phase.IDLE, None),
        (None, None),
    ],
)
def test_next_phase_follows_the_rl_loop(phase: Phase | None, expected: Phase | None) -> None:
    assert next_phase(phase) == expected


def test_idle_pod_owes_its_peak() -> None:
    w = pod("r").memory(rollout=10, training=50).phase("idle").build()
    assert owed_mib(w, 100) == 50


def test_without_matches_a_fresh_load_of_the_remaining_pods() -> None:
    from rlix.core.policy.placement.loads import without

    c = (
        cluster()
        .with_nodes(node("n").gpus(3).used(0, 70 * GiB, 5 * GiB))
        .with_pods(
            pod("a").memory(10 * GiB).phase("rollout").on("n", 0),
            pod("b").gpus(2).memory(20 * GiB).phase("training").on("n", 0, 1),
            pod("c").memory(30 * GiB).phase("scoring").on("n", 2),
        )
    )
    snap = c.build()
    full = node_load(snap.nodes["n"], snap.workloads)
    for gone in ({"default/a"}, {"default/b"}, {"default/a", "default/c"}):
        fresh = node_load(snap.nodes["n"], [w for w in snap.workloads if w.name not in gone])
        trial = without(full, gone)
        assert [g.residents for g in trial.gpus] == [g.residents for g in fresh.gpus]
    # GPU 1: 70 GiB measured, b owes 20 -> 50 GiB used by something else stays taken.
    assert without(full, {"default/b"}).gpus[1].owed_mib == 50 * GiB
    # GPU 2: the 5 GiB measured were c's own (it owes 30): gone with it.
    assert without(full, {"default/c"}).gpus[2].is_empty


def test_memo_per_node_stays_bounded() -> None:
    from rlix.core.policy.placement.memo import MEMO_LIMIT

    load = node_load(node("n").gpus(2).build(), ())
    for mib in range(1, 5 * MEMO_LIMIT):
        assert load.holdable(mib) == (0, 1)
    assert len(load.memo) <= MEMO_LIMIT


def test_a_job_never_shares_a_gpu_with_itself() -> None:
    """Pods of one gang run together, in the same phase: stacking them only slows them."""
    n = node("n1").gpus(8).build()
    peer = pod("a-0").job("a").gpus(4).memory(10 * GiB).phase(Phase.ROLLOUT).on("n1", 0, 1, 2, 3)
    stranger = pod("b-0").job("b").gpus(4).memory(10 * GiB).phase(Phase.ROLLOUT).on("n1", 4, 5)
    load = node_load(n, (peer.build(), stranger.build()))
    same_job = fit(load, pod("a-1").job("a").gpus(4).memory(10 * GiB).build())
    assert same_job.ok
    assert sorted(g.index for g in same_job.candidates) == [4, 5, 6, 7]
    too_many = fit(load, pod("a-2").job("a").gpus(5).memory(10 * GiB).build())
    assert not too_many.ok and "only 4 of 8" in too_many.reason
    # Another job's pod takes GPUs that all hold the same partner (sharing rule 2):
    # a's four, not a mix of a's, b's and empty ones.
    other_job = fit(load, pod("c-0").job("c").gpus(4).memory(10 * GiB).build())
    assert other_job.ok and sorted(g.index for g in other_job.candidates) == [0, 1, 2, 3]
    straddling = fit(load, pod("c-1").job("c").gpus(8).memory(10 * GiB).build())
    assert not straddling.ok and "sharing rules let it take at most 4" in straddling.reason


def test_memoised_room_tells_a_job_on_the_node_from_one_elsewhere() -> None:
    """filter_nodes memoises room per node under a key without the pod's job
    where the node holds none of it: whichever pod asks first, a pod of the
    resident's job and one of any other job each get their own answer."""
    c = cluster().with_nodes(node("n1").gpus(1), node("n2").gpus(1)).with_pods(
        pod("a-0").job("a").memory(10 * GiB).phase(Phase.ROLLOUT).on("n1", 0),
    )  # fmt: skip
    view = PlacementView(c.build())

    def new_pod(job: str) -> Workload:
        return pod(f"{job}-new").job(job).memory(10 * GiB).phase(Phase.TRAINING).build()

    # x and y may share a's GPU; a's own pod may not (a job never shares a
    # GPU with itself). In every order, so no answer leaks between jobs.
    for order in (["x", "a", "y", "a"], ["a", "x", "a", "y"]):
        for job in order:
            out = filter_nodes(view, new_pod(job), ["n1", "n2"])
            assert out.feasible == (["n2"] if job == "a" else ["n1", "n2"]), (order, job, out)
            assert ("n1" in out.failed) == (job == "a")


def test_key_ids_are_stable_and_never_reused() -> None:
    from rlix.core.policy.placement import memo

    first = memo.key_id(("a question", 1))
    assert memo.key_id(("a question", 1)) == first
    assert memo.key_id(("another", 1)) != first
    seen = {first}
    for i in range(memo.KEY_IDS_LIMIT + 5):  # past the limit: the table starts over
        seen.add(memo.key_id(("filler", i)))
    again = memo.key_id(("a question", 1))
    assert again not in seen  # a fresh id: old memo entries under `first` cannot answer
