"""The measures that can show a gain, on scenarios small enough to compute by hand."""

from __future__ import annotations

import pytest

from rlix.core.phases import Phase, Shape
from rlix.core.sim.cluster import Cluster
from rlix.core.sim.engine import SimConfig, simulate
from rlix.core.sim.interference import ASSUMED, MEASURED_H200, SHAPES, Interference
from rlix.core.sim.metrics import (
    Recorder,
    _mean_unfinished_s,
    bounds,
    sharing_kappa,
    srpt_completions,
)
from rlix.core.sim.mixes import closed_batch, make_mix
from rlix.core.sim.runs import Run, State
from rlix.core.sim.schedulers import Preemption, QueueOrder, Scheduler, gang_binpack, kube_default
from rlix.core.sim.workload import JobProfile, profile_for
from tests.core.test_sim_helpers import MemoryShare, load_s, mix_of, spec


def test_exclusive_back_to_back_has_capacity_one_less_the_loads() -> None:
    a, b = spec("t/a", 0), spec("t/b", 1)
    result = simulate(mix_of(a, b), kube_default())
    alone = JobProfile(a).timeline(0).total_s
    assert result.capacity == pytest.approx(alone / (alone + load_s(a)))
    # Held the whole makespan: no empty GPU time, and the shares add up to 1.
    shares = result.categories()
    assert shares["empty, jobs waiting"] == pytest.approx(0.0)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert result.closed_per_h == pytest.approx(2 * 3600 / (2 * (alone + load_s(a))))


def test_a_job_too_big_for_the_free_gpus_leaves_them_empty_while_it_waits() -> None:
    # Two 4-GPU jobs, then an 8-GPU one: when the first ends, 4 GPUs sit empty
    # while the 8-GPU job waits for the second.
    short = spec("t/short", 0, gpus=4, iterations=5)
    long = spec("t/long", 1, gpus=4, iterations=20)
    wide = spec("t/wide", 2, arrival=1.0)
    result = simulate(mix_of(short, long, wide), kube_default())
    gap = (load_s(long) + JobProfile(long).timeline(0).total_s) - (
        load_s(short) + JobProfile(short).timeline(0).total_s
    )
    waiting = result.categories()["empty, jobs waiting"] * result.gpus * result.makespan_s
    assert waiting == pytest.approx(4 * gap, rel=1e-6)


def test_per_class_jct_and_top_stretch() -> None:
    low = spec("t/low", 0, priority=0)
    high = spec("t/high", 1, arrival=1.0, priority=10)
    result = simulate(mix_of(low, high), kube_default())  # FIFO, no preemption
    alone = load_s(low) + JobProfile(low).timeline(0).total_s
    classes = result.by_class()
    assert list(classes) == [10, 0]
    assert classes[0][2] == pytest.approx(1.0)
    assert result.top_stretch == pytest.approx((2 * alone - 1.0) / alone)


def test_sharing_kappa_is_the_closed_form() -> None:
    assert sharing_kappa(ASSUMED, 1) == 1.0
    assert sharing_kappa(ASSUMED, 2) == pytest.approx(2 / 1.3)
    assert sharing_kappa(MEASURED_H200, 4) == pytest.approx(4 / (1 + 0.573 * 3))
    # Two saturating kernels that slow each other by more than the time-slice.
    heavy = Interference("heavy", "test", tuple((a, b, 1.2) for a in SHAPES for b in SHAPES))
    assert sharing_kappa(heavy, 8) == 1.0
    assert Shape.NETWORK in SHAPES


@pytest.mark.parametrize("interference", [ASSUMED, MEASURED_H200], ids=["assumed", "measured"])
def test_every_scheduler_stays_within_its_bounds(interference: Interference) -> None:
    config = SimConfig(interference=interference)
    mix = closed_batch(make_mix("small-lab", seed=2, jobs=30))
    share = Scheduler("share", MemoryShare(), QueueOrder.FIFO, Preemption.NONE)
    for scheduler in (kube_default(), gang_binpack(), share):
        result = simulate(mix, scheduler, config)
        limit = bounds(result, config.interference)
        assert result.jobs == 30
        assert limit.exclusive_capacity <= 1.0 < limit.sharing_capacity
        if not scheduler.policy.shares_gpus:
            assert result.capacity <= limit.exclusive_capacity * (1 + 1e-9)
            assert result.closed_per_h <= limit.exclusive_closed_per_h * (1 + 1e-9)
        # 1e-9: the longest job alone can set both bounds, which a run meets
        # up to float rounding.
        assert result.capacity <= limit.sharing_capacity * (1 + 1e-9)
        assert result.closed_per_h <= limit.sharing_closed_per_h * (1 + 1e-9)
        assert result.jct_mean_s >= limit.jct_mean_s
        assert result.top_stretch >= 1.0
        assert sum(result.categories().values()) == pytest.approx(1.0)


