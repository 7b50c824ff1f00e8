"""The matrix file the extender, the operator and the agent's gate all read."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from rlix.core.policy.placement import rules_file
from rlix.core.policy.placement.sharing import DEFAULT_RULES, MEASURED_H200_CELLS, SharingRules

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
    assert "what it changes" in parser.format_help()
    assert json.loads(MEASURED.read_text())  # the example the help names exists
