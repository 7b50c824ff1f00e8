"""The matrix file the extender, the operator and the agent's gate all read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from rlix.core.phases import Phase
from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.sharing import (
    DEFAULT_RULES,
    MEASURED_H200_CELLS,
    TIME_SLICING_CELLS,
    SharingRules,
    takes_turns,
)
from rlix.core.snapshot import PhaseLoad

MEASURED = Path(__file__).resolve().parents[2] / "bench/results/gpu_interference.json"


def test_the_shipped_measurement_reads_as_the_cells_the_policy_ships() -> None:
    assert rules_file.read_matrix(MEASURED) == MEASURED_H200_CELLS
    assert rules_file.read_matrix(MEASURED, "mps") != MEASURED_H200_CELLS


def test_a_matrix_keeps_every_other_rule_of_the_default_it_is_given() -> None:
    assert rules_file.rules_from(None, "time_slicing", default=DEFAULT_RULES) is DEFAULT_RULES
    strict = SharingRules(interference=None, max_jobs_per_gpu=3, max_protected_stretch=1.1)
    given = rules_file.rules_from(MEASURED, "time_slicing", default=strict)
    assert given == SharingRules(max_jobs_per_gpu=3, max_protected_stretch=1.1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"time_slicing": {}}', "no time_slicing.slowdown table"),
        ('{"time_slicing": {"slowdown": {"compute": {"compute": -1}}}}', "compute.compute = -1"),
    ],
)
def test_a_bad_file_is_named_with_why(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"^--interference {path}: ") as caught:
        rules_file.rules_from(path, "time_slicing", default=DEFAULT_RULES)
    assert words in str(caught.value)
    with pytest.raises(ValueError, match="No such file"):
        rules_file.read_matrix(tmp_path / "missing.json")


def test_the_log_line_says_which_rules_and_whose_matrix() -> None:
    assert rules_file.describe(DEFAULT_RULES, None, "time_slicing").startswith(
        "sharing rules 1-3 (no interference matrix"
    )
    line = rules_file.describe(SharingRules(), MEASURED, "mps")
    assert f"interference matrix from {MEASURED} (mps)" in line and ">= 1.33 GPUs" in line
    assert "the shipped H200 measurement" in rules_file.describe(SharingRules(), None, "mps")


def test_the_flags_and_their_modes() -> None:
    parser = argparse.ArgumentParser()
    rules_file.add_arguments(parser, "what it changes")
    args = parser.parse_args([])
    assert (args.interference, args.interference_mode) == (None, "time_slicing")
    args = parser.parse_args(["--interference", "m.json", "--interference-mode", "mps"])
    assert (args.interference, args.interference_mode) == (Path("m.json"), "mps")
    said = " ".join(parser.format_help().split())
    assert "what it changes" in said
    assert "or time-slicing: the built-in bound" in said
    assert json.loads(MEASURED.read_text())  # the example the help names exists


def test_time_slicing_names_the_built_in_bound_instead_of_a_file() -> None:
    parser = argparse.ArgumentParser()
    rules_file.add_arguments(parser, "what it changes")
    assert parser.parse_args(["--interference", "time-slicing"]).interference == "time-slicing"
    # A file of that name is still reachable by a path.
    local = parser.parse_args(["--interference", "./time-slicing"]).interference
    assert local == Path("time-slicing")
    strict = SharingRules(interference=None, max_jobs_per_gpu=3)
    given = rules_file.rules_from("time-slicing", "time_slicing", default=strict)
    assert given == SharingRules(interference=TIME_SLICING_CELLS, max_jobs_per_gpu=3)
    line = rules_file.describe(given, "time-slicing", "time_slicing")
    assert "the built-in time-slicing bound" in line
    # Kernels of two processes run side by side under MPS: the bound says nothing there.
    refused = "holds only for --interference-mode time_slicing, not mps"
    with pytest.raises(ValueError, match=refused):
        rules_file.rules_from("time-slicing", "mps", default=DEFAULT_RULES)


def test_without_the_nodes_gate_pairs_are_judged_as_they_drift() -> None:
    """``--no-phase-gate`` (the chart's, where ``nodeAgent.phaseGate.enabled``
    is false): rule 5 judges two pods that idle part of their cycle as they
    run without a gate, drifting, not as the gate would make them take
    turns; ``--park-at-gate`` says the opposite, so the two are refused together."""
    parser = argparse.ArgumentParser()
    rules_file.add_arguments(parser, "what it changes")
    gated = rules_file.from_args(
        parser.parse_args(["--interference", str(MEASURED)]), default=DEFAULT_RULES
    )
    drifting = rules_file.from_args(
        parser.parse_args(["--interference", str(MEASURED), "--no-phase-gate"]),
        default=DEFAULT_RULES,
    )
    assert gated.phase_gate and not drifting.phase_gate
    assert drifting == SharingRules(phase_gate=False)
    # A disaggregated pair: each pool idles while the other works.
    rollout = (PhaseLoad(Phase.ROLLOUT, 0.5, 1.0), PhaseLoad(Phase.IDLE, 0.5, 0.0))
    training = (PhaseLoad(Phase.TRAINING, 0.5, 1.0), PhaseLoad(Phase.IDLE, 0.5, 0.0))
    assert takes_turns(gated, rollout, 100.0, training, 100.0)
    assert not takes_turns(drifting, rollout, 100.0, training, 100.0)
    assert "as its pods drift (the nodes run no phase gate)" in rules_file.describe(
        drifting, MEASURED, "time_slicing"
    )
    assert "taking turns where the nodes' phase gate would" in rules_file.describe(
        gated, MEASURED, "time_slicing"
    )
    both = parser.parse_args(["--park-at-gate", "--no-phase-gate"])
    with pytest.raises(ValueError, match="give one"):
        rules_file.from_args(both, default=DEFAULT_RULES)
    # The agent runs the gate itself: it has neither flag from here.
    agent = argparse.ArgumentParser()
    rules_file.add_arguments(agent, "what it changes", park_at_gate=False)
    assert not hasattr(agent.parse_args([]), "no_phase_gate")