def test_the_pair_ceiling_is_rule_5_s_best_same_class_pair_and_never_below_one() -> None:
    from dataclasses import replace

    from rlix.core.policy.placement.sharing import SharingRules, expected_rates
    from rlix.core.sim.metrics import pair_ceiling
    from rlix.core.sim.workload import profile_for

    # The small-lab and agentic mixes' shapes (mixes.py), few iterations.
    busy = spec("t/busy", 0, iterations=3, response_sigma=1.0)
    agentic = spec("t/agent", 1, iterations=3, prompts=64, response_median=3000,
                   response_sigma=1.5, max_response=32768, env_wait=0.35)  # fmt: skip
    # Busy jobs (tail pressure ~0.97) make no pair pay under the measured matrix.
    assert pair_ceiling([busy, replace(busy, name="t/b2")], MEASURED_H200) == 1.0
    rules = SharingRules(MEASURED_H200.cells)
    both = profile_for(agentic).load_profile
    expected = sum(expected_rates(rules, both, both))
    assert expected > 1.0
    assert pair_ceiling([busy, agentic], MEASURED_H200) == 1.0  # one agentic job: no pair
    two = [busy, agentic, replace(agentic, name="t/agent2")]
    assert pair_ceiling(two, MEASURED_H200) == pytest.approx(expected)
    # Rule 3: jobs of different classes never pair, so their pair does not count.
    apart = [agentic, replace(agentic, name="t/agent2", priority=100)]
    assert pair_ceiling(apart, MEASURED_H200) == 1.0
    # The tables' estimates scale the exclusive ones by the ceiling.
    result = simulate(mix_of(busy, agentic), kube_default())
    limit = bounds(result, MEASURED_H200, expected)
    assert limit.pair_capacity == pytest.approx(expected * limit.exclusive_capacity)


def test_srpt_lets_a_shorter_arrival_cut_in_and_scales_with_speed() -> None:
    # A 10-unit job at 0, a 2-unit job at 1: the short one runs 1-3, the long one
    # resumes and ends at 12. At speed 2 the short one ends at 2, the long at 6.
    assert srpt_completions([(0.0, 10.0), (1.0, 2.0)], 1.0) == [12.0, 3.0]
    assert srpt_completions([(0.0, 10.0), (1.0, 2.0)], 2.0) == [6.0, 2.0]
    assert srpt_completions([(5.0, 1.0)], 1.0) == [6.0]  # an idle machine waits


def test_the_unfinished_count_is_the_larger_of_the_two_at_every_instant() -> None:
    # Both jobs count under the second timeline until 5; the first job alone
    # counts until 10 under the first: 2 x 5 + 1 x 5 over two jobs.
    assert _mean_unfinished_s([0.0, 0.0], [10.0, 1.0], [5.0, 5.0]) == pytest.approx(7.5)
    assert _mean_unfinished_s([], [], []) == 0.0


def test_the_queueing_bound_counts_the_wait_a_full_cluster_forces() -> None:
    # Two 8-GPU jobs on one 8-GPU node: whoever goes second waits for the
    # first, so mean JCT >= 1.5 x the alone length; back to back meets it.
    a, b = spec("t/a", 0), spec("t/b", 1)
    result = simulate(mix_of(a, b), kube_default())
    limit = bounds(result, MEASURED_H200)
    alone = load_s(a) + JobProfile(a).timeline(0).total_s
    assert limit.jct_mean_s == pytest.approx(alone)
    assert limit.exclusive_jct_mean_s == pytest.approx(1.5 * alone)
    assert result.jct_mean_s == pytest.approx(limit.exclusive_jct_mean_s)
    # Sharing may overlap them, so its bound is lower, never below alone.
    assert alone <= limit.sharing_jct_mean_s < limit.exclusive_jct_mean_s


@pytest.mark.parametrize("interference", [ASSUMED, MEASURED_H200], ids=["assumed", "measured"])
def test_open_arrivals_stay_within_the_queueing_bounds(interference: Interference) -> None:
    config = SimConfig(interference=interference)
    mix = make_mix("small-lab", seed=1, jobs=30)
    share = Scheduler("share", MemoryShare(), QueueOrder.FIFO, Preemption.NONE)
    for scheduler in (kube_default(), gang_binpack(), share):
        result = simulate(mix, scheduler, config)
        limit = bounds(
            simulate(closed_batch(mix), scheduler, config), interference, arrivals=result
        )
        assert limit.exclusive_jct_mean_s >= limit.sharing_jct_mean_s >= limit.jct_mean_s
        if not scheduler.policy.shares_gpus:
            assert result.jct_mean_s >= limit.exclusive_jct_mean_s * (1 - 1e-9)
        assert result.jct_mean_s >= limit.sharing_jct_mean_s * (1 - 1e-9)


