"""CUDA MPS for RLix roles: what the node agent runs and what a client pod gets.

Why MPS: time-slicing runs one CUDA context on a GPU at a time, so a memory-bound
decode and a compute-bound training step of two jobs on one GPU take turns.
Under MPS one server holds the context and runs the kernels of several client
processes concurrently, which is what phase complementarity wants. What it
costs in isolation (docs/dra.md, "Kernels side by side"): the clients of one
server share its fate (a fatal GPU fault in one client ends the others' work
on that GPU), and compute is shared by a thread percentage, not time slots.

The pieces, all plain data so the operator, the agent and the tests agree:

* a **directory** on the node (``MPS_DIR``) with ``pipe/`` (the control
  daemon's and servers' named pipes and sockets), ``log/`` and ``shm/`` (the
  daemon and every client must see the same ``/dev/shm``: the daemon in its own
  mount namespace, the clients by a hostPath mount over theirs, as NVIDIA's
  device plugin does);
* the **control daemon command** the agent supervises (foreground, so the agent
  notices it die and restarts it);
* the **client environment**: the pipe directory, a pinned device-memory limit
  per visible GPU (the role's budget, so MPS itself enforces what the claim
  promised) and, if asked, an active-thread percentage.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Final

from rlix.core.names import GROUP

MPS_DIR: Final = "/run/rlix/mps"
NODE_LABEL_MPS: Final = f"{GROUP}/mps"  # "true" while the node's MPS control daemon runs
CONTROL_BINARY: Final = "nvidia-cuda-mps-control"
VOLUME_PIPE: Final = "rlix-mps-pipe"
VOLUME_SHM: Final = "rlix-mps-shm"

ENV_PIPE: Final = "CUDA_MPS_PIPE_DIRECTORY"
ENV_LOG: Final = "CUDA_MPS_LOG_DIRECTORY"
ENV_MEMORY_LIMIT: Final = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_THREADS: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
OWNED_ENV: Final = (ENV_PIPE, ENV_LOG, ENV_MEMORY_LIMIT, ENV_THREADS)


@dataclass(frozen=True)
class MpsPaths:
    """Where one node's MPS lives; the same paths on the host and in the pods."""

    root: str = MPS_DIR

    @property
    def pipe(self) -> str:
        return f"{self.root.rstrip('/')}/pipe"

    @property
    def log(self) -> str:
        return f"{self.root.rstrip('/')}/log"

    @property
    def shm(self) -> str:
        return f"{self.root.rstrip('/')}/shm"


def daemon_env(paths: MpsPaths) -> dict[str, str]:
    """The control daemon's environment (its servers inherit it)."""
    return {ENV_PIPE: paths.pipe, ENV_LOG: paths.log}


def daemon_command(paths: MpsPaths, binary: str = CONTROL_BINARY) -> list[str]:
    """The control daemon in the foreground, in a mount namespace whose /dev/shm is ``shm/``.

    A private mount namespace so the bind over /dev/shm is the daemon's alone
    (the agent's own /dev/shm, and the host's, stay as they are).
    """
    inner = f"mount --bind {shlex.quote(paths.shm)} /dev/shm && exec {shlex.quote(binary)} -f"
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inner]


def memory_limit(gpus: int, budget_mib: int) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: the budget on each GPU the client sees (0..gpus-1)."""
    if gpus < 1 or budget_mib < 1:
        raise ValueError(f"need gpus >= 1 and budget_mib >= 1, got {gpus} and {budget_mib}")
    return ",".join(f"{i}={budget_mib}M" for i in range(gpus))


def client_env(
    paths: MpsPaths, *, gpus: int, budget_mib: int, active_thread_percentage: int | None
) -> list[dict[str, str]]:
    """The env of a role's GPU container under MPS."""
    env = [
        {"name": ENV_PIPE, "value": paths.pipe},
        {"name": ENV_MEMORY_LIMIT, "value": memory_limit(gpus, budget_mib)},
    ]
    if active_thread_percentage is not None:
        env.append({"name": ENV_THREADS, "value": str(active_thread_percentage)})
    return env


def client_volumes(paths: MpsPaths) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container mounts): the pipe directory, and ``shm/`` over /dev/shm."""
    volumes = [
        {"name": VOLUME_PIPE, "hostPath": {"path": paths.pipe, "type": "Directory"}},
        {"name": VOLUME_SHM, "hostPath": {"path": paths.shm, "type": "Directory"}},
    ]
    mounts = [
        {"name": VOLUME_PIPE, "mountPath": paths.pipe},
        {"name": VOLUME_SHM, "mountPath": "/dev/shm"},
    ]
    return volumes, mounts
