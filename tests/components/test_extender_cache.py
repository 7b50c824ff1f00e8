"""The watch-fed cache: event application rules, without a cluster."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.core.policy.placement import PlacementView
from rlix.extender.cache import ADDED, DELETED, MODIFIED, ClusterCache
from tests.builders.objects import node_object, pod_object, uid_for
from tests.builders.placement import node, pod


def test_only_bound_live_pods_are_kept() -> None:
    cache = ClusterCache()
    pending = pod_object(pod("p").build())
    cache.apply_pod(ADDED, pending)
    assert cache.counts() == (0, 0)
    bound = pod_object(pod("p").on("n").build())
    cache.apply_pod(MODIFIED, bound)
    assert cache.counts() == (0, 1)
    assert cache.name_of_uid(uid_for("default/p")) == "default/p"
    done = dict(bound, status={"phase": "Succeeded"})
    cache.apply_pod(MODIFIED, done)
    assert cache.counts() == (0, 0)
    assert cache.name_of_uid(uid_for("default/p")) is None


def test_delete_and_phase_change_are_seen_by_the_next_view() -> None:
    cache = ClusterCache()
    cache.apply_node(ADDED, node_object(node("n").build()))
    cache.apply_pod(ADDED, pod_object(pod("p").phase("rollout").on("n").build()))
    first = cache.view()
    assert cache.view() is first  # unchanged: the memoised view is reused
    cache.apply_pod(MODIFIED, pod_object(pod("p").phase("training").on("n").build()))
    second = cache.view()
    assert second is not first
    assert second.workload("default/p").phase.value == "training"  # type: ignore[union-attr]
    cache.apply_pod(DELETED, pod_object(pod("p").on("n").build()))
    cache.apply_node(DELETED, node_object(node("n").build()))
    assert cache.view().snapshot.workloads == ()
    assert dict(cache.view().snapshot.nodes) == {}


def test_relist_replaces_everything_and_marks_ready() -> None:
    cache = ClusterCache()
    cache.apply_node(ADDED, node_object(node("old").build()))
    cache.apply_pod(ADDED, pod_object(pod("old").on("old").build()))
    assert not cache.ready
    cache.replace_nodes([node_object(node("new").build())])
    cache.replace_pods([pod_object(pod("new").on("new").build())])
    assert cache.ready
    assert set(cache.view().snapshot.nodes) == {"new"}
    assert [w.name for w in cache.view().snapshot.workloads] == ["default/new"]
    assert cache.uids() == {uid_for("default/new"): "default/new"}


def test_unreadable_objects_are_counted_not_raised() -> None:
    cache = ClusterCache()
    cache.apply_node(ADDED, {"metadata": {}})
    cache.apply_pod(ADDED, {"spec": {}})
    assert cache.rejected_objects == 2
    assert cache.counts() == (0, 0)


def test_resident_with_garbage_annotations_degrades_safely() -> None:
    cache = ClusterCache()
    obj = pod_object(pod("p").on("n").build())
    obj["metadata"]["annotations"]["rlix.io/gpu-memory-mib"] = "?"
    cache.apply_pod(ADDED, obj)
    w = cache.view().workload("default/p")
    assert w is not None and w.memory_mib == {}  # owes the whole GPU


def test_job_members_follow_adds_moves_and_deletes() -> None:
    cache = ClusterCache()
    cache.apply_pod(ADDED, pod_object(pod("a").job("j").on("n1").build()))
    cache.apply_pod(ADDED, pod_object(pod("b").job("j").on("n2").build()))
    assert {w.name for w in cache.view().job_members("default/j")} == {"default/a", "default/b"}
    cache.apply_pod(DELETED, pod_object(pod("a").job("j").on("n1").build()))
    assert [w.name for w in cache.view().job_members("default/j")] == ["default/b"]
    cache.apply_pod(DELETED, pod_object(pod("b").job("j").on("n2").build()))
    assert cache.view().job_members("default/j") == ()


events = st.lists(
    st.tuples(
        st.sampled_from([ADDED, MODIFIED, DELETED]),
        st.sampled_from(["p0", "p1", "p2", "p3"]),
        st.sampled_from(["n0", "n1", None]),
        st.sampled_from(["rollout", "training", None]),
        st.sampled_from(["j", "k", ""]),
    ),
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(events, st.lists(st.sampled_from(["n0", "n1"]), max_size=4))
def test_incremental_view_equals_a_fresh_one(
    pod_events: list[tuple[str, str, str | None, str | None, str]], node_flips: list[str]
) -> None:
    """Whatever order events arrive in, the incrementally maintained loads and
    job index equal what a from-scratch view of the final state computes."""
    cache = ClusterCache()
    for n in ("n0", "n1"):
        cache.apply_node(ADDED, node_object(node(n).gpus(2).build()))
    for i, (kind, name, on, phase, job) in enumerate(pod_events):
        b = pod(name).gpus(1).memory(1000 + i).phase(phase)
        if job:
            b = b.job(job)
        if on:
            b = b.on(on)
        cache.apply_pod(kind, pod_object(b.build()))
        if i % 3 == 0:
            cache.view()  # interleave reads, as requests do
        if node_flips and i % 4 == 0:
            flip = node_flips[i % len(node_flips)]
            cache.apply_node(MODIFIED, node_object(node(flip).gpus(2 + i % 2).build()))
    live = cache.view()
    fresh = PlacementView(live.snapshot)
    for n in live.snapshot.nodes:
        got, want = live.load(n), fresh.load(n)
        assert got is not None and want is not None
        assert got.gpus == want.gpus
        assert got.residents == want.residents
    for job in ("default/j", "default/k"):
        assert {w.name for w in live.job_members(job)} == {w.name for w in fresh.job_members(job)}
