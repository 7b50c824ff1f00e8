"""hack/gpu-mps.py: the arithmetic, the clients' environment and the honest skip, without a GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from rlix.core import mps
from tests.support.scripts import (
    assert_skips_without_gpu,
    load_script,
    run_script,
    torch_sees_a_gpu,
)

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "gpu-mps.py"


@pytest.fixture(scope="module")
def gm() -> ModuleType:
    return load_script(SCRIPT, "gpu_mps")


def test_a_split_is_counted_in_exclusive_gpu_units(gm: ModuleType) -> None:
    # GEMM at 70% of the threads: 0.72 of an exclusive GPU alone, 0.65 beside
    # a GEMV at 30% that alone reads at 0.9 of full bandwidth and 0.7 beside it
    # (both half busy: 0.9 and 0.95 of their exclusive rates at that duty alone,
    # 0.8 and 0.75 side by side)
    at_duty = {"0.5": ((0.9, 0.95), (0.8, 0.75))}
    out = gm.summarise_split((0.72, 0.9), (0.65, 0.7), at_duty)
    assert out["jobs_progress"] == 1.35
    assert out["slowdown_a"] == pytest.approx(0.72 / 0.65 - 1, abs=1e-3)
    assert out["slowdown_b"] == pytest.approx(0.9 / 0.7 - 1, abs=1e-3)
    assert out["duty_jobs_progress"] == {"0.5": 1.55}
    assert out["alone_at_duty"] == {"0.5": [0.9, 0.95]}
    # a side that made no progress at all is an infinite slowdown, not a crash
    assert gm.summarise_split((1, 1), (0, 1), {})["slowdown_a"] == float("inf")


def test_clients_get_exactly_what_a_role_container_gets(gm: ModuleType) -> None:
    paths = mps.MpsPaths(root="/x/mps")
    assert gm.client_env(paths, 30, 4096) == {
        mps.ENV_PIPE: "/x/mps/pipe",
        mps.ENV_MEMORY_LIMIT: "0=4096M",
        mps.ENV_THREADS: "30",
    }
    assert mps.ENV_THREADS not in gm.client_env(paths, None, 4096)


@pytest.mark.parametrize("name", ["MEMORY_LIMIT_CLIENT", "CHECKPOINT_CLIENT", "VICTIM_CLIENT"])
def test_the_client_programs_are_python(gm: ModuleType, name: str) -> None:
    compile(textwrap.dedent(getattr(gm, name)), name, "exec")


def test_each_fault_makes_a_python_client(gm: ModuleType) -> None:
    assert set(gm.FAULTS) == {"device_assert", "illegal_address"}
    for kind, fault in gm.FAULTS.items():
        code = textwrap.dedent(gm.FAULTING_CLIENT.format(fault=fault))
        compile(code, kind, "exec")
        assert fault in code


def test_an_empty_value_takes_the_variable_away(
    gm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(mps.ENV_PIPE, "/somewhere")
    env = gm.merged_env({mps.ENV_PIPE: "", mps.ENV_THREADS: "30"})
    assert mps.ENV_PIPE not in env
    assert env[mps.ENV_THREADS] == "30"


def test_the_table_names_each_split_and_the_time_slicing_baseline(gm: ModuleType) -> None:
    split = {"a": "compute", "threads_a": 70, "b": "memory", "threads_b": None}
    at_duty = {"0.5": ((1, 1), (0.4, 0.5)), "0.65": ((1, 1), (0.5, 0.5))}
    split.update(gm.summarise_split((0.7, 1.0), (0.6, 0.8), at_duty))
    report = {
        "gpu": "G",
        "layout": "L",
        "duties": [0.5, 0.65],
        "full_gpu_rates": {"compute": 600.0, "memory": 4000.0},
        "time_slicing": {
            "jobs_progress": 0.95,
            "duty_jobs_progress": {"0.5": 1.3, "0.65": 1.2},
            "raw": {"pair": [300.0, 1000.0]},
        },
        "splits": [split, {"a": "memory", "b": "memory", "error": "RuntimeError: x"}],
        "memory_limit": {"then_3_gib": "refused"},
    }
    text = gm.table(report)
    assert (
        "| compute (time-slicing) | memory (time-slicing) | 1.00 | 1.00 | | | 0.95 | 1.30 |" in text
    )
    assert (
        "| compute (70%) | memory (whole GPU) | 0.70 | 1.00 | 0.60 | 0.80 | 1.40 | 0.90 |" in text
    )
    assert "| memory | memory | RuntimeError: x |" in text
    assert 'memory_limit: {"then_3_gib": "refused"}' in text


def test_skips_with_the_reason_when_there_is_no_gpu(tmp_path: Path) -> None:
    if torch_sees_a_gpu():
        pytest.skip("a GPU is present: the skip path cannot be exercised here")
    assert_skips_without_gpu(SCRIPT, tmp_path / "m.json")


def _report(gm: ModuleType) -> dict[str, object]:
    """A run where time-slicing halves a GEMM beside a GEMV and quarters the GEMV."""
    whole = {"a": "compute", "threads_a": None, "b": "memory", "threads_b": None}
    whole.update(gm.summarise_split((1, 1), (0.8, 0.2), {"0.5": ((1, 1), (0.9, 0.8))}))
    same = {"a": "memory", "threads_a": None, "b": "memory", "threads_b": None}
    same.update(gm.summarise_split((1, 1), (0.5, 0.4), {"0.5": ((1, 1), (0.7, 0.7))}))
    split = {"a": "compute", "threads_a": 50, "b": "memory", "threads_b": 50}
    split.update(gm.summarise_split((0.6, 0.8), (0.3, 0.4), {"0.5": ((1, 1), (0.7, 0.7))}))
    return {
        "gpu": "G",
        "layout": "L",
        "duties": [0.5],
        "full_gpu_rates": {"compute": 600.0, "memory": 4000.0},
        "time_slicing": {
            "jobs_progress": 0.75,
            "duty_jobs_progress": {"0.5": 1.4},
            "raw": {"pair": [300.0, 1000.0]},
        },
        "splits": [whole, same, split],
    }


def test_the_matrices_come_from_the_same_run_and_skip_thread_limited_splits(
    gm: ModuleType,
) -> None:
    mats = gm.matrices(_report(gm))
    assert mats["time-slicing"] == {("compute", "memory"): 1.0, ("memory", "compute"): 3.0}
    assert mats["MPS"][("compute", "memory")] == pytest.approx(0.25)
    assert mats["MPS"][("memory", "compute")] == pytest.approx(4.0)
    # same shape: the mean of the two sides' slowdowns, (1.0 + 1.5) / 2
    assert mats["MPS"][("memory", "memory")] == pytest.approx(1.25)
    assert len(mats["MPS"]) == 3  # the 50/50 split is not a whole-GPU cell


def test_bursty_pairs_sit_beside_the_simulators_p_times_i(gm: ModuleType) -> None:
    rows = gm.bursty_rows(_report(gm))
    by = {(r["mode"], r["pair"]): r for r in rows}
    ts = by[("time-slicing", "compute+memory")]
    # 1 / (1 + 0.5 x 1.0) + 1 / (1 + 0.5 x 3.0)
    assert ts == {
        "mode": "time-slicing",
        "pair": "compute+memory",
        "duty": 0.5,
        "measured": 1.4,
        "model": round(1 / 1.5 + 1 / 2.5, 3),
    }
    assert by[("MPS", "compute+memory")]["measured"] == 1.7
    assert by[("MPS", "compute+memory")]["model"] == round(1 / 1.125 + 1 / 3.0, 3)
    assert by[("MPS", "memory+memory")]["model"] == round(2 / 1.625, 3)
    assert gm.model_jobs_progress({}, "compute", "memory", 0.5) is None


def test_an_earlier_report_prints_without_a_gpu(gm: ModuleType, tmp_path: Path) -> None:
    import json

    f = tmp_path / "r.json"
    f.write_text(json.dumps(_report(gm)))
    done = run_script(SCRIPT, "--from", str(f))
    assert done.returncode == 0, done.stderr
    assert "| MPS | compute+memory | 0.50 | 1.70 | 1.22 |" in done.stdout


def test_the_committed_measurement_is_in_the_scripts_format() -> None:
    done = run_script(SCRIPT, "--from", str(SCRIPT.parents[1] / "bench/results/gpu_mps.json"))
    assert done.returncode == 0, done.stderr
    assert "| MPS | compute+memory | 0.50 |" in done.stdout


def test_nvidia_smi_rows_keep_pid_type_and_memory_only(gm: ModuleType) -> None:
    text = (
        "|  GPU   GI   CI        PID   Type   Process name                  GPU Memory |\n"
        "|    0   N/A  N/A       677      M   nvidia-cuda-mps-server             30MiB |\n"
        "|    0   N/A  N/A       606    M+C   /somewhere/bin/python3           2282MiB |\n"
    )
    assert gm.process_rows(text) == ["pid 677 type M 30MiB", "pid 606 type M+C 2282MiB"]
