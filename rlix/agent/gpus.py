"""The GPU backend port: what the agent needs to know about the node's GPUs.

Two implementations: NVML (real nodes, :mod:`rlix.agent.nvml_gpus`) and a
simulated backend (kwok nodes and CI, :mod:`rlix.agent.simulated_gpus`). The
agent, its publisher and the preemption code only see this interface, so the
component tests exercise the same code paths a real node runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str
    product: str
    memory_mib: int
    used_mib: int
    utilization: float  # SM utilisation, 0..1


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """Device memory one host process holds on one GPU."""

    pid: int
    gpu_index: int
    used_mib: int


class BackendUnsupportedError(Exception):
    """The backend cannot do this (e.g. usage reports to a real NVML backend)."""


class GpuBackend(Protocol):
    name: str

    def gpus(self) -> list[GpuInfo]:
        """Inventory with live memory use and utilisation."""
        ...

    def processes(self) -> list[GpuProcess]:
        """Per-process device memory (host PIDs)."""
        ...

    def report_usage(self, pid: int, gpu: int, memory_mib: int, utilization: float) -> None:
        """A simulated process reports what it holds; real backends refuse."""
        ...

    def set_parked(self, pids: frozenset[int], parked: bool) -> None:
        """Tell the backend the memory of ``pids`` left (or retook) the GPU.

        NVML observes this by itself and ignores the call; the simulated backend
        needs it to model the memory being freed and retaken.
        """
        ...

    def process_gone(self, pid: int) -> None:
        """The process hung up while not suspended: the simulated backend drops
        what it reported (the driver frees an exited process's memory; a live one
        re-reports after reconnecting). NVML ignores it."""
        ...


def gpu_annotation_doc(gpus: list[GpuInfo]) -> list[dict[str, object]]:
    """The ``rlix.io/gpus`` node annotation value (see ``rlix.core.names``)."""
    return [
        {
            "index": g.index,
            "memoryMiB": g.memory_mib,
            "usedMiB": g.used_mib,
            "utilization": round(g.utilization, 3),
        }
        for g in gpus
    ]
