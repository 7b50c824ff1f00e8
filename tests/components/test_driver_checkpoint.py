"""The driver checkpoint's failures say what is unsupported: an MPS client is not an old driver."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.agent.driver_checkpoint import (
    CheckpointUnsupportedError,
    CudaDriverCheckpointer,
    is_mps_client,
)
from rlix.core import mps

# What driver 580 said for an MPS client (bench/results/gpu_mps.md), where it
# checkpointed a plain process in the same run.
DRIVER_SAYS = (
    "CUDA checkpointing is not supported by the installed NVIDIA driver. "
    "Upgrade to a driver version with CUDA checkpoint API support."
)


class RefusingDriver:
    """``cuda.core.checkpoint`` as the driver behaved for an MPS client."""

    def __init__(self) -> None:
        self.unlocked: list[int] = []

    def Process(self, pid: int) -> Any:  # noqa: N802  (the module's name)
        driver = self

        class Proc:
            def lock(self, timeout_ms: int = 0) -> None:
                pass

            def checkpoint(self) -> None:
                raise RuntimeError(DRIVER_SAYS)

            def unlock(self) -> None:
                driver.unlocked.append(pid)

        return Proc()


@pytest.fixture
def sleeper(request: pytest.FixtureRequest) -> Iterator[int]:
    """A process started with the environment the test names, once it runs Python:
    until its exec, /proc/PID/environ is still the forking test's."""
    env: dict[str, str] = request.param
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.parametrize("sleeper", [{mps.ENV_PIPE: "/run/rlix/mps/pipe"}], indirect=True)
def test_an_mps_client_is_named_and_told_where_its_memory_can_go(sleeper: int) -> None:
    driver = RefusingDriver()
    ckpt = CudaDriverCheckpointer(module=driver)
    with pytest.raises(CheckpointUnsupportedError) as err:
        ckpt.suspend(sleeper)
    text = str(err.value)
    assert f"pid {sleeper} is a CUDA MPS client" in text
    assert "offload hooks" in text
    assert DRIVER_SAYS in text  # what the driver said is kept
    assert driver.unlocked == [sleeper]  # never left frozen


@pytest.mark.parametrize("sleeper", [{}], indirect=True)
def test_a_plain_process_keeps_the_drivers_own_error(sleeper: int) -> None:
    ckpt = CudaDriverCheckpointer(module=RefusingDriver())
    with pytest.raises(RuntimeError, match="not supported by the installed NVIDIA driver"):
        ckpt.suspend(sleeper)


def test_an_empty_pipe_directory_or_an_unreadable_process_is_no_mps_client(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "environ").write_bytes(b"PATH=/bin\0" + f"{mps.ENV_PIPE}=".encode() + b"\0")
    assert not is_mps_client(7, str(tmp_path))
    assert not is_mps_client(8, str(tmp_path))  # gone, or not ours to read
    (tmp_path / "7" / "environ").write_bytes(f"{mps.ENV_PIPE}=/p\0HOME=/\0".encode())
    assert is_mps_client(7, str(tmp_path))
