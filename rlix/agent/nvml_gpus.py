"""The NVML GPU backend (real nodes; ``nvidia-ml-py`` from the ``agent`` extra).

NVML reports host PIDs when the agent runs with hostPID, which is what the
cgroup resolver needs to attribute memory to pods. Imported only when the agent
is started with ``--backend nvml``, so tests and kwok nodes never load NVML.
"""

from __future__ import annotations

import threading
from typing import Any

from rlix.agent.gpus import MIB, BackendUnsupportedError, GpuInfo, GpuProcess


class NvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        import pynvml

        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise RuntimeError(
                f"NVML is not usable on this node ({exc}); is the NVIDIA driver loaded and "
                "the agent running with the driver libraries mounted? "
                "Use --backend simulated for nodes without GPUs."
            ) from None
        self._lock = threading.Lock()  # NVML handles are not documented as thread-safe
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]

    def gpus(self) -> list[GpuInfo]:
        nvml = self._nvml
        out = []
        with self._lock:
            for i, h in enumerate(self._handles):
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                rates = nvml.nvmlDeviceGetUtilizationRates(h)
                name = nvml.nvmlDeviceGetName(h)
                uuid = nvml.nvmlDeviceGetUUID(h)
                out.append(
                    GpuInfo(
                        index=i,
                        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        product=name.decode() if isinstance(name, bytes) else str(name),
                        memory_mib=int(mem.total) // MIB,
                        used_mib=int(mem.used) // MIB,
                        utilization=float(rates.gpu) / 100.0,
                    )
                )
        return out

    def processes(self) -> list[GpuProcess]:
        nvml = self._nvml
        out = []
        with self._lock:
            for i, h in enumerate(self._handles):
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = p.usedGpuMemory
                    # None/NVML_VALUE_NOT_AVAILABLE when the driver hides it (e.g. MIG
                    # without privileges): report 0 rather than a bogus huge number.
                    mib = int(used) // MIB if isinstance(used, int) and used < (1 << 62) else 0
                    out.append(GpuProcess(pid=int(p.pid), gpu_index=i, used_mib=mib))
        return out

    def report_usage(self, pid: int, gpu: int, memory_mib: int, utilization: float) -> None:
        raise BackendUnsupportedError("usage reports are for the simulated backend; NVML measures")

    def set_parked(self, pids: frozenset[int], parked: bool) -> None:
        """NVML sees freed memory by itself; nothing to model."""

    def process_gone(self, pid: int) -> None:
        """NVML reports what the driver holds; nothing to forget."""

    def close(self) -> None:
        with self._lock:
            self._nvml.nvmlShutdown()
