"""Relocation: the agent copies a pod's CUDA-IPC-exported buffers to spare HBM
on another GPU of the node (over NVLink/PCIe peer copies) or to pinned host
memory, and back into the pod's fresh buffers on resume.

Why the agent and not the pod: only a privileged process that sees every GPU
can hold memory on a GPU the pod was not given. CUDA IPC's rule shapes the
protocol: the exporter must keep its memory alive until the importer has
copied and closed the handle, so the pod frees its buffers only after
:meth:`Relocator.park` returns.

Integrity is checked by the pod, as on every path: it fingerprints its buffers
before export and after the copy back, and the agent compares the two against
its suspended-pod record.

Only real GPUs can run this (``hack/gpu-check.py`` exercises it); the simulated
backend models the memory moving with :meth:`SimulatedBackend.hold`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Relocator:
    def __init__(self) -> None:
        import torch

        self._torch: Any = torch

    def park(self, buffers: Sequence[Any], target: str) -> list[Any]:
        """Copy imported buffers to ``target`` ("host" or "cuda:<index>")."""
        torch = self._torch
        if target == "host":
            pin = bool(torch.cuda.is_available())  # page-locked, so copies run at link speed
            parked = [torch.empty_like(b, device="cpu", pin_memory=pin) for b in buffers]
        elif target.startswith("cuda:"):
            parked = [torch.empty_like(b, device=target) for b in buffers]
        else:
            raise ValueError(f"relocation target must be 'host' or 'cuda:<index>', got {target!r}")
        for src, dst in zip(buffers, parked, strict=True):
            dst.copy_(src, non_blocking=True)
        for device in {b.device for b in buffers} | {p.device for p in parked}:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        return parked

    def unpark(self, parked: Sequence[Any], into: Sequence[Any]) -> None:
        """Copy parked buffers into the pod's fresh (imported) buffers."""
        torch = self._torch
        if len(parked) != len(into):
            raise ValueError(f"{len(parked)} parked buffers, {len(into)} destinations")
        for src, dst in zip(parked, into, strict=True):
            if src.shape != dst.shape or src.dtype != dst.dtype:
                raise ValueError(
                    f"shape/dtype mismatch: {src.shape}/{src.dtype} -> {dst.shape}/{dst.dtype}"
                )
            dst.copy_(src, non_blocking=True)
        for device in {d.device for d in into}:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
