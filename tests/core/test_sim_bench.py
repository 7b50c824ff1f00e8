"""bench/simulate.py's table and matrix loading, on a two-job scenario (no full mix)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from rlix.core.sim.engine import simulate
from rlix.core.sim.interference import DEFAULT
from rlix.core.sim.metrics import bounds
from rlix.core.sim.mixes import closed_batch
from rlix.core.sim.schedulers import gang_binpack, kube_default, rlix
from tests.core.test_sim_helpers import mix_of, spec
from tests.support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "simulate.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(SCRIPT, "bench_simulate")


def test_table_has_every_measure_a_spread_and_the_ratio_to_the_best_baseline(
    bench: ModuleType,
) -> None:
    runs = bench.Runs()
    for seed in (0, 1, 2):
        mix = mix_of(spec("t/a", 0, priority=10), spec("t/b", 1, arrival=float(seed)))
        for name, make in (("kube-default", kube_default), ("rlix", rlix)):
            runs.open.setdefault(name, []).append(simulate(mix, make()))
            runs.closed.setdefault(name, []).append(simulate(closed_batch(mix), make()))
        runs.bounds.append(bounds(runs.closed["rlix"][-1], DEFAULT))
    text = bench.table(runs)
    for label in ("capacity, closed batch", "closed-batch throughput", "mean JCT, priority 10",
                  "stretch, top priority (10)", "GPU time: empty, jobs waiting"):  # fmt: skip
        assert label in text
    capacity = next(line for line in text.splitlines() if "capacity, closed batch" in line)
    assert "excl " in capacity and "share " in capacity
    assert "x (kube-default)" in capacity
    assert bench.spread([3.0, 1.0, 2.0], "{:.1f}") == "2.0 (1.0-3.0)"


def test_a_measure_that_changes_sign_is_compared_by_difference_not_ratio(
    bench: ModuleType,
) -> None:
    """Held, not progress goes negative where sharing gains: RLix at -11.3
    against a baseline's 0.3 once read "-38.44x", a loss by the look of it."""
    assert bench._versus(-11.3, "kube-default", 0.3, "{:.1f}") == (
        "-11.6 vs kube-default (difference)"
    )
    assert bench._versus(0.1, "kube-default", -0.2, "{:.1f}") == (
        "+0.3 vs kube-default (difference)"
    )
    assert bench._versus(0.6, "kube-default", 0.3, "{:.1f}") == "2.00x (kube-default)"
    assert bench._versus(3.0, "kube-default", 0.0, "{:.0f}") == "-"
    assert bench._versus(None, None, None, "{:.1f}") == "-"


def test_a_bad_interference_file_is_refused_naming_the_file_and_cell(
    bench: ModuleType, tmp_path: Path
) -> None:
    bad = tmp_path / "matrix.json"
    bad.write_text(json.dumps({"time_slicing": {"slowdown": {}}}), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"matrix\.json: .*slowdown\.compute is missing"):
        bench.load_interference(bad, "time_slicing")
    good = SCRIPT.parent / "results" / "gpu_interference.json"
    assert bench.load_interference(good, "time_slicing").cells == DEFAULT.cells


def test_targets_say_met_out_of_reach_or_open(bench: ModuleType) -> None:
    assert bench.target_status(True, True, True) == "met"
    assert bench.target_status(False, True, True).startswith("out of reach for every scheduler")
    assert bench.target_status(False, True, False).startswith("out of reach under the model")
    assert bench.target_status(False, False, False) == "not met; no bound rules it out"
    # Beyond the pairs estimate but within the lend one: only tail lending could reach it.
    assert "only tail lending" in bench.target_status(False, True, False, lend_beyond=False)
    assert "each alone" in bench.target_status(False, True, False, lend_beyond=True)
    runs = bench.Runs()
    for seed in (0, 1, 2):
        mix = mix_of(spec("t/a", 0), spec("t/b", 1, arrival=float(seed)))
        for name, make in (("gang-binpack", gang_binpack), ("rlix", rlix)):
            runs.open.setdefault(name, []).append(simulate(mix, make()))
            runs.closed.setdefault(name, []).append(simulate(closed_batch(mix), make()))
        runs.bounds.append(bounds(runs.closed["rlix"][-1], DEFAULT, arrivals=runs.open["rlix"][-1]))
    rows = bench.targets(runs).splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| {t.label}" for t in bench.TARGETS]
    # Two 8-GPU jobs on one 8-GPU node (the cluster components' rules: memory
    # fit only, so they share and slow each other): the pair and lend estimates
    # rule out capacity, throughput and stretch (their tails lend too little);
    # for mean JCT even the bound that holds for every scheduler (one job's
    # wait at least) is above 0.7x gang-binpack's.
    status = [r.split(" | ")[-1].rstrip(" |") for r in rows]
    assert status == [
        "out of reach under the model (pairs and lend estimates, each alone)",
        "out of reach under the model (pairs and lend estimates, each alone)",
        "out of reach for every scheduler (proved bound)",
        "out of reach under the model (pairs and lend estimates, each alone)",
    ]
    assert bench.targets(runs).splitlines()[0].split(" | ")[3:5] == ["pairs", "lend"]
    assert bench.targets(bench.Runs()) == ""
