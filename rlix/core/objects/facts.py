"""Every label, annotation and field RLix reads, as data: the one table.

Each ``Fact`` is a row of docs/objects.md (generated from these rows by
``rlix.core.objects.table``): where the value lives, its type, unit and bounds,
the value an object that does not say gets, and the value a malformed one gets
(with a per-object error). The readers in ``pods``, ``nodes`` and ``rljobs``
read through these rows and nothing else, so a default is decided exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from rlix.core import names
from rlix.core.objects.bounds import (
    FLAG,
    BadValueError,
    ObjectError,
    Parser,
    describe,
    integer,
    text,
)
from rlix.core.objects.values import (
    GPU_INDICES,
    LABEL_MAX_CHARS,
    MAX_GPU_REPLICAS,
    MAX_NODE_GPUS,
    MAX_POD_GPUS,
    MEMORY,
    MIB,
    NAME_MAX_CHARS,
    NODE_GPUS,
    PHASE,
    PHASE_SECONDS,
)
from rlix.core.phases import Phase
from rlix.core.rljob import MAX_PRIORITY, MAX_REPLICAS, MAX_ROLES, Algorithm, JobState, RLJobSpec

T = TypeVar("T")

INT32 = (-(2**31), 2**31 - 1)
# The largest gang an RLJob can describe: every replica of every role.
MAX_GANG = MAX_REPLICAS * MAX_ROLES


def _strict_bool(raw: object) -> bool:
    if not isinstance(raw, bool):
        raise BadValueError("must be a JSON boolean")
    return raw


BOOL: Final = Parser("boolean", "true/false", _strict_bool)


def choice(values: Sequence[str]) -> Parser[str]:
    longest = max(len(v) for v in values)

    def parse(raw: object) -> str:
        if not isinstance(raw, str) or len(raw) > longest or raw not in values:
            raise BadValueError(f"must be one of {', '.join(values)}")
        return raw

    return Parser("enum", " | ".join(values), parse)


@dataclass(frozen=True)  # no slots: Fact[int](...) sets __orig_class__
class Fact(Generic[T]):
    """One row of the table: how one value of one object kind is read."""

    kind: str  # Pod, Node or RLJob
    source: str  # label, annotation, label or annotation, field
    key: str
    parser: Parser[T]
    unit: str
    default: T  # when the object does not carry the value
    on_bad: T  # when it carries a malformed one
    default_doc: str
    on_bad_doc: str
    meaning: str

    @property
    def where(self) -> str:
        return f"{self.source} {self.key}"


class Reading:
    """Collects the per-object errors of reading one object's facts."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name
        self.errors: list[ObjectError] = []

    def get(self, fact: Fact[T], raw: object) -> T:
        """The fact's value, its default when ``raw`` is None, ``on_bad`` plus an error if bad."""
        if raw is None:
            return fact.default
        try:
            return fact.parser(raw)
        except BadValueError as exc:
            self.errors.append(
                ObjectError(
                    kind=self.kind,
                    name=self.name,
                    where=fact.where,
                    got=describe(raw),
                    why=str(exc),
                )
            )
            return fact.on_bad


_LABEL = text(LABEL_MAX_CHARS)
_NAME = text(NAME_MAX_CHARS)
_SPEC = RLJobSpec.model_fields

