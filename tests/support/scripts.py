"""Load a script that is not a package module (bench/, hack/) for a test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """``path`` as module ``name``, registered so its dataclasses resolve their module."""
    loaded = importlib.util.spec_from_file_location(name, path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    sys.modules[name] = module
    loaded.loader.exec_module(module)
    return module


def run_script(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``path`` with this interpreter, its output captured as text."""
    return subprocess.run(
        [sys.executable, str(path), *args], capture_output=True, text=True, timeout=120, check=False
    )


def torch_sees_a_gpu() -> bool:
    """Whether a GPU script here would run instead of skipping (no torch: no GPU)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def assert_skips_without_gpu(path: Path, out: Path) -> None:
    """A GPU script run here exits 77, says SKIPPED and writes no ``--out`` file."""
    done = run_script(path, "--out", str(out))
    assert done.returncode == 77, done.stdout + done.stderr
    assert "SKIPPED" in done.stdout
    assert not out.exists()
