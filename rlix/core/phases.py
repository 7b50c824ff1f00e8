"""RL post-training phases and the resource shape each one has.

The shape is what phase-aware placement reasons about: a memory-bound phase
(rollout decoding is limited by HBM bandwidth and KV-cache size) leaves the SMs
mostly idle, so it complements a compute-bound phase (training) on the same GPU,
while two memory-bound phases fight over the same bandwidth and capacity.
"""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """The phase a role's pods are in, as reported through ``rlix.io/phase``."""

    ROLLOUT = "rollout"
    SCORING = "scoring"
    TRAINING = "training"
    WEIGHT_SYNC = "weight-sync"
    IDLE = "idle"

    @classmethod
    def parse(cls, raw: str | None) -> Phase | None:
        """Parse an annotation value; ``None`` for missing or unknown values.

        Annotations are written by code we do not control (a user can edit them),
        so garbage must degrade to "phase unknown", never to an exception.
        """
        if raw is None:
            return None
        try:
            return cls(raw.strip().lower())
        except ValueError:
            return None


class Shape(enum.StrEnum):
    """The resource a phase is bound by."""

    COMPUTE = "compute"
    MEMORY = "memory"
    NETWORK = "network"
    NONE = "none"


PHASE_SHAPE: dict[Phase, Shape] = {
    Phase.ROLLOUT: Shape.MEMORY,
    # Scoring is a single forward pass over whole sequences (prefill-like):
    # compute bound, and short.
    Phase.SCORING: Shape.COMPUTE,
    Phase.TRAINING: Shape.COMPUTE,
    Phase.WEIGHT_SYNC: Shape.NETWORK,
    Phase.IDLE: Shape.NONE,
}

# The order phases follow within one iteration of a synchronous RL loop.
ITERATION_ORDER: tuple[Phase, ...] = (
    Phase.ROLLOUT,
    Phase.SCORING,
    Phase.TRAINING,
    Phase.WEIGHT_SYNC,
)


def shape_of(phase: Phase | None) -> Shape:
    """The shape of ``phase``; an unknown phase is treated as idle."""
    return PHASE_SHAPE[phase] if phase is not None else Shape.NONE
