"""How much phases of different jobs slow each other down on a shared GPU.

Model: a job's progress rate on a GPU it shares is ``1 / (1 + sum_k p_k * I[s, s_k])``
where ``s`` is its phase's shape, ``s_k`` a co-resident's shape, ``p_k`` that
co-resident's pressure (share of its GPUs with running kernels) and ``I`` the
slowdown one full-pressure co-runner of shape ``s_k`` inflicts on shape ``s``.
A gang moves at the pace of its slowest GPU (collectives are lock-step), so a
job's rate is the minimum over its GPUs.

``I`` is a loadable matrix (``Interference``), the LEAST CERTAIN numbers in the
simulator. Two ship here (docs/simulator.md compares them side by side):

* ``MEASURED_H200`` (the default): two processes on one H200 under CUDA
  time-slicing (the NVIDIA device plugin's sharing mode), measured by
  hack/gpu-interference.py into bench/results/gpu_interference.json. Saturating
  kernels gain nothing from sharing there (a GEMM and a GEMV together make
  0.95 of one GPU's progress); copies overlap almost perfectly with kernels.
  Measured beats assumed, so it is the default; its limit is that the kernels
  saturate the GPU, which the model's pressure < 1 (rollout tails, tool waits)
  is there to correct.
* ``ASSUMED``: the literature-based table the simulator started with: two jobs
  bound by the same resource split it (I = 1); a compute-bound phase next to a
  bandwidth-bound decode loses 0.3, the decode 0.4 (the middle of the 10-40%
  range POD-Attention, NanoFlow, MuxServe and RollMux report for prefill/decode
  style pairs); weight sync barely touches a co-runner (0.1).

``from_document`` reads any file in hack/gpu-interference.py's format, so a
matrix measured on other hardware loads without a code change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from rlix.core.phases import Phase, Shape, shape_of
from rlix.core.policy.placement.rules_file import cells_from_document, document_from_json
from rlix.core.policy.placement.sharing import (
    ASSUMED_CELLS,
    MEASURED_H200_CELLS,
    TIME_SLICING_CELLS,
)

SHAPES: Final = (Shape.COMPUTE, Shape.MEMORY, Shape.NETWORK)


@dataclass(frozen=True)
class Interference:
    """``I[victim shape][co-runner shape]`` for the three busy shapes, and where it comes from.

    Stored as a tuple of (victim, co-runner, I) so the matrix is hashable and
    a ``SimConfig`` holding it stays a frozen value.
    """

    name: str
    source: str
    cells: tuple[tuple[Shape, Shape, float], ...]

    def __post_init__(self) -> None:
        seen = {(a, b) for a, b, _ in self.cells}
        missing = [f"{a}/{b}" for a in SHAPES for b in SHAPES if (a, b) not in seen]
        if missing:
            raise ValueError(f"interference matrix {self.name!r} lacks {', '.join(missing)}")
        for a, b, value in self.cells:
            if not value >= 0.0:  # also rejects NaN
                raise ValueError(f"interference matrix {self.name!r}: I[{a}][{b}] = {value} < 0")

    def shapes(self, victim: Shape, other: Shape) -> float:
        if Shape.NONE in (victim, other):
            return 0.0  # an idle phase neither slows nor is slowed
        for a, b, value in self.cells:
            if (a, b) == (victim, other):
                return value
        raise KeyError((victim, other))  # unreachable: __post_init__ checked every pair

    def slowdown(self, victim: Phase, other: Phase) -> float:
        """I[victim shape, other shape]: slowdown per unit of the other's pressure."""
        return self.shapes(shape_of(victim), shape_of(other))

    def table(self) -> dict[Phase, dict[Phase, float]]:
        """``slowdown`` for every pair of phases, precomputed for the event loop."""
        return {a: {b: self.slowdown(a, b) for b in Phase} for a in Phase}

    def combined(self, a: Shape, b: Shape) -> float:
        """Progress of two full-pressure co-runners together (2.0 = no interference)."""
        return 1.0 / (1.0 + self.shapes(a, b)) + 1.0 / (1.0 + self.shapes(b, a))


# The cells live with the policy's sharing rules (``rlix.core.policy.placement.sharing``),
# which decide with the same numbers the simulator measures with.
ASSUMED: Final = Interference(
    "assumed",
    "literature ranges (POD-Attention, NanoFlow, MuxServe, RollMux); see module docstring",
    ASSUMED_CELLS,
)
# bench/results/gpu_interference.json, "time_slicing" (one run, 3-second
# windows, torch 2.11 / CUDA 13 on an H200). The measured -0.000 of copies
# next to a GEMM is rounding noise and is stored as 0.
MEASURED_H200: Final = Interference(
    "h200-time-slicing",
    "measured: bench/results/gpu_interference.json (hack/gpu-interference.py), time-slicing",
    MEASURED_H200_CELLS,
)
DEFAULT: Final = MEASURED_H200
# What a cluster without a measured matrix can decide with (``--interference
# time-slicing``): a bound on any GPU shared by time slices, not a measurement.
# ``rlix simulate --rules time-slicing`` has RLix decide with it while the run
# is still measured under DEFAULT.
TIME_SLICING_BOUND: Final = Interference(
    "time-slicing-bound",
    "built in: what time slices allow on any GPU (two busy phases split it)",
    TIME_SLICING_CELLS,
)


def from_document(
    doc: Mapping[str, object], mode: str = "time_slicing", name: str | None = None
) -> Interference:
    """The matrix in a hack/gpu-interference.py JSON document (already parsed).

    ``mode`` picks the sharing mechanism measured ("time_slicing" or "mps").
    A missing cell, a non-number or a coefficient below -``NOISE`` is an error
    naming the cell (``rules_file.cells_from_document``, the reader the
    cluster's components use too).
    """
    cells = cells_from_document(doc, mode)
    gpu = doc.get("gpu", "unknown GPU")
    return Interference(name or f"measured-{mode}", f"measured on {gpu} ({mode})", cells)


def from_json(text: str, mode: str = "time_slicing", name: str | None = None) -> Interference:
    """``from_document`` on a file's text; ValueError (saying why) for text that is
    not a JSON object, as for a bad cell. Callers read the file and name it."""
    return from_document(document_from_json(text), mode, name)


def slowdown(victim: Phase, other: Phase) -> float:
    """The default matrix's I[victim shape, other shape]."""
    return DEFAULT.slowdown(victim, other)


def slowdown_table() -> dict[Phase, dict[Phase, float]]:
    """The default matrix for every pair of phases."""
    return DEFAULT.table()
