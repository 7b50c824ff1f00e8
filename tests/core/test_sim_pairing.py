"""The best pairing of a mix's pods (rlix.core.sim.pairing): the tables' "pairs" factor."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlix.core.phases import Shape
from rlix.core.policy.placement.sharing import SharingRules, pair_rates
from rlix.core.sim import hardware as hw
from rlix.core.sim.interference import DEFAULT, SHAPES, Interference
from rlix.core.sim.metrics import pair_ceiling
from rlix.core.sim.mixes import make_mix
from rlix.core.sim.pairing import pairing_factor, pod_kinds
from rlix.core.sim.workload import JobSpec, profile_for
from tests.core.test_sim_helpers import spec

# Every pair of shapes slows each other by half: two busy pods make 1.33 GPUs.
PAYS = Interference("pays", "test", tuple((a, b, 0.5) for a in SHAPES for b in SHAPES))


def _rates(a: JobSpec, b: JobSpec, matrix: Interference) -> tuple[float, float]:
    pa, pb = profile_for(a), profile_for(b)
    rules = SharingRules(matrix.cells)
    none = frozenset[Shape]()
    rates = pair_rates(rules, (none, pa.load_profile, pa.iteration_s),
                       (none, pb.load_profile, pb.iteration_s))  # fmt: skip
    assert rates is not None
    return rates


def test_no_paying_pair_gives_one() -> None:
    # Colocated 7B jobs under the measured matrix: a pair delivers ~0.91 GPUs.
    jobs = [(spec("t/a", 0), 1000.0), (spec("t/b", 1), 1000.0)]
    assert pairing_factor(jobs, DEFAULT) == 1.0


def test_one_kind_that_pairs_with_itself_reaches_the_ceiling() -> None:
    a, b = spec("t/a", 0), spec("t/b", 1)
    factor = pairing_factor([(a, 1000.0), (b, 1000.0)], PAYS)
    assert factor == pytest.approx(sum(_rates(a, b, PAYS)), rel=1e-6)
    assert factor == pytest.approx(pair_ceiling([a, b], PAYS), rel=1e-6)


def test_a_scarce_partner_runs_out_and_the_rest_runs_alone() -> None:
    # One long 14B job and one short 1.5B job, each of its own kind: they can
    # only pair with each other (one job per kind, and a job's pods never pair
    # among themselves), so the pair lasts until the short one's work is done
    # and the long one finishes alone.
    big, small = spec("t/big", 0, model="14b"), spec("t/small", 1, model="1.5b", gpus=1)
    w_big, w_small = 8 * 10_000.0, 1 * 1_000.0
    r_big, r_small = _rates(big, small, PAYS)
    paired = min(w_small / r_small, w_big / r_big)
    total = paired + (w_big - r_big * paired) + (w_small - r_small * paired)
    expected = (w_big + w_small) / total
    factor = pairing_factor([(big, 10_000.0), (small, 1_000.0)], PAYS)
    assert factor == pytest.approx(expected, rel=1e-6)
    # Far below the ceiling, which assumes every second has its best partner.
    assert 1.0 < factor < pair_ceiling([big, small], PAYS) - 0.1
    # More partner work, more of the long job runs paired.
    more = [(big, 10_000.0), (small, 1_000.0), (replace(small, name="t/s2"), 1_000.0)]
    assert pairing_factor(more, PAYS) > factor


def test_pods_of_one_job_never_pair_and_classes_never_mix() -> None:
    # A disaggregated job's rollout and trainer pods take turns perfectly, but
    # they are one job: alone it has no partner.
    one = spec("t/d", 0, model="1.5b", gpus=4, rollout_gpus=2)
    assert pairing_factor([(one, 1000.0)], DEFAULT) == 1.0
    assert pairing_factor([(one, 1000.0), (replace(one, name="t/d2"), 1000.0)], DEFAULT) > 1.5
    # Rule 3: two classes never share a GPU.
    apart = [(one, 1000.0), (replace(one, name="t/d2", priority=100), 1000.0)]
    assert pairing_factor(apart, DEFAULT) == 1.0


def test_work_is_pod_gpus_times_alone_seconds() -> None:
    job = spec("t/d", 0, model="7b", gpus=8, rollout_gpus=4)
    work, owners = pod_kinds([(job, 100.0)])
    assert sum(work.values()) == pytest.approx(8 * 100.0)
    assert all(o == {0} for o in owners.values())


def test_a_pair_counts_only_where_both_peaks_fit_one_gpu() -> None:
    # Both pods stay resident whether they drift or take turns, so the pair
    # needs both peaks at once, as the partner test (kinds_may_pair) asks.
    # A colocated 14B job sits at 18,478 MiB per GPU in weight sync and 71,886
    # in rollout; a 32B job's rollout pod holds 71,886 throughout: their
    # smallest phases fit one H200 together, their peaks miss by 1 MiB, and
    # the matrix alone would call the pair paying (0.67 + 0.67 GPUs).
    jobs = make_mix("disaggregated", seed=0).jobs
    dis = next(j for j in jobs if j.model == "32b" and j.rollout_gpus)
    col14 = next(j for j in jobs if j.model == "14b" and not j.rollout_gpus)
    rollout = profile_for(dis).pod_memory_mib("rollout")
    ref = profile_for(col14).pod_memory_mib("actor-rollout-ref")
    assert min(ref.values()) + max(rollout.values()) <= hw.H200_MEMORY_MIB
    assert max(ref.values()) + max(rollout.values()) == hw.H200_MEMORY_MIB + 1
    assert pairing_factor([(dis, 1000.0), (col14, 1000.0)], DEFAULT) == 1.0
    assert pair_ceiling([dis, col14], DEFAULT) == 1.0
    # A colocated 7B job peaks at 41,071 MiB: beside the same pod, it counts.
    col7 = next(j for j in jobs if j.model == "7b" and not j.rollout_gpus)
    assert pairing_factor([(dis, 1000.0), (col7, 1000.0)], DEFAULT) > 1.0
    assert pair_ceiling([dis, col7], DEFAULT) > 1.3
