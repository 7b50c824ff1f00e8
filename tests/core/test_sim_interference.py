"""The interference matrix: the measured file loads to the shipped default, bad files fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlix.core.phases import Phase, Shape
from rlix.core.sim.interference import ASSUMED, DEFAULT, MEASURED_H200, from_document, from_json

MEASURED = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_interference.json"


def test_the_measured_file_loads_to_the_matrix_the_simulator_ships() -> None:
    doc = json.loads(MEASURED.read_text(encoding="utf-8"))
    loaded = from_document(doc)
    assert loaded.cells == MEASURED_H200.cells
    assert DEFAULT is MEASURED_H200
    # Decode next to training: measured 2.17 where the assumed table said 0.4.
    assert loaded.slowdown(Phase.ROLLOUT, Phase.TRAINING) == pytest.approx(2.17)
    assert ASSUMED.slowdown(Phase.ROLLOUT, Phase.TRAINING) == pytest.approx(0.4)
    assert loaded.slowdown(Phase.IDLE, Phase.TRAINING) == 0.0
    mps = from_document(doc, "mps")
    assert mps.slowdown(Phase.ROLLOUT, Phase.TRAINING) == pytest.approx(6.626)


def test_combined_progress_matches_the_file() -> None:
    doc = json.loads(MEASURED.read_text(encoding="utf-8"))
    combined = doc["time_slicing"]["combined_progress"]["compute+memory"]
    assert MEASURED_H200.combined(Shape.COMPUTE, Shape.MEMORY) == pytest.approx(combined, abs=0.01)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "no time_slicing.slowdown table"),
        ({"time_slicing": {"slowdown": {}}}, "time_slicing.slowdown.compute is missing"),
        (
            {"time_slicing": {"slowdown": {s: {"compute": 1, "memory": 1} for s in
                                           ("compute", "memory", "network")}}},
            "time_slicing.slowdown.compute.network is not a number",
        ),
        (
            {"time_slicing": {"slowdown": {s: {t: -0.5 for t in ("compute", "memory", "network")}
                                           for s in ("compute", "memory", "network")}}},
            "time_slicing.slowdown.compute.compute = -0.5 < 0",
        ),
    ],
)  # fmt: skip
def test_a_malformed_document_is_an_error_naming_the_cell(
    doc: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        from_document(doc)


def test_an_unknown_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="'nvlink'"):
        from_document({}, "nvlink")


def test_a_matrix_files_text_that_is_not_a_json_object_says_so() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        from_json("{time_slicing")
    with pytest.raises(ValueError, match="not a JSON object"):
        from_json("[1, 2]")
    with pytest.raises(ValueError, match=r"mps\.slowdown"):
        from_json('{"time_slicing": {}}', "mps")
