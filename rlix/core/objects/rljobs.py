"""An RLJob object -> what the CLI and the demo show about it.

The operator validates the whole spec through the pydantic model
(``rlix.core.validation``); these are the few values a viewer reads off any
RLJob, valid or not, with the model's own defaults (``facts`` takes them from
``RLJobSpec``), so ``rlix describe`` and the operator cannot disagree on what an
unset field means.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlix.core.objects import facts as f
from rlix.core.objects.bounds import ObjectError
from rlix.core.objects.metadata import identity, part
from rlix.core.phases import Phase


@dataclass(frozen=True, slots=True)
class RLJobFacts:
    namespace: str
    name: str
    priority: int
    preemptible_rollout: bool
    algorithm: str
    state: str | None
    phase: Phase | None
    gpus: int | None
    iterations: int
    errors: tuple[ObjectError, ...]


def read_rljob(obj: object) -> RLJobFacts:
    """Read one RLJob object; ``ObjectError`` only if it has no usable name."""
    key = identity(obj, "RLJob", namespaced=True)
    reading = f.Reading("RLJob", key)
    spec, status = part(obj, "spec"), part(obj, "status")
    namespace, name = key.split("/", 1)
    return RLJobFacts(
        namespace=namespace,
        name=name,
        priority=reading.get(f.JOB_PRIORITY, spec.get("priority")),
        preemptible_rollout=reading.get(f.JOB_PREEMPTIBLE_ROLLOUT, spec.get("preemptibleRollout")),
        algorithm=reading.get(f.JOB_ALGORITHM, spec.get("algorithm")),
        state=reading.get(f.JOB_STATE, status.get("state")),
        phase=reading.get(f.JOB_PHASE, status.get("phase")),
        gpus=reading.get(f.JOB_GPUS, status.get("gpus")),
        iterations=reading.get(f.JOB_ITERATIONS, status.get("iterations")),
        errors=tuple(reading.errors),
    )
