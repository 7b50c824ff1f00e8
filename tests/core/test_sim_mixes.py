"""Workload mixes: deterministic, and with the offered load they claim."""

from __future__ import annotations

import pytest

from rlix.core.sim.mixes import MIXES, expected_gpu_s, make_mix


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
    assert set(MIXES) == {"small-lab", "mixed-tenants", "agentic", "scale"}
