"""The MPS configuration RLix generates: the daemon's side and the client's."""

from __future__ import annotations

import pytest

from rlix.core import mps


def test_paths_share_one_root_on_host_and_in_pods() -> None:
    paths = mps.MpsPaths("/run/rlix/mps/")
    assert (paths.pipe, paths.log, paths.shm) == (
        "/run/rlix/mps/pipe",
        "/run/rlix/mps/log",
        "/run/rlix/mps/shm",
    )
    assert mps.daemon_env(paths) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/run/rlix/mps/pipe",
        "CUDA_MPS_LOG_DIRECTORY": "/run/rlix/mps/log",
    }


def test_the_daemon_runs_in_the_foreground_with_shm_bound_over_dev_shm_privately() -> None:
    command = mps.daemon_command(mps.MpsPaths("/run/my dir"))
    assert command[:5] == ["unshare", "--mount", "--propagation", "private", "--"]
    assert command[5:7] == ["sh", "-c"]
    assert (
        command[7] == "mount --bind '/run/my dir/shm' /dev/shm && exec nvidia-cuda-mps-control -f"
    )


def test_each_visible_gpu_is_limited_to_the_budget() -> None:
    assert mps.memory_limit(1, 30000) == "0=30000M"
    assert mps.memory_limit(3, 512) == "0=512M,1=512M,2=512M"
    with pytest.raises(ValueError, match="gpus >= 1"):
        mps.memory_limit(0, 512)
    with pytest.raises(ValueError, match="budget_mib >= 1"):
        mps.memory_limit(1, 0)


def test_client_env_and_mounts() -> None:
    paths = mps.MpsPaths()
    env = mps.client_env(paths, gpus=2, budget_mib=40000, active_thread_percentage=None)
    assert env == [
        {"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/run/rlix/mps/pipe"},
        {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=40000M,1=40000M"},
    ]
    threads = mps.client_env(paths, gpus=1, budget_mib=1, active_thread_percentage=40)
    assert threads[-1] == {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "40"}
    volumes, mounts = mps.client_volumes(paths)
    assert [v["hostPath"]["path"] for v in volumes] == ["/run/rlix/mps/pipe", "/run/rlix/mps/shm"]
    assert [m["mountPath"] for m in mounts] == ["/run/rlix/mps/pipe", "/dev/shm"]
    assert {v["name"] for v in volumes} == {m["name"] for m in mounts}