# -- Pod -------------------------------------------------------------------
POD_JOB: Final = Fact(
    "Pod", "label", names.LABEL_JOB, _LABEL, "-", "", "",
    '""', '"" (not an RLix job)', "the RLJob the pod belongs to",
)  # fmt: skip
POD_ROLE: Final = Fact(
    "Pod", "label", names.LABEL_ROLE, _LABEL, "-", "", "",
    '""', '""', "the role of the RLJob the pod plays",
)  # fmt: skip
POD_PREEMPTIBLE: Final = Fact(
    "Pod", "label or annotation", names.LABEL_PREEMPTIBLE, FLAG, "-", True, False,
    "true (Kubernetes' rule: a lower priority may be preempted)", "false (protected)",
    '"false" protects the pod from preemption, always',
)  # fmt: skip
POD_PRIORITY_ANNOTATION: Final = Fact[int | None](
    "Pod", "annotation", names.ANNOTATION_PRIORITY, integer(*INT32), "-", None, None,
    "spec.priority", "spec.priority",
    "RLix priority (the RLJob's spec.priority); wins over spec.priority",
)  # fmt: skip
POD_PRIORITY: Final = Fact(
    "Pod", "field", "spec.priority", integer(*INT32), "-", 0, 0,
    "0", "0", "Kubernetes priority (from the PriorityClass); used without rlix.io/priority",
)  # fmt: skip
POD_GANG_SIZE: Final = Fact(
    "Pod", "annotation", names.ANNOTATION_GANG_SIZE, integer(1, MAX_GANG), "pods", 1, 1,
    "1", "1", "pods of the job that must run (and be preempted) together",
)  # fmt: skip
POD_MEMORY: Final = Fact[dict[Phase, int]](
    "Pod", "annotation", names.ANNOTATION_GPU_MEMORY_MIB, MEMORY, "MiB per GPU", {}, {},
    "the whole GPU", "the whole GPU",
    "per-GPU memory; a phase not listed costs the pod's peak",
)  # fmt: skip
POD_PHASE: Final = Fact[Phase | None](
    "Pod", "annotation", names.ANNOTATION_PHASE, PHASE, "-", None, None,
    "unknown (costs the peak)", "unknown (costs the peak)",
    "current phase (the node agent keeps it up to date)",
)  # fmt: skip
POD_PHASE_SECONDS: Final = Fact[dict[Phase, float]](
    "Pod", "annotation", names.ANNOTATION_PHASE_SECONDS, PHASE_SECONDS, "s per iteration", {}, {},
    "unknown (every declared phase at full pressure)",
    "unknown (every declared phase at full pressure)",
    "seconds of one iteration in each phase (idle: waiting on the job's other roles); "
    "the sharing rules weigh a pair by it",
)  # fmt: skip
POD_SUSPENDED: Final = Fact(
    "Pod", "annotation", names.ANNOTATION_SUSPENDED, FLAG, "-", False, False,
    "false", "false", "memory parked off the GPU; its room is kept",
)  # fmt: skip
POD_LOADS_THROUGH_GATE: Final = Fact(
    "Pod", "annotation", names.ANNOTATION_LOADS_THROUGH_GATE, FLAG, "-", False, False,
    "false", "false",
    "its first allocation waits at the phase gate (rlix.loading()): a parking gate may pair it "
    "by turns",
)  # fmt: skip
POD_GPU_INDICES: Final = Fact(
    "Pod", "annotation", names.ANNOTATION_GPU_INDICES, GPU_INDICES, "GPU index", (), (),
    "spread over the emptiest GPUs", "spread over the emptiest GPUs", "GPUs the pod holds",
)  # fmt: skip
POD_ADMITTED_NODE: Final = Fact[str | None](
    "Pod", "annotation", names.ANNOTATION_ADMITTED_NODE, _NAME, "-", None, None,
    "none", "none", "where the operator's admission planned an unbound pod",
)  # fmt: skip
POD_GPUS: Final = Fact(
    "Pod", "field", f"spec.[init]containers[*].resources.{{limits,requests}}[{names.GPU_RESOURCE}]",
    integer(0, MAX_POD_GPUS), "GPUs", 0, 0, "0", "0 (for that container)",
    "GPUs requested: max(sum over containers, largest init container)",
)  # fmt: skip
POD_CLAIMED_GPUS: Final = Fact(
    "Pod", "annotation", names.ANNOTATION_CLAIMED_GPUS, integer(0, MAX_POD_GPUS), "GPUs", 0, 0,
    "0", "0", "GPUs held through the pod's gpu.rlix.io ResourceClaim (wins when larger)",
)  # fmt: skip
POD_NODE: Final = Fact[str | None](
    "Pod", "field", "spec.nodeName", _NAME, "-", None, None,
    "unbound", "unbound", "the node the pod is bound to",
)  # fmt: skip

# -- Node ------------------------------------------------------------------
NODE_GPU_COUNT: Final = Fact[int | None](
    "Node", "label", names.NODE_LABEL_GPU_COUNT, integer(0, MAX_NODE_GPUS), "GPUs", None, None,
    "allocatable / replicas", "allocatable / replicas",
    "physical GPUs (NVIDIA GPU feature discovery); wins over allocatable",
)  # fmt: skip
NODE_ALLOCATABLE: Final = Fact(
    "Node", "field", f"status.allocatable[{names.GPU_RESOURCE}] (else status.capacity)",
    integer(0, MAX_NODE_GPUS * MAX_GPU_REPLICAS), "GPUs", 0, 0, "0", "0",
    "GPUs the device plugin offers; time-slicing offers each GPU `replicas` times",
)  # fmt: skip
NODE_GPU_REPLICAS: Final = Fact(
    "Node", "label", names.NODE_LABEL_GPU_REPLICAS, integer(1, MAX_GPU_REPLICAS), "-", 1, 1,
    "1", "1", "NVIDIA time-slicing replicas per GPU (divides allocatable)",
)  # fmt: skip
NODE_GPU_MEMORY: Final = Fact(
    "Node", "label", names.NODE_LABEL_GPU_MEMORY_MIB, MIB, "MiB per GPU", 0, 0,
    "0 (unknown)", "0 (unknown)", "memory of one GPU",
)  # fmt: skip
NODE_GPU_PRODUCT: Final = Fact(
    "Node", "label", names.NODE_LABEL_GPU_PRODUCT, _LABEL, "-", "", "",
    '""', '""', "GPU model",
)  # fmt: skip
NODE_NVLINK_DOMAIN: Final = Fact[str | None](
    "Node", "label", names.LABEL_NVLINK_DOMAIN, _LABEL, "-", None, None,
    "none (NVLink ends at the node)", "none", "nodes sharing one are NVLink-joined",
)  # fmt: skip
NODE_GPU_STATE: Final = Fact(
    "Node", "annotation", names.ANNOTATION_NODE_GPUS, NODE_GPUS, "MiB, 0..1", (), (),
    "no agent data", "no agent data", "live GPU state the node agent publishes",
)  # fmt: skip
NODE_GPU_CLAIMS: Final = Fact(
    "Node", "annotation", names.ANNOTATION_NODE_GPU_CLAIMS, FLAG, "-", False, False,
    "false (whole GPUs)", "false (whole GPUs)",
    "GPUs published as gpu.rlix.io devices with consumable memory (the agent sets it)",
)  # fmt: skip


