"""What the operator's conductor reads off pods and nodes before the core decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rlix.core import names
from rlix.core.rljob import RLJob
from rlix.core.suspension import (
    ANNOTATION_AGENT_HEARTBEAT,
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    ActiveReplicas,
    DesiredSuspension,
    ObservedSuspension,
    Outcome,
    State,
)
from rlix.operator.suspensions import (
    active_replicas,
    agent_alive,
    conduct_snapshot,
    elastic_rollout,
    job_clocks,
)
from tests.builders.objects import node_object, pod_object
from tests.builders.placement import node, pod

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _pod(name: str, **notes: str) -> dict[str, object]:
    body = pod_object(pod(name).job("j").role("rollout").memory(1000).on("n1").build())
    body["metadata"]["annotations"].update(notes)  # type: ignore[index]
    return body


def test_asked_suspensions_count_as_parked_and_gpus_come_from_admission() -> None:
    asked = DesiredSuspension(1, State.SUSPENDED, "Manual", since="2026-01-01T11:00:00Z")
    refused = ObservedSuspension(1, State.RUNNING, Outcome.REFUSED, error="x")
    pods = [
        _pod("a", **{ANNOTATION_DESIRED: asked.to_json()}),
        _pod("b", **{ANNOTATION_DESIRED: asked.to_json(), ANNOTATION_OBSERVED: refused.to_json()}),
    ]
    snap = conduct_snapshot(
        [node_object(node("n1").build())], pods, {"default/a": (3,), "default/b": (4,)}
    )
    by_name = {w.name: w for w in snap.workloads}
    assert by_name["default/a"].suspended, "asked away: counted as going"
    assert not by_name["default/b"].suspended, "refused: it runs"
    assert by_name["default/a"].gpu_indices == (3,) and by_name["default/b"].gpu_indices == (4,)


def test_memory_asked_away_leaves_the_measurement_before_the_agent_parks_it() -> None:
    # The agent still measures a's 1000 MiB on GPU 3 (it has not parked yet) and
    # b's on GPU 4 (b runs on); 300 MiB on each is nobody's we know.
    asked = DesiredSuspension(1, State.SUSPENDED, "Priority", since="2026-01-01T11:00:00Z")
    pods = [_pod("a", **{ANNOTATION_DESIRED: asked.to_json()}), _pod("b")]
    n1 = node("n1").gpus(8).used(0, 0, 0, 1300, 1300).build()
    snap = conduct_snapshot([node_object(n1)], pods, {"default/a": (3,), "default/b": (4,)})
    used = {g.index: g.used_mib for g in snap.nodes["n1"].gpus}
    assert (used[3], used[4]) == (300, 1300)


def test_job_clocks_come_from_the_pods_own_stamps() -> None:
    parked = DesiredSuspension(1, State.SUSPENDED, "Priority", since="2026-01-01T11:00:00Z")
    back = DesiredSuspension(2, State.RUNNING, "MemoryFree", since="2026-01-01T11:30:00Z")
    done = ObservedSuspension(2, State.RUNNING, Outcome.RESUMED, at="2026-01-01T11:31:00Z")
    pods = [
        _pod("a", **{ANNOTATION_DESIRED: parked.to_json()}),
        _pod("b", **{ANNOTATION_DESIRED: back.to_json(), ANNOTATION_OBSERVED: done.to_json()}),
    ]
    clocks = job_clocks(pods, {"default/a": "default/x", "default/b": "default/y"})
    assert clocks["default/x"].suspended_at == datetime(2026, 1, 1, 11, tzinfo=UTC).timestamp()
    assert clocks["default/y"].resumed_at == datetime(2026, 1, 1, 11, 31, tzinfo=UTC).timestamp()


def test_an_agent_is_alive_only_with_a_fresh_heartbeat() -> None:
    def with_beat(at: datetime | None) -> dict[str, object]:
        body = node_object(node("n1").build())
        if at is not None:
            stamp = at.isoformat().replace("+00:00", "Z")
            body["metadata"].setdefault("annotations", {})[ANNOTATION_AGENT_HEARTBEAT] = stamp  # type: ignore[union-attr]
        return body

    assert agent_alive(with_beat(NOW - timedelta(seconds=10)), NOW)
    assert not agent_alive(with_beat(NOW - timedelta(minutes=5)), NOW)
    assert not agent_alive(with_beat(None), NOW)
    assert not agent_alive(None, NOW)


def _elastic_job(min_replicas: int | None) -> RLJob:
    rollout: dict[str, object] = {
        "name": "gen", "kind": "rollout", "replicas": 3, "image": "x",
        "gpuMemoryMiB": {"rollout": 1},
    }  # fmt: skip
    if min_replicas is not None:
        rollout["elastic"] = {"minReplicas": min_replicas}
    trainer = {"name": "policy", "kind": "trainer", "image": "x", "gpuMemoryMiB": {"training": 1}}
    return RLJob.model_validate(
        {"metadata": {"name": "j", "namespace": "default"}, "spec": {"roles": [trainer, rollout]}}
    )


def test_the_active_replicas_of_an_elastic_job_follow_its_pods_suspension_state() -> None:
    asked = DesiredSuspension(1, State.SUSPENDED, "Lend")
    back = DesiredSuspension(2, State.RUNNING, "MemoryFree")
    parked = ObservedSuspension(1, State.SUSPENDED, Outcome.SUSPENDED, 10)
    pods = [_pod("j-policy-0")]
    for i, notes in enumerate(
        [
            {},  # never asked: runs
            {ANNOTATION_DESIRED: asked.to_json()},  # asked to park: no new work
            {ANNOTATION_DESIRED: back.to_json(), ANNOTATION_OBSERVED: parked.to_json()},
        ]
    ):
        body = _pod(f"j-gen-{i}", **notes)
        body["metadata"]["labels"].update(  # type: ignore[index]
            {names.LABEL_ROLE: "gen", names.LABEL_REPLICA_INDEX: str(i)}
        )
        pods.append(body)
    job = _elastic_job(1)
    rollout = elastic_rollout(job)
    assert rollout is not None and (rollout.role, rollout.min_replicas) == ("gen", 1)
    assert active_replicas(job, pods) == ActiveReplicas("gen", 3, 1, (0,), (1, 2))
    # Not elastic: none of it is lent, but the trainer still learns when the
    # whole rollout is parked for another job.
    assert active_replicas(_elastic_job(None), pods) == ActiveReplicas("gen", 3, 3, (0,), (1, 2))
    trainer_only = RLJob.model_validate(
        {"metadata": {"name": "t", "namespace": "default"}, "spec": {"roles": [
            {"name": "policy", "kind": "trainer", "image": "x", "gpuMemoryMiB": {"training": 1}}
        ]}}
    )  # fmt: skip
    assert active_replicas(trainer_only, pods) is None, "no rollout role: nothing said"
