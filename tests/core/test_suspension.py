"""The conductor protocol's documents: round trips, and bad input named clearly."""

from __future__ import annotations

import pytest

from rlix.core.agent_protocol import Location, Place
from rlix.core.suspension import (
    ANNOTATION_ACTIVE_REPLICAS,
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    ActiveReplicas,
    DesiredSuspension,
    ObservedSuspension,
    Outcome,
    PodSuspension,
    State,
    SuspensionError,
    SuspensionRequest,
)


def test_documents_round_trip() -> None:
    desired = DesiredSuspension(
        3, State.SUSPENDED, "Priority", "ns/high", Location(Place.GPU, 2), "2026-01-01T00:00:00Z"
    )
    assert DesiredSuspension.parse(desired.to_json()) == desired
    observed = ObservedSuspension(3, State.SUSPENDED, Outcome.SUSPENDED, 1 << 30, "", "t")
    assert ObservedSuspension.parse(observed.to_json()) == observed
    request = SuspensionRequest(State.RUNNING, "abc")
    assert SuspensionRequest.parse(request.to_json()) == request


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ("not json", "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"generation": 0, "state": "suspended"}', "'generation' must be a positive"),
        ('{"generation": true, "state": "suspended"}', "'generation' must be a positive"),
        ('{"generation": 1, "state": "frozen"}', "'state' must be 'running' or 'suspended'"),
        ('{"generation": 1, "state": "running", "target": "exported"}', "is not a target"),
        ('{"generation": 1, "state": "running", "target": "gpu:x"}', "'target'"),
        ('{"generation": 1, "state": "running", "reason": 5}', "'reason' must be a string"),
    ],
)
def test_a_bad_desired_state_names_the_annotation_and_field(raw: str, names: str) -> None:
    with pytest.raises(SuspensionError) as info:
        DesiredSuspension.parse(raw)
    assert ANNOTATION_DESIRED in str(info.value) and names in str(info.value)


def test_a_bad_report_names_the_field() -> None:
    with pytest.raises(SuspensionError, match="'outcome' must be one of"):
        ObservedSuspension.parse('{"generation": 1, "state": "running", "outcome": "Maybe"}')
    with pytest.raises(SuspensionError, match="'parkedBytes'"):
        ObservedSuspension.parse(
            '{"generation": 1, "state": "running", "outcome": "Resumed", "parkedBytes": -1}'
        )


def _pod(desired: DesiredSuspension | None, observed: ObservedSuspension | None) -> PodSuspension:
    notes = {}
    if desired is not None:
        notes[ANNOTATION_DESIRED] = desired.to_json()
    if observed is not None:
        notes[ANNOTATION_OBSERVED] = observed.to_json()
    return PodSuspension.of(notes)


def test_what_counts_as_parked() -> None:
    ask = DesiredSuspension(1, State.SUSPENDED, "Manual")
    assert _pod(ask, None).pending and _pod(ask, None).suspended, "asked away: going"
    done = ObservedSuspension(1, State.SUSPENDED, Outcome.SUSPENDED)
    assert not _pod(ask, done).pending and _pod(ask, done).suspended
    refused = ObservedSuspension(1, State.RUNNING, Outcome.REFUSED, error="x")
    assert not _pod(ask, refused).suspended, "a refused suspend left it running"
    back = DesiredSuspension(2, State.RUNNING, "Manual")
    assert not _pod(back, done).suspended, "asked back: coming"
    assert _pod(back, done).next_generation == 3
    assert _pod(None, None) == PodSuspension(None, None)
    garbled = PodSuspension.of({ANNOTATION_DESIRED: "{", ANNOTATION_OBSERVED: "[]"})
    assert garbled == PodSuspension(None, None)


def test_active_replicas_round_trip_and_bad_input_is_named() -> None:
    doc = ActiveReplicas("rollout", 3, 1, (0, 1), (2,))
    assert ActiveReplicas.parse(doc.to_json()) == doc
    assert ActiveReplicas.from_doc(doc.to_doc()) == doc
    with pytest.raises(SuspensionError, match=f"{ANNOTATION_ACTIVE_REPLICAS}: 'active'"):
        ActiveReplicas.parse(
            '{"role":"r","replicas":2,"minReplicas":1,"active":[2],"suspended":[]}'
        )
    with pytest.raises(SuspensionError, match="'minReplicas'"):
        ActiveReplicas.parse('{"role":"r","replicas":2,"active":[],"suspended":[]}')


def test_a_pod_is_active_until_asked_to_park_and_again_only_once_resumed() -> None:
    def state(desired: State | None, observed: State | None, pending: bool) -> PodSuspension:
        d = DesiredSuspension(2 if pending else 1, desired, "Lend") if desired else None
        o = ObservedSuspension(1, observed, Outcome.SUSPENDED) if observed else None
        return PodSuspension(d, o)

    assert state(None, None, False).active
    assert not state(State.SUSPENDED, None, True).active, "asked to park: no new work"
    assert not state(State.SUSPENDED, State.SUSPENDED, False).active
    assert not state(State.RUNNING, State.SUSPENDED, True).active, "not back yet"
    assert state(State.RUNNING, State.RUNNING, False).active


def test_a_resume_the_phase_gate_took_says_its_memory_comes_back_at_its_turn() -> None:
    handed = ObservedSuspension(2, State.RUNNING, Outcome.RESUMED, parked_bytes=4096)
    assert handed.resumed_note() == (
        "; its 4096 parked bytes come back at its turn at the phase gate"
    )
    assert ObservedSuspension(2, State.RUNNING, Outcome.RESUMED).resumed_note() == ""
    failed = ObservedSuspension(2, State.SUSPENDED, Outcome.FAILED, parked_bytes=4096)
    assert failed.resumed_note() == ""