def _overcommit(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise BadValueError("must be a number >= 1")
    try:
        value = float(raw)
    except ValueError:
        raise BadValueError("must be a number >= 1") from None
    if not 1 <= value <= MAX_OVERCOMMIT:
        raise BadValueError(f"must be between 1 and {MAX_OVERCOMMIT:g}")
    return value


MAX_OVERCOMMIT: Final = 16.0
NODE_MEMORY_OVERCOMMIT: Final = Fact(
    "Node", "annotation", names.ANNOTATION_NODE_MEMORY_OVERCOMMIT,
    Parser("number", f"1..{MAX_OVERCOMMIT:g}", _overcommit), "x physical", 1.0, 1.0,
    "1 (no headroom)", "1 (no headroom)",
    "published GPU memory / physical on a gpu-claims node: headroom for parked memory",
)  # fmt: skip
NODE_UNSCHEDULABLE: Final = Fact(
    "Node", "field", "spec.unschedulable", BOOL, "-", False, True,
    "false", "true (cordoned)", "cordoned",
)  # fmt: skip

# -- RLJob (as the CLI and demo read it; the operator validates the whole spec) --
JOB_PRIORITY: Final = Fact(
    "RLJob", "field", "spec.priority", integer(0, MAX_PRIORITY), "-",
    _SPEC["priority"].default, _SPEC["priority"].default,
    str(_SPEC["priority"].default), str(_SPEC["priority"].default), "the job's priority",
)  # fmt: skip
JOB_PREEMPTIBLE_ROLLOUT: Final = Fact(
    "RLJob", "field", "spec.preemptibleRollout", BOOL, "-",
    _SPEC["preemptible_rollout"].default, False,
    str(_SPEC["preemptible_rollout"].default).lower(), "false",
    "rollout pods may be suspended in place",
)  # fmt: skip
JOB_ALGORITHM: Final = Fact(
    "RLJob", "field", "spec.algorithm", choice([a.value for a in Algorithm]), "-",
    str(_SPEC["algorithm"].default), str(_SPEC["algorithm"].default),
    str(_SPEC["algorithm"].default), str(_SPEC["algorithm"].default), "the RL algorithm",
)  # fmt: skip
JOB_STATE: Final = Fact[str | None](
    "RLJob", "field", "status.state", choice([s.value for s in JobState]), "-", None, None,
    "none (shown as Pending)", "none", "where the job is in its life",
)  # fmt: skip
JOB_PHASE: Final = Fact[Phase | None](
    "RLJob", "field", "status.phase", PHASE, "-", None, None,
    "unknown", "unknown", "the trainer's current phase",
)  # fmt: skip
JOB_GPUS: Final = Fact[int | None](
    "RLJob", "field", "status.gpus", integer(0, MAX_GANG * MAX_POD_GPUS), "GPUs", None, None,
    "the pods' GPUs", "the pods' GPUs", "GPUs the job holds",
)  # fmt: skip
JOB_ITERATIONS: Final = Fact(
    "RLJob", "field", "status.iterations", integer(0, 2**63 - 1), "-", 0, 0,
    "0", "0", "iterations the trainer reported",
)  # fmt: skip

FACTS: Final[tuple[Fact[Any], ...]] = (
    POD_JOB, POD_ROLE, POD_PREEMPTIBLE, POD_PRIORITY_ANNOTATION, POD_PRIORITY, POD_GANG_SIZE,
    POD_MEMORY, POD_PHASE, POD_PHASE_SECONDS, POD_SUSPENDED, POD_LOADS_THROUGH_GATE,
    POD_GPU_INDICES, POD_ADMITTED_NODE, POD_GPUS, POD_CLAIMED_GPUS, POD_NODE, NODE_GPU_COUNT,
    NODE_ALLOCATABLE, NODE_GPU_REPLICAS,
    NODE_GPU_MEMORY, NODE_GPU_PRODUCT, NODE_NVLINK_DOMAIN, NODE_GPU_STATE, NODE_GPU_CLAIMS,
    NODE_MEMORY_OVERCOMMIT, NODE_UNSCHEDULABLE,
    JOB_PRIORITY, JOB_PREEMPTIBLE_ROLLOUT, JOB_ALGORITHM, JOB_STATE, JOB_PHASE, JOB_GPUS,
    JOB_ITERATIONS,
)  # fmt: skip
