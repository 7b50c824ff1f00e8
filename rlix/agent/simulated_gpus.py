"""A simulated GPU node for kwok nodes and CI.

GPUs hold what the simulated processes report (``report_usage``), and lose it
while those processes are parked: the same observable behaviour NVML shows on a
real node when a pod's memory is offloaded and restored. Thread-safe, because
the agent's connection threads report concurrently.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rlix.agent.gpus import GpuInfo, GpuProcess


@dataclass(slots=True)
class _Usage:
    memory_mib: int
    utilization: float


class SimulatedBackend:
    name = "simulated"

    def __init__(self, *, gpu_count: int, memory_mib: int, product: str = "SIM-H200") -> None:
        if gpu_count < 0:
            raise ValueError(f"gpu_count must be >= 0, got {gpu_count}")
        if memory_mib <= 0:
            raise ValueError(f"memory_mib must be > 0, got {memory_mib}")
        self._count = gpu_count
        self._memory_mib = memory_mib
        self._product = product
        self._lock = threading.Lock()
        self._usage: dict[tuple[int, int], _Usage] = {}  # (pid, gpu) -> usage
        self._parked: set[int] = set()
        self._held: dict[tuple[str, int], int] = {}  # (owner, gpu) -> MiB

    def report_usage(self, pid: int, gpu: int, memory_mib: int, utilization: float) -> None:
        if not 0 <= gpu < self._count:
            raise ValueError(f"gpu {gpu} out of range: this node has {self._count} GPUs")
        if memory_mib < 0 or not 0.0 <= utilization <= 1.0:
            raise ValueError("memory_mib must be >= 0 and utilization in [0, 1]")
        with self._lock:
            others = sum(
                u.memory_mib
                for (p, g), u in self._usage.items()
                if g == gpu and p != pid and p not in self._parked
            ) + sum(mib for (_, g), mib in self._held.items() if g == gpu)
            if others + memory_mib > self._memory_mib:
                free = self._memory_mib - others
                raise ValueError(f"gpu {gpu} has {free} MiB free, {memory_mib} MiB reported")
            self._usage[(pid, gpu)] = _Usage(memory_mib, utilization)

    def set_parked(self, pids: frozenset[int], parked: bool) -> None:
        with self._lock:
            if parked:
                self._parked |= pids
            else:
                self._parked -= pids

    def hold(self, owner: str, gpu: int, memory_mib: int) -> None:
        """Memory the agent itself holds (a relocated pod's buffers parked on
        ``gpu``); ``memory_mib=0`` releases it."""
        if not 0 <= gpu < self._count:
            raise ValueError(f"gpu {gpu} out of range: this node has {self._count} GPUs")
        with self._lock:
            if memory_mib:
                self._held[(owner, gpu)] = memory_mib
            else:
                self._held.pop((owner, gpu), None)

    def process_gone(self, pid: int) -> None:
        self.forget(pid)

    def forget(self, pid: int) -> None:
        """The process exited: its memory is released (as the driver would)."""
        with self._lock:
            for key in [k for k in self._usage if k[0] == pid]:
                del self._usage[key]
            self._parked.discard(pid)

    def processes(self) -> list[GpuProcess]:
        with self._lock:
            return [
                GpuProcess(pid=pid, gpu_index=gpu, used_mib=u.memory_mib)
                for (pid, gpu), u in sorted(self._usage.items())
                if pid not in self._parked and u.memory_mib > 0
            ]

    def gpus(self) -> list[GpuInfo]:
        with self._lock:
            used = [0] * self._count
            util = [0.0] * self._count
            for (pid, gpu), u in self._usage.items():
                if pid in self._parked:
                    continue
                used[gpu] += u.memory_mib
                util[gpu] = min(1.0, util[gpu] + u.utilization)
            for (_, gpu), mib in self._held.items():
                used[gpu] += mib
        return [
            GpuInfo(
                index=i,
                uuid=f"GPU-sim-{i:04d}",
                product=self._product,
                memory_mib=self._memory_mib,
                used_mib=used[i],
                utilization=util[i],
            )
            for i in range(self._count)
        ]
