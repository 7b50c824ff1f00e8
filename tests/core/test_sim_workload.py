"""The workload model: costs from physics, long tails, reproducible draws."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from rlix.core.phases import Phase
from rlix.core.sim import hardware as hw
from rlix.core.sim.interference import ASSUMED
from rlix.core.sim.workload import JobProfile, JobSpec, profile_for


def seven_b(**kw: object) -> JobSpec:
    base: dict[str, object] = {"name": "t/a", "model": "7b", "gpus": 8, "iterations": 50}
    base.update(kw)
    return JobSpec(arrival_s=0.0, **base)  # type: ignore[arg-type]


def test_training_and_scoring_time_follow_flops_over_peak() -> None:
    p = JobProfile(seven_b())
    tokens = 128 * 8 * (512 + p.mean_response)
    assert p.training_s == pytest.approx(6 * 7.62e9 * tokens / (8 * 989e12 * 0.35))
    assert p.scoring_s == pytest.approx(4 * 7.62e9 * tokens / (8 * 989e12 * 0.45))
    # Training does 1.5x the FLOPs of scoring at a lower MFU.
    assert p.training_s / p.scoring_s == pytest.approx(1.5 * 0.45 / 0.35)


def test_memory_per_phase_by_hand_for_7b_on_8_gpus() -> None:
    p = JobProfile(seven_b())
    train = 1e9 + 16 * 7.62e9 / 8 + 12e9  # context + Adam states sharded + activations
    assert p.memory_mib[Phase.TRAINING] == math.ceil(train / 2**20)
    # Rollout: context + bf16 weights (TP 1) + KV cache for 128 concurrent sequences.
    kv = 128 * (512 + p.mean_response) * (2 * 28 * 4 * 128 * 2)
    assert p.memory_mib[Phase.ROLLOUT] == math.ceil((1e9 + 2 * 7.62e9 + kv) / 2**20)


def test_rollout_memory_is_capped_at_half_the_gpu() -> None:
    p = JobProfile(seven_b(model="14b"))  # 14B, TP 2: its batch wants more KV than fits
    assert p.memory_bytes[Phase.ROLLOUT] <= 0.5 * hw.H200_MEMORY_MIB * hw.MIB + 1


def test_lengths_are_long_tailed_and_capped() -> None:
    p = JobProfile(seven_b())
    assert 2000 < p.mean_response < 16384  # mean above the median: a right tail
    assert p.length_quantile(0.999999) == 16384  # capped
    assert p.bulk_tokens == pytest.approx(2000 * math.exp(NormalDist().inv_cdf(0.75)))


def test_timeline_is_reproducible_per_seed_and_job() -> None:
    # A cap far out of reach, so the longest response varies per iteration (with
    # the default 16K cap and 1,024 responses it is almost always the cap).
    def job(index: int) -> JobProfile:
        return JobProfile(seven_b(index=index, response_sigma=0.5, max_response=1 << 20))

    a = job(1).timeline(seed=7)
    again = job(1).timeline(seed=7)
    other_job = job(2).timeline(seed=7)
    other_seed = job(1).timeline(seed=8)
    assert a == again
    assert a.durations != other_job.durations
    assert a.durations != other_seed.durations
    assert len(a.durations) == 50 * 5
    assert all(d >= 0 for d in a.durations)
    assert all(0 < x <= 1 for x in a.demands)


def test_profile_cache_shares_costs_but_not_identity() -> None:
    kw = {"response_sigma": 0.5, "max_response": 1 << 20}
    a = profile_for(seven_b(name="t/a", index=1, **kw))
    b = profile_for(seven_b(name="t/b", index=2, **kw))
    assert a.spec.name == "t/a" and b.spec.name == "t/b"
    assert a.training_s == b.training_s == JobProfile(seven_b(**kw)).training_s
    assert a.timeline(0).durations != b.timeline(0).durations


def test_tail_pressure_with_one_sequence_per_replica_matches_a_riemann_sum() -> None:
    # 8 prompts x 1 sample on 8 GPUs: each replica decodes one sequence, so the
    # share of replicas still running at step s is 1 - F(s).
    p = JobProfile(seven_b(prompts=8, samples=1))
    assert p.sequences_per_replica == 1
    q, longest = p.bulk_tokens, 12000.0
    dist = NormalDist(math.log(2000), 1.0)
    n = 20000
    steps = [q + (longest - q) * (i + 0.5) / n for i in range(n)]
    expected = sum(1 - dist.cdf(math.log(s)) for s in steps) / n
    assert p.tail_pressure(longest) == pytest.approx(expected, rel=0.03)
    assert p.tail_pressure(longest) < 0.5  # most replicas are done: GPUs to lend


def test_a_rollout_tail_lends_its_gpus_to_a_training_co_runner() -> None:
    # Hand-computed rates for a training job sharing GPUs with the job above.
    p = JobProfile(seven_b(prompts=8, samples=1))
    tail = p.tail_pressure(12000.0)
    during_bulk = 1 / (1 + 1.0 * ASSUMED.slowdown(Phase.TRAINING, Phase.ROLLOUT))
    during_tail = 1 / (1 + tail * ASSUMED.slowdown(Phase.TRAINING, Phase.ROLLOUT))
    assert during_bulk == pytest.approx(1 / 1.3)
    assert during_tail > during_bulk
    assert during_tail == pytest.approx(1 / (1 + 0.3 * tail))


def test_decode_steps_shrink_as_the_batch_empties_down_to_the_weight_read() -> None:
    p = JobProfile(seven_b())
    weights = p.size.params * 2 / p.size.rollout_tp
    floor = weights / (hw.H200_HBM_BYTES_PER_S * hw.DECODE_BW_EFFICIENCY)
    full = p.decode_step_s(1.0, 2000)
    tail = p.decode_step_s(0.05, 2000)
    assert floor < tail < full
    assert p.decode_step_s(0.0, 2000) == pytest.approx(floor)
    # The tail segment steps faster than the bulk, per token decoded.
    bulk_s, _, tail_s, _ = p.rollout_segments(12000.0)
    assert tail_s / (12000.0 - p.bulk_tokens) < bulk_s / p.bulk_tokens
