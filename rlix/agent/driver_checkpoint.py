"""Transparent fallback: the CUDA driver checkpoint API, called by PID.

For a process that registered no offload hooks, the driver can lock it, move
all its device memory to host memory (owned by the driver, inside the target
process, so it survives an agent restart) and later restore it. Needs driver
>= 570, ``cuda-core`` with ``cuda.core.checkpoint`` (not a dependency: it is
feature-detected) and an agent with hostPID and privilege.

Integrity: the driver restores the memory it saved, but it offers no checksum,
so this path reports ``verified: "driver"`` honestly instead of pretending to
have compared bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rlix.core import mps


class CheckpointUnsupportedError(Exception):
    """The driver checkpoint API is not usable here; the message says why."""


class Checkpointer(Protocol):
    def unsupported_reason(self) -> str | None: ...

    def suspend(self, pid: int) -> None: ...

    def resume(self, pid: int) -> None: ...


class NoCheckpointer:
    """For simulated nodes: the transparent path does not exist there."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def unsupported_reason(self) -> str | None:
        return self._reason

    def suspend(self, pid: int) -> None:
        raise CheckpointUnsupportedError(self._reason)

    def resume(self, pid: int) -> None:
        raise CheckpointUnsupportedError(self._reason)


class CudaDriverCheckpointer:
    def __init__(
        self, *, lock_timeout_ms: int = 10_000, proc_root: str = "/proc", module: Any = None
    ) -> None:
        """``module``: ``cuda.core.checkpoint`` or an object with its ``Process``
        (tests pass one; by default it is imported and the driver probed)."""
        self._lock_timeout_ms = lock_timeout_ms
        self._proc_root = proc_root
        self._module: Any = module
        self._reason: str | None = None
        if module is not None:
            return
        try:
            from cuda.core import checkpoint  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError as exc:
            self._reason = f"cuda.core.checkpoint is not importable ({exc}); install cuda-core"
            return
        self._module = checkpoint
        self._reason = _probe_driver()

    def unsupported_reason(self) -> str | None:
        return self._reason

    def _process(self, pid: int) -> Any:
        if self._module is None or self._reason is not None:
            raise CheckpointUnsupportedError(self._reason or "unsupported")
        try:
            return self._module.Process(pid)
        except Exception as exc:  # driver too old, symbols missing, no such process
            raise CheckpointUnsupportedError(f"driver checkpoint of pid {pid}: {exc}") from None

    def suspend(self, pid: int) -> None:
        proc = self._process(pid)
        try:
            try:
                proc.lock(timeout_ms=self._lock_timeout_ms)
            except TypeError:
                proc.lock()
            try:
                proc.checkpoint()
            except Exception:
                proc.unlock()  # never leave the process frozen after a failed checkpoint
                raise
        except Exception as exc:
            # The driver refuses MPS clients with the message it gives for an old
            # driver ("not supported by the installed NVIDIA driver"), measured on
            # driver 580 where the same call checkpoints a plain process
            # (bench/results/gpu_mps.md). Say what is really unsupported.
            if is_mps_client(pid, self._proc_root):
                raise CheckpointUnsupportedError(
                    f"pid {pid} is a CUDA MPS client ({mps.ENV_PIPE} is set): the driver does "
                    "not checkpoint MPS clients; its memory can be parked only through the "
                    f"client library's offload hooks (rlix.register_torch). Driver: {exc}"
                ) from None
            raise

    def resume(self, pid: int) -> None:
        proc = self._process(pid)
        proc.restore()
        proc.unlock()


# cuCheckpointProcess* appeared with driver 550 (CUDA 12.4); lock/checkpoint by an
# outside process, which the agent is, needs driver >= 570 (CUDA 12.8).
MIN_DRIVER_CUDA_VERSION = 12080


def _probe_driver() -> str | None:
    """None when the driver can checkpoint processes, else the reason it cannot."""
    try:
        from cuda.bindings import driver  # type: ignore[import-untyped,import-not-found,unused-ignore]

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit failed ({err}); no usable NVIDIA driver"
        err, version = driver.cuDriverGetVersion()
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuDriverGetVersion failed ({err})"
        if version < MIN_DRIVER_CUDA_VERSION:
            return f"driver supports CUDA {version}; checkpointing needs >= 12.8 (driver 570)"
        if not hasattr(driver, "cuCheckpointProcessLock"):
            return "cuda-bindings lacks cuCheckpointProcessLock; upgrade cuda-bindings"
    except Exception as exc:  # no libcuda, wrong bindings: all mean "unsupported here"
        return f"no usable CUDA driver: {type(exc).__name__}: {exc}"
    return None


def is_mps_client(pid: int, proc_root: str = "/proc") -> bool:
    """Whether ``pid`` started with an MPS pipe directory (as RLix's MPS roles do).

    Read from ``/proc/<pid>/environ`` (the agent runs with hostPID and
    privilege); a process that cannot be read is not called one.
    """
    try:
        raw = (Path(proc_root) / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    prefix = f"{mps.ENV_PIPE}=".encode()
    return any(entry.startswith(prefix) and len(entry) > len(prefix) for entry in raw.split(b"\0"))
