"""The phase gate's view of the memory peak each pod declares
(``rlix.io/gpu-memory-mib``), read from the conducting loop's listing of the
node's pods: read at every event the gate decides on, parsed once per
distinct declaration."""

from __future__ import annotations

import json

import pytest

from rlix.agent import gate_parking, overruns
from rlix.agent.conducting import NodePod
from rlix.agent.gate_parking import DeclaredPeaks
from rlix.core import names


def pod(uid: str, memory: object | None, **more: str) -> NodePod:
    notes = dict(more)
    if memory is not None:
        notes[names.ANNOTATION_GPU_MEMORY_MIB] = json.dumps(memory)
    return NodePod(uid=uid, namespace="team", name=f"rollout-{uid}", annotations=notes)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods whose declarations were parsed, in order."""
    seen: list[str] = []

    def counted(p: NodePod) -> int | None:
        seen.append(p.uid)
        return overruns.budget_mib(p)

    monkeypatch.setattr(gate_parking, "budget_mib", counted)
    return seen


def test_nothing_is_declared_before_the_first_listing() -> None:
    assert DeclaredPeaks()() == {}


def test_each_pod_s_peak_is_its_largest_phase_and_a_new_listing_replaces_the_last(
    parses: list[str],
) -> None:
    listing = [pod("a", {"rollout": 20_000, "training": 30_000}), pod("b", 10_000), pod("c", None)]
    peaks = DeclaredPeaks()
    peaks.follow(lambda: listing)
    assert peaks() == {"a": 30_000, "b": 10_000}
    listing[:] = [pod("b", 12_000)]
    assert peaks() == {"b": 12_000}


def test_each_declaration_is_parsed_once_while_a_listed_pod_carries_it(
    parses: list[str],
) -> None:
    listing = [pod("a", 30_000), pod("b", 10_000)]
    peaks = DeclaredPeaks()
    peaks.follow(lambda: listing)
    for _ in range(3):
        assert peaks() == {"a": 30_000, "b": 10_000}
    assert parses == ["a", "b"]
    # Another annotation changes what the pod declares as a whole: read again.
    listing[1] = pod("b", 10_000, **{names.ANNOTATION_PHASE: "training"})
    assert peaks() == {"a": 30_000, "b": 10_000}
    assert parses == ["a", "b", "b"]
    listing[:] = [pod("a", 30_000)]
    peaks()
    listing.append(pod("b", 10_000))  # dropped while unlisted: parsed anew
    peaks()
    assert parses == ["a", "b", "b", "b"]


def test_a_pod_with_any_malformed_declaration_declares_no_peak(parses: list[str]) -> None:
    listing = [
        pod("a", "{not json"),
        pod("b", 10_000, **{names.ANNOTATION_PRIORITY: "urgent-ish"}),
        pod("c", 5_000),
    ]
    peaks = DeclaredPeaks()
    peaks.follow(lambda: listing)
    assert peaks() == {"c": 5_000}
    assert peaks() == {"c": 5_000}
    assert parses == ["a", "b", "c"]  # and the bad ones are not parsed again
