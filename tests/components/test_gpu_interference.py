"""hack/gpu-interference.py: the arithmetic and the honest skip, without a GPU."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import (
    assert_skips_without_gpu,
    load_script,
    torch_sees_a_gpu,
)

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "gpu-interference.py"


@pytest.fixture(scope="module")
def gi() -> ModuleType:
    return load_script(SCRIPT, "gpu_interference")


def test_slowdown_is_the_simulators_coefficient(gi: ModuleType) -> None:
    alone = {"compute": 100.0, "memory": 200.0}
    shared = {
        ("compute", "memory"): (50.0, 50.0),  # compute at half speed, memory at a quarter
        ("compute", "compute"): (50.0, 25.0),
    }
    out = gi.summarise(alone, shared)
    # rate_shared = rate_alone / (1 + I)
    assert out["slowdown"]["compute"]["memory"] == 1.0
    assert out["slowdown"]["memory"]["compute"] == 3.0
    # same shape: the mean of the two runs' (1 / fraction) - 1: (2 + 4) / 2 - 1
    assert out["slowdown"]["compute"]["compute"] == 2.0
    assert out["combined_progress"] == {"compute+memory": 0.75, "compute+compute": 0.75}


def test_table_lists_every_pair(gi: ModuleType) -> None:
    alone = dict.fromkeys(gi.SHAPES, 10.0)
    shared = {(s, t): (5.0, 5.0) for i, s in enumerate(gi.SHAPES) for t in gi.SHAPES[i:]}
    text = gi.table(gi.summarise(alone, shared), "title")
    for s in gi.SHAPES:
        assert f"| {s} | 1.00 | 1.00 | 1.00 |" in text
    assert "| memory+network | 1.00 |" in text


@pytest.mark.parametrize("duty", [0.25, 0.5, 0.75])
def test_a_duty_cycle_is_busy_that_share_of_the_time_in_short_bursts(
    gi: ModuleType, duty: float
) -> None:
    rate = 600.0  # TFLOP/s: one 1.1-TFLOP GEMM takes ~1.8 ms
    steps, idle = gi.duty_cycle(rate, "compute", duty)
    busy = steps * gi.STEP_UNITS["compute"] / rate
    assert busy / (busy + idle) == pytest.approx(duty)
    assert gi.BURST_S / 2 <= busy <= gi.BURST_S * 2


def test_pressure_rows_put_the_measured_slowdown_beside_p_times_i(gi: ModuleType) -> None:
    slowdown = {"compute": {"memory": 0.6}, "memory": {"compute": 2.0}}
    alone = {"compute": 100.0, "memory": 400.0}
    # memory at duty 0.5 alone: busy 0.5 of the window, half its full rate
    cycled = {("memory", 0.5): (200.0, 0.5)}
    # beside it the GEMM runs at 80 (I = 0.25, model 0.5 x 0.6 = 0.3); the
    # cycled GEMV's wall rate drops from 200 to 160 (0.25; the model slows it 2.0)
    pairs = {("compute", "memory", 0.5): (80.0, 160.0)}
    (row,) = gi.summarise_pressure(slowdown, alone, cycled, pairs)
    assert row == {
        "victim": "compute",
        "co_runner": "memory",
        "duty": 0.5,
        "pressure": 0.5,
        "victim_slowdown": 0.25,
        "model_p_times_I": 0.3,
        "co_runner_slowdown": 0.25,
        "model_co_runner": 2.0,
        "combined_progress": 1.2,  # 0.8 of the GEMM's GPU + 0.4 of the GEMV's
    }
    text = gi.table(with_rows(gi, pressure=[row]), "title")
    assert "| compute | memory | 0.50 | 0.50 | 0.25 | 0.30 | 0.25 | 2.00 | 1.20 |" in text


def with_rows(gi: ModuleType, **rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A result with an empty full-pressure part, for tables of the pressure rows."""
    return {
        "alone": dict.fromkeys(gi.SHAPES, 1.0),
        "slowdown": {s: dict.fromkeys(gi.SHAPES, 0.0) for s in gi.SHAPES},
        "combined_progress": {},
        **rows,
    }


def test_skips_with_the_reason_when_there_is_no_gpu(tmp_path: Path) -> None:
    if torch_sees_a_gpu():
        pytest.skip("a GPU is present: the skip path cannot be exercised here")
    assert_skips_without_gpu(SCRIPT, tmp_path / "i.json")


def test_two_idling_sides_are_each_judged_against_their_own_rate_alone(gi: ModuleType) -> None:
    slowdown = {"memory": {"memory": 1.0}}
    # each side alone at duty 0.5: rate 50, busy 0.5; side by side 40 each
    cycled = {("memory", 0.5): (50.0, 0.5)}
    pairs = {(("memory", 0.5), ("memory", 0.5)): (40.0, 40.0)}
    (row,) = gi.summarise_both(slowdown, cycled, pairs)
    assert row["slowdown_a"] == row["slowdown_b"] == 0.25
    assert row["jobs_progress"] == 1.6  # 0.8 + 0.8
    # the model stretches the waits too: 1 / (1 + 0.5 x 1.0) each
    assert row["model_a"] == row["model_b"] == 0.5
    assert row["model_jobs_progress"] == pytest.approx(1.333, abs=1e-3)
    # only the busy share stretching: 1 / (1 + 0.5 x 0.5 x 1.0) each
    assert row["busy_only_jobs_progress"] == 1.6
    text = gi.table(with_rows(gi, both_idle=[row]), "title")
    assert "| memory (0.50) | memory (0.50) | 0.50 | 0.50 | 0.25 | 0.25 | 0.50 | 0.50 |" in text


def test_one_worker_runs_alone_while_the_others_are_sent_nothing(gi: ModuleType) -> None:
    from tests.support.echo_worker import echo_worker

    workers = gi.Workers(2, target=echo_worker)
    try:
        # "memory" (6 letters), full pressure (4 steps a burst, no wait), 2 s
        assert workers.run_alone(1, "memory", 2.0) == pytest.approx(6004.02)
        assert workers.run_alone(0, "compute", 1.0, (3, 0.5)) == pytest.approx(7003.51)
        # nothing was left unanswered on either pipe
        assert not workers.conns[0].poll(0.1) and not workers.conns[1].poll(0.1)
    finally:
        workers.close()
