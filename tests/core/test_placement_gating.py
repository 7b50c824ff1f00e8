"""The phase gate (rlix.core.policy.placement.gating) and where the sharing rules use it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlix.core.phases import Phase, Shape
from rlix.core.policy.placement.gating import gains_by_entering, gated_rates, idles, rates
from rlix.core.policy.placement.sharing import (
    ASSUMED_CELLS,
    SharingRules,
    expected_rates,
    pair_rates,
    takes_turns,
)
from rlix.core.snapshot import PhaseLoad

MEASURED = SharingRules()  # the measured H200 matrix


def cycle(busy: Phase, share: float, pressure: float = 1.0) -> tuple[PhaseLoad, ...]:
    """A pod busy for ``share`` of its iteration and idle the rest."""
    return (PhaseLoad(busy, share, pressure), PhaseLoad(Phase.IDLE, 1.0 - share, 0.0))


def test_a_gpu_s_rates_follow_the_matrix() -> None:
    # A GEMV (memory) beside a GEMM (compute) on the measured H200:
    # 1 / (1 + 2.17) and 1 / (1 + 0.573).
    memory, compute = rates(MEASURED, [(Shape.MEMORY, 1.0), (Shape.COMPUTE, 1.0)])
    assert memory == pytest.approx(1 / 3.17)
    assert compute == pytest.approx(1 / 1.573)
    assert rates(MEASURED, [(Shape.COMPUTE, 1.0)]) == [1.0]


@pytest.mark.parametrize(
    ("entering", "holder", "enters"),
    [
        # Two busy kernels make 0.95 GPUs together: one waits for the other.
        ((Shape.MEMORY, 1.0), (Shape.COMPUTE, 1.0), False),
        ((Shape.COMPUTE, 1.0), (Shape.COMPUTE, 1.0), False),
        # A copy beside a kernel costs the kernel almost nothing.
        ((Shape.NETWORK, 1.0), (Shape.COMPUTE, 1.0), True),
        ((Shape.COMPUTE, 1.0), (Shape.NETWORK, 1.0), True),
        # Rollouts waiting on tools (pressure 0.65) overlap: 2 / (1 + 0.65 x 1.228).
        ((Shape.MEMORY, 0.65), (Shape.MEMORY, 0.65), True),
    ],
)
def test_a_pod_enters_only_where_that_adds_progress(
    entering: tuple[Shape, float], holder: tuple[Shape, float], enters: bool
) -> None:
    assert gains_by_entering(MEASURED, entering, [holder]) is enters
    assert gains_by_entering(MEASURED, entering, []) is True  # nobody working there


def test_two_pods_busy_half_their_cycle_settle_into_turns() -> None:
    # Each works half its cycle: gated, each works while the other idles, both
    # at full speed. Drifting side by side they meet in busy phases.
    half = cycle(Phase.TRAINING, 0.5)
    gated = gated_rates(MEASURED, half, half, 100.0, 100.0)
    assert gated == pytest.approx((1.0, 1.0), abs=0.01)
    assert sum(expected_rates(MEASURED, half, half)) < 1.8


def test_busier_pods_share_the_gpu_in_proportion() -> None:
    # Busy 60% each: the GPU is the bottleneck, 0.6 r + 0.6 r = 1, r = 1 / 1.2.
    busy = cycle(Phase.TRAINING, 0.6)
    a, b = gated_rates(MEASURED, busy, busy, 100.0, 100.0)
    assert a + b == pytest.approx(2 / 1.2, rel=0.02)


def test_turns_need_idle_time_lengths_and_the_gate_on() -> None:
    half, always = cycle(Phase.ROLLOUT, 0.5), (PhaseLoad(Phase.TRAINING, 1.0),)
    assert idles(half) and not idles(always)
    assert takes_turns(MEASURED, half, 100.0, half, 100.0)
    # A pod that never idles leaves nothing to fill; unknown lengths, no estimate.
    assert not takes_turns(MEASURED, always, 100.0, always, 100.0)
    assert not takes_turns(MEASURED, half, 0.0, half, 100.0)
    assert not takes_turns(replace(MEASURED, phase_gate=False), half, 100.0, half, 100.0)
    assert not takes_turns(SharingRules(interference=None), half, 100.0, half, 100.0)


def test_a_long_busy_phase_beside_a_short_cycle_is_left_to_drift() -> None:
    # A short cycle that works 30% beside a long one that works 80%: gated, the
    # short one waits out the long phase; drifting pays better, so no turns.
    short, long = cycle(Phase.ROLLOUT, 0.3), cycle(Phase.TRAINING, 0.8)
    gated = sum(gated_rates(MEASURED, short, long, 100.0, 3_000.0))
    drift = sum(expected_rates(MEASURED, short, long))
    assert gated < drift
    assert not takes_turns(MEASURED, short, 100.0, long, 3_000.0)


def test_the_rules_judge_a_gated_pair_by_its_turns() -> None:
    half = cycle(Phase.TRAINING, 0.5)
    traits = (frozenset({Shape.COMPUTE}), half, 100.0)
    assert pair_rates(MEASURED, traits, traits) == gated_rates(MEASURED, half, half, 100.0, 100.0)
    unknown = (frozenset({Shape.COMPUTE}), half, 0.0)
    assert pair_rates(MEASURED, unknown, unknown) == expected_rates(MEASURED, half, half)
    # Under the literature's kinder matrix a GEMV beside a GEMM makes 1 / 1.4 +
    # 1 / 1.3 = 1.48 GPUs: the gate lets them co-run.
    assumed = SharingRules(ASSUMED_CELLS)
    assert gains_by_entering(assumed, (Shape.MEMORY, 1.0), [(Shape.COMPUTE, 1.0)])
