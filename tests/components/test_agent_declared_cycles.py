"""The phase gate's view of the cycles pods declare (``rlix.io/phase-seconds``),
read from the conducting loop's listing of the node's pods."""

from __future__ import annotations

import json
import logging

import pytest

from rlix.agent.conducting import NodePod
from rlix.agent.declared_cycles import DeclaredCycles
from rlix.agent.phase_gate import PhaseGate
from rlix.core.names import ANNOTATION_PHASE_SECONDS
from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.snapshot import load_profile_of

BUSY = {"training": 100, "weight-sync": 5}  # a colocated trainer: never idles
POOL = {"rollout": 60, "weight-sync": 5, "idle": 55}  # a rollout pool: idles while training


def pod(uid: str, seconds: object | None) -> NodePod:
    notes = {} if seconds is None else {ANNOTATION_PHASE_SECONDS: json.dumps(seconds)}
    return NodePod(uid=uid, namespace="team", name=f"trainer-{uid}", annotations=notes)


def test_nothing_is_declared_before_the_first_listing() -> None:
    assert DeclaredCycles()() == {}


def test_each_pod_s_cycle_comes_from_its_annotation() -> None:
    listing = [pod("a", BUSY), pod("b", POOL), pod("c", None)]
    cycles = DeclaredCycles()
    cycles.follow(lambda: listing)
    assert cycles() == {
        "a": load_profile_of({Phase.TRAINING: 100, Phase.WEIGHT_SYNC: 5}),
        "b": load_profile_of({Phase.ROLLOUT: 60, Phase.WEIGHT_SYNC: 5, Phase.IDLE: 55}),
    }
    listing[:] = [pod("b", BUSY)]  # a new listing replaces the last one whole
    assert cycles() == {"b": load_profile_of({Phase.TRAINING: 100, Phase.WEIGHT_SYNC: 5})}


@pytest.mark.parametrize(
    "bad", [{"idle": 30}, {"decode": 3}, {"training": -1}, "[1, 2]", {"training": {"x": 1}}]
)
def test_a_malformed_value_declares_nothing_and_is_logged_once(
    bad: object, caplog: pytest.LogCaptureFixture
) -> None:
    listing = [pod("a", bad), pod("b", BUSY)]
    cycles = DeclaredCycles()
    cycles.follow(lambda: listing)
    with caplog.at_level(logging.WARNING, logger="rlix.agent.declared_cycles"):
        assert set(cycles()) == {"b"}
        assert set(cycles()) == {"b"}
    [warning] = caplog.records
    assert "team/trainer-a" in warning.getMessage()
    assert ANNOTATION_PHASE_SECONDS in warning.getMessage()


def gate(cycles: DeclaredCycles) -> PhaseGate:
    gpus = {"a": frozenset({0}), "b": frozenset({0})}
    return PhaseGate(
        SharingRules(), 60.0, gpus=lambda: gpus, parked=lambda uid: False, cycles=cycles
    )


def test_the_gate_lets_pods_that_never_idle_co_run_and_shows_their_cycles() -> None:
    cycles = DeclaredCycles()
    cycles.follow(lambda: [pod("a", BUSY), pod("b", BUSY)])
    g = gate(cycles)
    assert g.enter("a", "a0", Phase.TRAINING, lambda w, e: None)
    assert g.enter("b", "b0", Phase.TRAINING, lambda w, e: None)
    assert g.status()["declaredCycles"] == {"a": 105.0, "b": 105.0}


def test_the_gate_makes_pools_that_idle_take_turns() -> None:
    cycles = DeclaredCycles()
    cycles.follow(lambda: [pod("a", POOL), pod("b", POOL)])
    g = gate(cycles)
    assert g.enter("a", "a0", Phase.ROLLOUT, lambda w, e: None)
    assert not g.enter("b", "b0", Phase.ROLLOUT, lambda w, e: None)


def test_the_gate_keeps_its_last_cycles_when_reading_them_fails() -> None:
    listings: list[object] = [[pod("a", BUSY), pod("b", BUSY)]]

    def listing() -> list[NodePod]:
        got = listings[0]
        if isinstance(got, Exception):
            raise got
        assert isinstance(got, list)
        return got

    cycles = DeclaredCycles()
    cycles.follow(listing)
    g = gate(cycles)
    assert g.enter("a", "a0", Phase.TRAINING, lambda w, e: None)
    listings[0] = RuntimeError("listing gone")
    assert g.enter("b", "b0", Phase.TRAINING, lambda w, e: None)


def test_agent_status_names_the_pods_whose_cycles_the_gate_read() -> None:
    from rlix.cli.agent import render_status

    cycles = DeclaredCycles()
    cycles.follow(lambda: [pod("a", BUSY), pod("b", None)])
    status = {
        "node": "n1",
        "pods": {"a": "team/trainer-a", "b": "team/trainer-b"},
        "phaseGate": gate(cycles).status(),
    }
    shown = render_status(status)
    assert "phase gate on" in shown
    assert f"cycles declared ({ANNOTATION_PHASE_SECONDS}): team/trainer-a 105 s;" in shown
    assert "trainer-b" not in shown  # it declares none (and has no process connected)