def test_a_tail_lends_what_the_share_says_of_its_rollout_gpus() -> None:
    from array import array

    from rlix.core.sim.workload import Timeline

    # Three iterations of bulk, tail, scoring, training, weight sync: only tails count.
    timeline = Timeline.build(
        array("d", [10.0, 20.0, 5.0, 5.0, 1.0] * 3),
        array("d", [1.0, 0.25, 1.0, 1.0, 1.0] * 3),
        array("d", [1.0] * 15),
    )
    seen: list[float] = []

    def share(demand: float) -> float:
        seen.append(demand)
        return 0.5

    assert timeline.lendable_gpu_s(4, share) == pytest.approx(3 * 20 * 4 * 0.5)
    assert seen == [0.25, 0.25, 0.25]
    assert timeline.lendable_gpu_s(0, share) == 0.0


def test_a_consolidated_tail_frees_only_the_weight_reads_of_the_replicas_it_leaves() -> None:
    from dataclasses import replace

    from rlix.core.sim.workload import WEIGHT_BYTES_PER_PARAM, profile_for

    job = spec("t/lend", 0, gpus=8)
    p = profile_for(job)
    assert p.replicas == 8 and p.size.rollout_tp == 1
    d = 0.05  # a twentieth of the batch still decoding: one replica of eight holds it
    longest = p.bulk_tokens + p.tail_excess_tokens / d
    context = job.prompt_tokens + (p.bulk_tokens + longest) / 2
    weights = p.size.params * WEIGHT_BYTES_PER_PARAM
    kv = d * p.batch_per_replica * context * p.size.kv_bytes_per_token
    assert p.tail_lend_share(d) == pytest.approx((1 - 1 / 8) * weights / (weights + kv))
    # Slower steps on the kept replica: it frees less than the GPUs it leaves.
    assert 0 < p.tail_lend_share(d) < 1 - 1 / 8
    # More of the batch working: more replicas kept, less freed; all of it: nothing.
    assert p.tail_lend_share(0.5) < p.tail_lend_share(d)
    assert p.tail_lend_share(1.0) == 0.0
    assert p.tail_lend_share(0.0) == 0.0
    # Tool waits: the demand counts working time, the sequences waiting keep their KV.
    waits = profile_for(replace(job, env_wait=0.5))
    assert waits.tail_lend_share(d * 0.5) == pytest.approx(p.tail_lend_share(d))
    # One replica (tensor parallel over the whole pool) lends nothing.
    assert profile_for(spec("t/one", 1, gpus=1)).tail_lend_share(d) == 0.0


def test_the_lend_estimates_sit_between_exclusive_and_sharing() -> None:
    from dataclasses import replace

    mix = closed_batch(make_mix("small-lab", seed=1, jobs=20))
    result = simulate(mix, gang_binpack())
    limit = bounds(result, MEASURED_H200)
    assert result.lendable_gpu_s == pytest.approx(sum(result.lendable_s))
    assert 0 < result.lendable_gpu_s < result.progress_gpu_s
    held = result.progress_gpu_s + result.load_gpu_s
    assert limit.lend_capacity == pytest.approx(
        result.progress_gpu_s / (held - result.lendable_gpu_s)
    )
    assert limit.exclusive_capacity < limit.lend_capacity
    assert limit.exclusive_closed_per_h <= limit.lend_closed_per_h
    assert limit.jct_mean_s <= limit.lend_jct_mean_s <= limit.exclusive_jct_mean_s
    assert 1.0 <= limit.lend_top_stretch <= limit.exclusive_top_stretch
    # Nothing to lend: the estimates are the exclusive bounds.
    none = replace(result, lendable_s=(0.0,) * len(result.lendable_s), lendable_gpu_s=0.0)
    flat = bounds(none, MEASURED_H200)
    assert flat.lend_capacity == pytest.approx(flat.exclusive_capacity)
    assert flat.lend_closed_per_h == pytest.approx(flat.exclusive_closed_per_h)
    assert flat.lend_top_stretch == pytest.approx(flat.exclusive_top_stretch, rel=1e-6)


def test_a_loading_job_counts_at_the_phase_it_loads_into_for_memory_over_the_gpu() -> None:
    # Two 7B jobs on the same eight GPUs, each alone well within the GPU, both
    # together above it. A restore beside a partner is when a real GPU is most
    # likely to run short, so a job still loading counts with the memory of
    # the phase it loads into; a queued job holds nothing.
    running = Run(spec("a", 0), profile_for(spec("a", 0)), 0)
    loading = Run(spec("b", 1), profile_for(spec("b", 1)), 1)
    own = running.profile.memory_mib[Phase.ROLLOUT]
    cluster = Cluster(1, 8, memory_mib=own + own // 2, shares=True)
    for run in (running, loading):
        run.timeline = run.profile.timeline(0)
        run.placements = [(0, tuple(range(8)))]
        cluster.attach(run)
    recorder = Recorder(cluster, [running, loading], own + own // 2, 1)

    running.state, loading.state = State.RUNNING, State.QUEUED
    recorder.sample(0.0)
    running.state, loading.state = State.RUNNING, State.LOADING
    recorder.sample(300.0)
    assert [s[4] for s in recorder.samples] == [0.0, 1.0]
    assert loading.phase_at(300.0) is Phase.ROLLOUT  # frozen at its start while it loads
