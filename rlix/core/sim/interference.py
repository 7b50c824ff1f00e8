"""How much phases of different jobs slow each other down on a shared GPU.

Model: a job's progress rate on a GPU it shares is ``1 / (1 + sum_k p_k * I[s, s_k])``
where ``s`` is its phase's shape, ``s_k`` a co-resident's shape, ``p_k`` that
co-resident's pressure (share of its GPUs with running kernels) and ``I`` the
slowdown one full-pressure co-runner of shape ``s_k`` inflicts on shape ``s``.
A gang moves at the pace of its slowest GPU (collectives are lock-step), so a
job's rate is the minimum over its GPUs.

The coefficients are the LEAST CERTAIN numbers in the simulator (see
docs/simulator.md): two jobs bound by the same resource split it (I = 1, as
time-slicing or bandwidth sharing gives); a compute-bound phase next to a
bandwidth-bound decode loses a fraction (SMs left idle by decode are used,
but L2/HBM contention remains). Published co-location studies of prefill with
decode (e.g. POD-Attention, NanoFlow, MuxServe) and RollMux's phase
multiplexing report slowdowns in the 10-40% range for such pairs; we take 0.3
and 0.4 from the middle of that range. Weight sync moves bytes over NVLink and
barely touches SMs or HBM bandwidth of the co-runner.
"""

from __future__ import annotations

from typing import Final

from rlix.core.phases import Phase, Shape, shape_of

SLOWDOWN: Final[dict[tuple[Shape, Shape], float]] = {
    (Shape.COMPUTE, Shape.COMPUTE): 1.0,
    (Shape.MEMORY, Shape.MEMORY): 1.0,
    (Shape.COMPUTE, Shape.MEMORY): 0.3,  # training slowed by a co-resident decode
    (Shape.MEMORY, Shape.COMPUTE): 0.4,  # decode slowed by co-resident training
}
NETWORK_SLOWDOWN: Final = 0.1


def slowdown(victim: Phase, other: Phase) -> float:
    """I[victim shape, other shape]: slowdown per unit of the other's pressure."""
    a, b = shape_of(victim), shape_of(other)
    if Shape.NONE in (a, b):
        return 0.0
    if Shape.NETWORK in (a, b):
        return NETWORK_SLOWDOWN
    return SLOWDOWN[(a, b)]


def slowdown_table() -> dict[Phase, dict[Phase, float]]:
    """``slowdown`` for every pair of phases, precomputed for the event loop."""
    return {a: {b: slowdown(a, b) for b in Phase} for a in Phase}
