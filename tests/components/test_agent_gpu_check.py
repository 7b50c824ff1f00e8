"""hack/gpu-check.py: what can be checked without a GPU (planning, units, table,
and a clear, honest exit when there is no GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "gpu-check.py"


@pytest.fixture(scope="module")
def gc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_bandwidth_units(gc: ModuleType) -> None:
    assert gc.gbps(53 * 10**9, 1.0) == 53.0
    assert gc.gbps(10**9, 0.5) == 2.0
    with pytest.raises(ValueError, match="seconds must be > 0"):
        gc.gbps(1, 0)


def test_meminfo_parsing(gc: ModuleType) -> None:
    text = "MemTotal:       131072000 kB\nMemAvailable:   100000000 kB\n"
    assert gc.mem_available_bytes(text) == 100000000 * 1024
    with pytest.raises(ValueError, match="no MemAvailable"):
        gc.mem_available_bytes("MemTotal: 1 kB\n")


def test_sizes_that_do_not_fit_are_skipped_with_the_reason(gc: ModuleType) -> None:
    gib = 1 << 30
    plan = gc.plan_sizes([1, 16, 64], free_device=139 * gib, free_host=60 * gib)
    assert plan[0] == (1, None) and plan[1] == (16, None)
    assert plan[2][0] == 64 and "host memory" in plan[2][1]
    plan = gc.plan_sizes([64], free_device=40 * gib, free_host=500 * gib)
    assert "on the GPU" in plan[0][1]


def test_table_lines_up(gc: ModuleType) -> None:
    rows = [
        gc.Row("floor: pinned copy HBM->host", 1, 0.02, 50.0, None, "ok"),
        gc.Row("rlix suspend", 64, 1.5, 42.7, 0.81, "ok, NVML freed 59.6 GiB"),
        gc.Row("relocate -> cuda:1", None, None, None, None, "skipped: only one GPU"),
    ]
    lines = gc.format_table(rows).splitlines()
    assert len({len(line) for line in lines}) == 1  # every line the same width
    assert "81%" in lines[3] and "42.7" in lines[3] and "skipped: only one GPU" in lines[4]


def test_without_a_gpu_it_says_why_and_exits_77(gc: ModuleType) -> None:
    if gc.gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: run `make gpu-check` instead")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert out.returncode == gc.SKIPPED_EXIT == 77
    assert out.stdout.startswith("gpu-check: SKIPPED: ")
