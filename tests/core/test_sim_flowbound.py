"""The width-aware flow-time bound (rlix.core.sim.flowbound) on cases solved by hand."""

from __future__ import annotations

import pytest

from rlix.core.sim.engine import SimConfig, simulate
from rlix.core.sim.flowbound import FlowJob, min_weighted_flow_s
from rlix.core.sim.interference import MEASURED_H200
from rlix.core.sim.metrics import flow_bounds, queueing_jct_s, sharing_kappa
from rlix.core.sim.mixes import make_mix
from rlix.core.sim.schedulers import Preemption, QueueOrder, Scheduler, gang_binpack, kube_default
from tests.core.test_sim_helpers import MemoryShare

# Slots cost at most about half a slot per job, so the hand-solved values are
# met from below within that (the default 2,400 slots over the horizon).
SLACK = 0.01


def test_a_job_alone_takes_its_own_length() -> None:
    job = FlowJob(arrival_s=50.0, work=800.0, rate=8, length_s=100.0)
    assert min_weighted_flow_s([job], 128) == pytest.approx(100.0)


def test_wide_jobs_queue_for_the_gpus_they_need() -> None:
    # Four 8-GPU jobs of length 1,000 s on 16 GPUs, all at 0: at most two run at
    # a time, so the best mean is (1 + 1 + 2 + 2) / 4 = 1.5 lengths. Running them
    # at half speed side by side does no better (each then finishes at 2).
    jobs = [FlowJob(0.0, 8_000.0, 8, 1_000.0) for _ in range(4)]
    mean = min_weighted_flow_s(jobs, 16) / 4
    assert 1_500.0 * (1 - SLACK) <= mean <= 1_500.0


def test_the_counting_bound_lets_a_wide_job_use_the_whole_cluster() -> None:
    # The same four jobs under the counting bound: SRPT on one 16-GPU machine
    # finishes them at 0.5, 1, 1.5 and 2 lengths, and each counts for its own
    # length at least: (4 x 1 + 2 x 0.5 + 1 x 0.5) / 4 = 1.375 lengths, below 1.5.
    from rlix.core.sim.metrics import _mean_unfinished_s, srpt_completions

    arrivals = [0.0] * 4
    counted = _mean_unfinished_s(
        arrivals, [1_000.0] * 4, srpt_completions([(0.0, 8_000.0)] * 4, 16)
    )
    assert counted == pytest.approx(1_375.0)
    jobs = [FlowJob(0.0, 8_000.0, 8, 1_000.0) for _ in range(4)]
    assert min_weighted_flow_s(jobs, 16) / 4 > counted


def test_a_short_arrival_may_cut_in_and_stretch_weighs_it() -> None:
    # One 8-GPU machine. A 1,000 s job at 0, a 100 s job at 500. The best real
    # schedule parks the long one for the short: (1,100 + 100) / 2 = 600 s. The
    # relaxation sees the long job's units at mean time 550, so it charges it
    # 550 + 500 = 1,050, not 1,100 (a paused job's cost it cannot see): 575 s,
    # still a lower bound, and far above running them in arrival order (800 s).
    long = FlowJob(0.0, 8_000.0, 8, 1_000.0)
    short = FlowJob(500.0, 800.0, 8, 100.0)
    mean = min_weighted_flow_s([long, short], 8) / 2
    assert 575.0 * (1 - SLACK) <= mean <= 575.0
    # Stretch, the same way: (1,050 / 1,000 + 100 / 100) / 2.
    weighted = [FlowJob(0.0, 8_000.0, 8, 1_000.0, 1 / 1_000), FlowJob(500.0, 800.0, 8, 100.0, 0.01)]
    stretch = min_weighted_flow_s(weighted, 8) / 2
    assert 1.025 * (1 - SLACK) <= stretch <= 1.025


def test_a_job_cannot_finish_before_its_length_even_with_little_work() -> None:
    # Sharing's units: a job whose net work is small (a long, light rollout tail)
    # still takes its whole alone length.
    job = FlowJob(0.0, work=100.0, rate=8, length_s=1_000.0)
    assert min_weighted_flow_s([job], 8) == pytest.approx(1_000.0)


def test_impossible_jobs_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="length >= work / rate"):
        FlowJob(0.0, work=8_000.0, rate=8, length_s=10.0)
    with pytest.raises(ValueError, match="capacity must be positive"):
        min_weighted_flow_s([FlowJob(0.0, 1.0, 1, 1.0)], 0)
    assert min_weighted_flow_s([], 8) == 0.0


def test_every_scheduler_s_jct_and_stretch_stay_above_the_bound() -> None:
    config = SimConfig(interference=MEASURED_H200)
    mix = make_mix("small-lab", seed=1, jobs=30)
    share = Scheduler("share", MemoryShare(), QueueOrder.FIFO, Preemption.NONE)
    for scheduler in (kube_default(), gang_binpack(), share):
        result = simulate(mix, scheduler, config)
        kappa = sharing_kappa(MEASURED_H200, result.max_residents)
        flow = flow_bounds(result, kappa, 1.0)
        excl, _, shared = flow.jct_mean_s
        assert shared <= excl
        if not scheduler.policy.shares_gpus:
            assert result.jct_mean_s >= excl
            assert result.top_stretch >= flow.top_stretch[0]
        assert result.jct_mean_s >= shared
        assert result.top_stretch >= flow.top_stretch[2] >= 1.0
        # On a queueing mix the width-aware bound is the tighter of the two.
        assert excl > queueing_jct_s(result, kappa, 1.0)[0]
