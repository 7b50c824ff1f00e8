"""The process's device-memory budget, and capping torch's allocator at it.

The budget is the per-GPU memory the pod declared for its peak phase
(``gpuMemoryMiB`` in the RLJob), which is what admission planned, what the
pod's GPU claim consumes and what a co-resident job was promised the rest of.
It arrives in ``RLIX_GPU_MEMORY_MIB``: from the operator on whole-GPU nodes
(one number), from the claim's CDI spec where the kubelet prepared a
``gpu.rlix.io`` claim (one number per GPU, comma-separated, in the order of
``RLIX_GPU_INDICES``). A process that stays within it
keeps every one of those promises; the node agent reports one that does not
(a ``GPUMemoryOverrun`` event on the pod).

Why a fraction and not a hard limit: torch's caching allocator is the only
allocator a trainer can cap from inside the process
(``torch.cuda.set_per_process_memory_fraction``: an allocation past it raises
an out-of-memory error in this process instead of taking a neighbour's
memory). Engines with their own pools take the fraction as a setting (vLLM's
``gpu_memory_utilization``), which :func:`budget_fraction` computes.
"""

from __future__ import annotations

import os
from typing import Any

from rlix.core import names


class BudgetError(ValueError):
    """``RLIX_GPU_MEMORY_MIB`` is set but is not a positive integer."""


def memory_budgets_mib() -> tuple[int, ...]:
    """The budget of each GPU this pod holds, in MiB (one value: the same on every GPU)."""
    raw = os.environ.get(names.ENV_GPU_MEMORY_MIB, "").strip()
    if not raw:
        return ()
    values = []
    for part in raw.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise BudgetError(
                f"{names.ENV_GPU_MEMORY_MIB}={raw!r}: {part.strip()!r} is not an integer "
                "number of MiB"
            ) from None
        if value <= 0:
            raise BudgetError(f"{names.ENV_GPU_MEMORY_MIB}={raw!r}: budgets must be positive")
        values.append(value)
    return tuple(values)


def memory_budget_mib(gpu: int | None = None) -> int | None:
    """This pod's budget on its ``gpu``-th GPU (default: the smallest), in MiB.

    None outside RLix or for a role that declared no memory.
    """
    budgets = memory_budgets_mib()
    if not budgets:
        return None
    if gpu is not None and 0 <= gpu < len(budgets):
        return budgets[gpu]
    return min(budgets)


def budget_fraction(total_mib: int, gpu: int | None = None) -> float | None:
    """The budget as a fraction of a GPU of ``total_mib`` (capped at 1.0); None without one."""
    if total_mib <= 0:
        raise ValueError(f"total_mib must be positive, got {total_mib}")
    budget = memory_budget_mib(gpu)
    return None if budget is None else min(1.0, budget / total_mib)


def cap_torch_memory(device: Any = None) -> float | None:
    """Cap torch's caching allocator on ``device`` (default: the current one) at the budget.

    Returns the fraction set, or None when there is no budget or no CUDA
    device (nothing to cap; a CPU test runs unchanged).
    """
    import torch

    if memory_budget_mib() is None or not torch.cuda.is_available():
        return None
    index = None if device is None else torch.device(device).index
    if index is None:  # no device, or "cuda" without an index: the current one
        index = torch.cuda.current_device()
    total_mib = torch.cuda.get_device_properties(index).total_memory // 2**20
    fraction = budget_fraction(total_mib, index)
    assert fraction is not None
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return fraction
