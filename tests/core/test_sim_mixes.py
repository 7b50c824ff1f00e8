"""Workload mixes: deterministic, and with the offered load they claim."""

from __future__ import annotations

from collections import Counter

import pytest

from rlix.core.phases import Phase
from rlix.core.sim import hardware as hw
from rlix.core.sim.mixes import BURST, DAY_S, MIXES, expected_gpu_s, make_mix
from rlix.core.sim.workload import profile_for


@pytest.mark.parametrize("name", ["small-lab", "mixed-tenants", "agentic"])
def test_offered_load_matches_the_definition(name: str) -> None:
    mix = make_mix(name, seed=0)
    window = max(j.arrival_s for j in mix.jobs)
    offered = sum(expected_gpu_s(j) for j in mix.jobs) / (window * mix.nodes * mix.gpus_per_node)
    # Uniform arrivals: the last one lands within a few percent of the window's end.
    assert offered == pytest.approx(mix.load, rel=0.05)
    assert [j.arrival_s for j in mix.jobs] == sorted(j.arrival_s for j in mix.jobs)


def test_mixes_are_reproducible_and_seed_dependent() -> None:
    assert make_mix("agentic", seed=5) == make_mix("agentic", seed=5)
    assert make_mix("agentic", seed=5).jobs != make_mix("agentic", seed=6).jobs


def test_mixed_tenants_has_protected_prod_and_preemptible_others() -> None:
    jobs = make_mix("mixed-tenants", seed=0).jobs
    prod = [j for j in jobs if j.tenant == "prod"]
    assert prod and all(j.priority == 100 and not j.preemptible for j in prod)
    assert all(j.preemptible for j in jobs if j.tenant != "prod")


def test_unknown_mix_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="small-lab"):
        make_mix("nope")
    assert set(MIXES) == {
        "small-lab",
        "mixed-tenants",
        "agentic",
        "trace",
        "disaggregated",
        "scale",
    }


def test_trace_mix_has_bursts_a_diurnal_rhythm_and_a_heavy_tail() -> None:
    jobs = make_mix("trace", seed=0).jobs
    assert len(jobs) == 600
    # Sweeps arrive in bursts: some instants carry several jobs.
    per_instant = Counter(j.arrival_s for j in jobs)
    assert max(per_instant.values()) == BURST
    # Heavy tail: the longest tenth of the jobs holds well over a tenth of the iterations.
    sizes = sorted((j.iterations for j in jobs), reverse=True)
    assert sum(sizes[:60]) > 0.3 * sum(sizes)
    # Diurnal: the busiest hour of the day sees far more arrivals than the quietest.
    by_hour = Counter(int(j.arrival_s % DAY_S // 3600) for j in jobs)
    assert max(by_hour.values()) > 2 * min(by_hour.get(h, 0) for h in range(24))


def test_memory_preallocation_knob_sets_every_rollout_to_the_fraction() -> None:
    mix = make_mix("small-lab", seed=0, jobs=10, gpu_memory_utilization=0.9)
    for job in mix.jobs:
        rollout = profile_for(job).memory_mib[Phase.ROLLOUT]
        assert rollout == pytest.approx(0.9 * hw.H200_MEMORY_MIB, abs=1)
    with pytest.raises(ValueError, match=r"gpu_memory_utilization 1\.5"):
        make_mix("small-lab", seed=0, jobs=1, gpu_memory_utilization=1.5)
