"""Victim choice: least harm, never a protected pod, never half a gang."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlix.core.policy.placement import (
    PlacementView,
    choose_victims,
    choose_victims_on,
    victim_units,
)
from rlix.core.snapshot import Workload
from tests.builders.placement import ClusterBuilder, cluster, node, pod

GiB = 1024
# A pod RLix does not manage (no rlix.io/job): kube-scheduler's preemption is the
# only way to make room for it, so RLix rewrites its victims by least harm.
PREEMPTOR = pod("vip").gpus(1).memory(60 * GiB).phase("training").priority(100).build()
# An RLix pod: RLix makes room for it in place, never by deleting its own pods.
RLIX_PREEMPTOR = (
    pod("vip").job("vip").gpus(1).memory(60 * GiB).phase("training").priority(100).build()
)


def d(name: str) -> str:
    return f"default/{name}"


def victims(
    c: ClusterBuilder, proposals: Mapping[str, Sequence[str]], p: Workload = PREEMPTOR
) -> dict[str, tuple[str, ...]]:
    return choose_victims(
        PlacementView(c.build()), p, {n: [d(v) for v in vs] for n, vs in proposals.items()}
    )


def one_gpu_node(*pods):  # type: ignore[no-untyped-def]
    return cluster().with_nodes(node("n").gpus(1)).with_pods(*pods)


def test_rollout_goes_before_training_at_equal_priority() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("train").job("a").memory(50 * GiB).phase("training").on("n", 0),
            pod("roll").job("b").memory(50 * GiB).phase("rollout").on("n", 1),
        )
    )
    # The scheduler proposed the training pod; the rollout pod harms less.
    assert victims(c, {"n": ["train"]}) == {"n": (d("roll"),)}


def test_lower_priority_goes_first_whatever_the_phase() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("train").job("a").memory(50 * GiB).phase("training").priority(1).on("n", 0),
            pod("roll").job("b").memory(50 * GiB).phase("rollout").priority(5).on("n", 1),
        )
    )
    assert victims(c, {"n": ["roll"]}) == {"n": (d("train"),)}


def test_protected_pod_is_never_a_victim() -> None:
    c = one_gpu_node(
        pod("keep").job("a").memory(50 * GiB).phase("rollout").preemptible(False).on("n", 0)
    )
    assert victims(c, {"n": ["keep"]}) == {}


def test_protected_pod_is_replaced_by_an_allowed_one() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("keep").job("a").memory(50 * GiB).phase("rollout").preemptible(False).on("n", 0),
            pod("ok").job("b").memory(50 * GiB).phase("training").on("n", 1),
        )
    )
    assert victims(c, {"n": ["keep"]}) == {"n": (d("ok"),)}


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    c = one_gpu_node(
        pod("peer").job("a").memory(50 * GiB).phase("rollout").priority(100).on("n", 0)
    )
    assert victims(c, {"n": ["peer"]}) == {}


def test_a_gang_on_one_node_goes_whole() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("g0").job("g", gang=2).memory(50 * GiB).phase("rollout").on("n", 0),
            pod("g1").job("g", gang=2).memory(50 * GiB).phase("rollout").on("n", 1),
        )
    )
    assert victims(c, {"n": ["g0"]}) == {"n": (d("g0"), d("g1"))}


def test_a_gang_spread_over_nodes_is_left_alone() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(1), node("m").gpus(1))
        .with_pods(
            pod("g0").job("g", gang=2).memory(50 * GiB).phase("rollout").on("n", 0),
            pod("g1").job("g", gang=2).memory(50 * GiB).phase("rollout").on("m", 0),
        )
    )
    assert victims(c, {"n": ["g0"], "m": ["g1"]}) == {}


def test_a_gang_with_members_we_have_not_seen_is_left_alone() -> None:
    c = one_gpu_node(pod("g0").job("g", gang=3).memory(50 * GiB).phase("rollout").on("n", 0))
    assert victims(c, {"n": ["g0"]}) == {}


def test_a_lower_priority_pod_left_on_the_preemptor_s_gpu_goes_too() -> None:
    # Memory alone would spare the rollout pod once the training pod is taken,
    # but the preemptor never shares a GPU with a job of another priority
    # (sharing rule 3), so both go, whichever the scheduler proposed.
    c = one_gpu_node(
        pod("r1").job("a").memory(10 * GiB).phase("rollout").on("n", 0),
        pod("t1").job("b").memory(60 * GiB).phase("training").on("n", 0),
    )
    assert victims(c, {"n": ["t1"]}) == {"n": (d("r1"), d("t1"))}
    assert victims(c, {"n": ["r1"]}) == {"n": (d("r1"), d("t1"))}


def test_frees_at_least_as_many_gpus_as_the_scheduler_asked() -> None:
    # Memory alone would allow keeping both, but the scheduler freed 2 GPUs by count.
    c = (
        cluster()
        .with_nodes(node("n").gpus(4))
        .with_pods(
            pod("a").job("a").memory(10 * GiB).phase("rollout").on("n", 0),
            pod("b").job("b").memory(10 * GiB).phase("rollout").on("n", 1),
            pod("c").job("c").memory(10 * GiB).phase("training").on("n", 2),
        )
    )
    out = victims(c, {"n": ["a", "c"]})
    assert out == {"n": (d("a"), d("b"))}


def test_unknown_victims_pass_through_and_unknown_nodes_are_dropped() -> None:
    c = one_gpu_node(pod("r").job("a").memory(50 * GiB).phase("rollout").on("n", 0))
    out = choose_victims(
        PlacementView(c.build()), PREEMPTOR, {"n": [d("r"), "uid-cpu-pod"], "ghost": ["x"]}
    )
    assert out == {"n": (d("r"), "uid-cpu-pod")}


def test_no_victims_needed_means_no_entry() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(pod("r").job("a").memory(10 * GiB).phase("rollout").priority(500).on("n", 0))
    )
    assert choose_victims_on(PlacementView(c.build()), PREEMPTOR, "n", []) is None


def test_suspended_pods_are_taken_last() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2))
        .with_pods(
            pod("parked").job("a").memory(50 * GiB).phase("rollout").suspended().on("n", 0),
            pod("train").job("b").memory(50 * GiB).phase("training").on("n", 1),
        )
    )
    units = victim_units(PlacementView(c.build()), PREEMPTOR, "n")
    assert [u[0].name for u in units] == [d("train"), d("parked")]


def test_gpu_less_preemptor_keeps_the_schedulers_choice() -> None:
    c = one_gpu_node(pod("keep").preemptible(False).on("n", 0))
    cpu_pod = pod("cpu").gpus(0).priority(100).build()
    assert victims(c, {"n": ["keep"], "m": []}, cpu_pod) == {"n": (d("keep"),)}


def test_a_node_no_preemption_can_help_is_left_out() -> None:
    c = one_gpu_node(pod("r").job("a").memory(10 * GiB).phase("rollout").on("n", 0))
    two_gpus = pod("vip").gpus(2).memory(10 * GiB).priority(100).build()
    assert victims(c, {"n": ["r"]}, two_gpus) == {}


def test_memory_used_outside_known_pods_stays_taken() -> None:
    # The agent sees 75 GiB used on the GPU; the rollout pod owes 30 of it.
    c = (
        cluster()
        .with_nodes(node("n").gpus(1).used(75 * GiB))
        .with_pods(pod("r").job("a").memory(30 * GiB).phase("rollout").on("n", 0))
    )
    small = pod("vip").memory(30 * GiB).priority(100).build()
    assert victims(c, {"n": ["r"]}, small) == {"n": (d("r"),)}  # 45 GiB taken, 35 free
    large = pod("vip").memory(40 * GiB).priority(100).build()
    assert victims(c, {"n": ["r"]}, large) == {}  # 35 GiB is all preemption can free


def test_an_rlix_preemptor_gets_no_rlix_victims_only_unmanaged_ones() -> None:
    c = (
        cluster()
        .with_nodes(node("n").gpus(2), node("m").gpus(1))
        .with_pods(
            pod("roll").job("b").memory(70 * GiB).phase("rollout").on("n", 0),
            pod("plain").memory(70 * GiB).phase("training").on("n", 1),
            pod("other").job("c").memory(70 * GiB).phase("rollout").on("m", 0),
        )
    )
    # kube-scheduler proposed the RLix rollout on n: the unmanaged pod goes instead;
    # on m only an RLix pod could make room, so m is left out (the conductor parks).
    got = victims(c, {"n": ["roll"], "m": ["other"]}, RLIX_PREEMPTOR)
    assert got == {"n": (d("plain"),)}
    # The same node for a plain preemptor: the rollout harms least.
    assert victims(c, {"n": ["roll"], "m": ["other"]}) == {"n": (d("roll"),), "m": (d("other"),)}


def test_in_place_the_rlix_preemptor_still_parks_rlix_pods() -> None:
    c = one_gpu_node(pod("roll").job("b").memory(70 * GiB).phase("rollout").on("n", 0))
    view = PlacementView(c.build())
    assert choose_victims_on(view, RLIX_PREEMPTOR, "n", [d("roll")]) is None
    assert choose_victims_on(view, RLIX_PREEMPTOR, "n", [d("roll")], in_place=True) == (d("roll"),)
