"""Status aggregation from pod phase annotations: roles, job phase, iterations, time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from rlix.core.phases import Phase
from rlix.core.rljob import ConditionStatus, JobState, RLJobSpec, RLJobStatus
from rlix.operator.recording import merge_patch
from rlix.operator.statuses import (
    PodView,
    observe,
    parse_time,
    rfc3339,
    role_phase,
    running_state,
    same_ignoring_times,
    status_body,
    with_condition,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SPEC = RLJobSpec.model_validate(
    {
        "roles": [
            {"name": "policy", "kind": "trainer", "image": "x", "gpuMemoryMiB": {"training": 1}},
            {
                "name": "rollout",
                "kind": "rollout",
                "replicas": 3,
                "image": "x",
                "gpuMemoryMiB": {"rollout": 1},
            },
        ]
    }
)


def pod(name: str, role: str, phase: Phase | None = None, since: datetime | None = None) -> PodView:
    return PodView(name, role, "Running", "n0", True, phase, since)


def test_role_phase_is_the_majority_and_ties_go_to_the_earlier_phase() -> None:
    assert role_phase([]) is None
    assert role_phase([pod("a", "r", Phase.ROLLOUT), pod("b", "r", Phase.TRAINING)]) is (
        Phase.ROLLOUT
    )
    three = [pod("a", "r", Phase.IDLE), pod("b", "r", Phase.IDLE), pod("c", "r", Phase.ROLLOUT)]
    assert role_phase(three) is Phase.IDLE


@pytest.mark.parametrize(
    ("sequence", "iterations", "seconds"),
    [
        ([Phase.ROLLOUT], 0, {}),
        ([Phase.ROLLOUT, Phase.TRAINING], 0, {"rollout": 60.0}),
        (
            [Phase.ROLLOUT, Phase.TRAINING, Phase.WEIGHT_SYNC],
            1,
            {"rollout": 60.0, "training": 60.0},
        ),
        (
            [Phase.ROLLOUT, Phase.TRAINING, Phase.ROLLOUT, Phase.TRAINING, Phase.ROLLOUT],
            2,
            {"rollout": 120.0, "training": 120.0},
        ),
    ],
)
def test_trainer_transitions_count_iterations_and_time(
    sequence: list[Phase], iterations: int, seconds: dict[str, float]
) -> None:
    status = RLJobStatus()
    for minute, phase in enumerate(sequence):
        since = T0 + timedelta(minutes=minute)
        status = observe(status, SPEC, [pod("p", "policy", phase, since)], since)
    assert status.phase is sequence[-1]
    assert status.iterations == iterations
    assert status.phase_seconds == seconds


def test_the_agents_count_catches_a_training_phase_seen_by_nobody() -> None:
    # Rollout, then weight sync: the training in between came and went between
    # two looks. The agent counted the exit; the trainer's transitions did not.
    def looked(status: RLJobStatus, phase: Phase, minute: int, counted: int | None) -> RLJobStatus:
        since = T0 + timedelta(minutes=minute)
        view = replace(pod("p", "policy", phase, since), iterations=counted)
        return observe(status, SPEC, [view], since)

    status = looked(RLJobStatus(), Phase.ROLLOUT, 0, None)
    status = looked(status, Phase.WEIGHT_SYNC, 2, 1)
    assert status.iterations == 1
    # Seen as well, it is not counted twice.
    seen = looked(looked(RLJobStatus(), Phase.TRAINING, 0, None), Phase.WEIGHT_SYNC, 1, 1)
    assert seen.iterations == 1
    # An agent that restarted counts from 0 again: the count only ever rises.
    restarted = looked(status.model_copy(update={"iterations": 5}), Phase.ROLLOUT, 3, 1)
    assert restarted.iterations == 5
    # Two trainers: the slower one's count.
    views = [
        replace(pod("p0", "policy", Phase.ROLLOUT, T0), iterations=3),
        replace(pod("p1", "policy", Phase.ROLLOUT, T0), iterations=2),
    ]
    assert observe(RLJobStatus(), SPEC, views, T0).iterations == 2
    # The annotation as the agent writes it, and what is not a count.
    body = {"metadata": {"annotations": {"rlix.io/iterations": "4"}}}
    assert PodView.of(body).iterations == 4
    body["metadata"]["annotations"]["rlix.io/iterations"] = "-1"
    assert PodView.of(body).iterations is None


def test_same_phase_again_changes_nothing() -> None:
    first = observe(RLJobStatus(), SPEC, [pod("p", "policy", Phase.ROLLOUT, T0)], T0)
    later = T0 + timedelta(minutes=5)
    again = observe(first, SPEC, [pod("p", "policy", Phase.ROLLOUT, T0)], later)
    assert again == first


def test_missing_phase_since_falls_back_to_now() -> None:
    status = observe(RLJobStatus(), SPEC, [pod("p", "policy", Phase.TRAINING)], T0)
    assert status.phase_since == rfc3339(T0)


def test_roles_report_bound_ready_and_their_own_phase() -> None:
    pods = [
        pod("p", "policy", Phase.TRAINING, T0),
        pod("r0", "rollout", Phase.IDLE),
        PodView("r1", "rollout", "Pending", None, False, None, None),
    ]
    status = observe(RLJobStatus(), SPEC, pods, T0)
    rollout = next(r for r in status.roles if r.name == "rollout")
    assert (rollout.replicas, rollout.bound, rollout.ready, rollout.phase) == (3, 1, 1, Phase.IDLE)
    assert status.gpus == 4
    assert running_state(4, pods) is JobState.ADMITTED
    assert running_state(2, pods) is JobState.RUNNING


def test_roles_count_their_pods_waiting_their_turn_at_the_gate() -> None:
    def view(name: str, role: str, mark: str | None) -> PodView:
        notes = {"rlix.io/phase": "idle"}
        if mark is not None:
            notes["rlix.io/waiting-for-turn"] = mark
        labels = {"rlix.io/role": role}
        body = {"metadata": {"name": name, "labels": labels, "annotations": notes}}
        return PodView.of({**body, "spec": {"nodeName": "n0"}, "status": {"phase": "Running"}})

    pods = [
        view("p", "policy", "training"),
        view("r0", "rollout", "rollout"),
        view("r1", "rollout", None),
        view("r2", "rollout", "not a phase"),  # garbage: as if absent
    ]
    status = observe(RLJobStatus(), SPEC, pods, T0)
    assert {r.name: r.waiting for r in status.roles} == {"policy": 1, "rollout": 1}
    assert status_body(status)["roles"][0]["waiting"] == 1
    # The job's sum feeds the Waiting printer column (kubectl get -o wide) ...
    assert status_body(status)["waitingForTurn"] == 2
    # ... and is written as 0 once nobody waits (a merge patch must clear it).
    calm = observe(status, SPEC, [view("p", "policy", None)], T0)
    assert status_body(calm)["waitingForTurn"] == 0


def test_condition_keeps_its_transition_time_until_status_flips() -> None:
    s = with_condition(
        RLJobStatus(), "Admitted", ConditionStatus.FALSE, "Wait", "a", now=T0, generation=1
    )
    later = T0 + timedelta(minutes=1)
    s2 = with_condition(s, "Admitted", ConditionStatus.FALSE, "Wait", "b", now=later, generation=1)
    assert s2.conditions[0].last_transition_time == rfc3339(T0)
    s3 = with_condition(
        s2, "Admitted", ConditionStatus.TRUE, "Admitted", "", now=later, generation=2
    )
    assert s3.conditions[0].last_transition_time == rfc3339(later)
    assert s3.conditions[0].observed_generation == 2
    assert same_ignoring_times(s2, s2.model_copy()) and not same_ignoring_times(s, s2)


def test_the_condition_written_last_gives_the_jobs_reason() -> None:
    """``status.reason`` feeds the Reason printer column."""
    s = with_condition(
        RLJobStatus(), "Admitted", ConditionStatus.FALSE, "NeverFits", "a", now=T0, generation=1
    )
    assert s.reason == "NeverFits" and status_body(s)["reason"] == "NeverFits"
    s = with_condition(s, "Failed", ConditionStatus.TRUE, "PodRejected", "b", now=T0, generation=1)
    assert s.reason == "PodRejected"
    assert {c.type for c in s.conditions} == {"Admitted", "Failed"}


def test_merge_patch_clears_fields_that_became_empty() -> None:
    body = merge_patch(RLJobStatus(state=JobState.QUEUED))
    assert body["state"] == "Queued"
    assert body["phase"] is None and body["admittedAt"] is None


def test_times_round_trip_through_rfc3339() -> None:
    assert parse_time(rfc3339(T0)) == T0
    assert parse_time("2026-01-01T12:00:00Z") == T0
    assert parse_time("yesterday") is None and parse_time(None) is None


def test_pod_view_reads_annotations_and_tolerates_garbage() -> None:
    body = {
        "metadata": {
            "name": "p",
            "labels": {"rlix.io/role": "policy"},
            "annotations": {"rlix.io/phase": "Generation", "rlix.io/phase-since": "later"},
        },
        "spec": {},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    view = PodView.of(body)
    assert (view.role, view.phase, view.phase_since, view.ready) == ("policy", None, None, True)
