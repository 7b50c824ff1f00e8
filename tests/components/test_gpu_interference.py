"""hack/gpu-interference.py: the arithmetic and the honest skip, without a GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "gpu-interference.py"


@pytest.fixture(scope="module")
def gi() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_interference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slowdown_is_the_simulators_coefficient(gi: ModuleType) -> None:
    alone = {"compute": 100.0, "memory": 200.0}
    shared = {
        ("compute", "memory"): (50.0, 50.0),  # compute at half speed, memory at a quarter
        ("compute", "compute"): (50.0, 25.0),
    }
    out = gi.summarise(alone, shared)
    # rate_shared = rate_alone / (1 + I)
    assert out["slowdown"]["compute"]["memory"] == 1.0
    assert out["slowdown"]["memory"]["compute"] == 3.0
    # same shape: the mean of the two runs' (1 / fraction) - 1: (2 + 4) / 2 - 1
    assert out["slowdown"]["compute"]["compute"] == 2.0
    assert out["combined_progress"] == {"compute+memory": 0.75, "compute+compute": 0.75}


def test_table_lists_every_pair(gi: ModuleType) -> None:
    alone = dict.fromkeys(gi.SHAPES, 10.0)
    shared = {(s, t): (5.0, 5.0) for i, s in enumerate(gi.SHAPES) for t in gi.SHAPES[i:]}
    text = gi.table(gi.summarise(alone, shared), "title")
    for s in gi.SHAPES:
        assert f"| {s} | 1.00 | 1.00 | 1.00 |" in text
    assert "| memory+network | 1.00 |" in text


def test_skips_with_the_reason_when_there_is_no_gpu(tmp_path: Path) -> None:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        pytest.skip("a GPU is present: the skip path cannot be exercised here")
    out = tmp_path / "i.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 77, done.stdout + done.stderr
    assert "SKIPPED" in done.stdout
    assert not out.exists()
