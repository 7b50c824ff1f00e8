"""The RLJob API: the one typed definition of what a researcher submits.

The CRD YAML in ``crds/`` is generated from these models (``rlix.core.crdgen``),
so the API server, the webhook and the operator cannot disagree about a field.
Field constraints are written as pydantic constraints because both sides read
them: pydantic enforces them in Python, the generator turns them into OpenAPI
``minimum``/``maxLength``/``enum``. Rules that relate two fields are CEL rules
(``x-kubernetes-validations``) mirrored in ``rlix.core.validation``.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from rlix.core.phases import Phase

# Pod names are "<job>-<role>-<index>" and must stay valid DNS labels (63) so
# the pod hostname is not truncated: 40 + 1 + 16 + 1 + 4 digits = 62.
JOB_NAME_MAX_LENGTH: Final = 40
ROLE_NAME_MAX_LENGTH: Final = 16
MAX_ROLES: Final = 16
MAX_REPLICAS: Final = 4096
# No node has more GPUs than this (an NVL72 rack is split into 4-8 GPU nodes);
# anything larger is a typo, and catching it in the schema names the field.
MAX_GPUS_PER_REPLICA: Final = 16
# 1 TiB per GPU is far above any GPU made; the webhook checks the real cluster.
MAX_GPU_MEMORY_MIB: Final = 1_048_576
MAX_PRIORITY: Final = 1_000_000
DNS_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# The kubelet and the API server refuse an image with surrounding whitespace
# (and a container runtime could not pull it): refuse it at the RLJob already.
IMAGE: Final = r"^\S(.*\S)?$"
ENV_NAME: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class _Model(BaseModel):
    # extra="forbid" matches what `kubectl apply` (strict field validation) does
    # with unknown fields, so a typo such as an unknown phase name fails in
    # Python too instead of being silently pruned.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class RoleKind(enum.StrEnum):
    """What a role does in the RL loop; the trainer is the one every job needs."""

    TRAINER = "trainer"
    ROLLOUT = "rollout"
    REFERENCE = "reference"
    REWARD = "reward"
    CRITIC = "critic"


class Algorithm(enum.StrEnum):
    GRPO = "GRPO"
    PPO = "PPO"
    DPO = "DPO"
    OTHER = "Other"


class JobState(enum.StrEnum):
    """Where the job is in its life; the printer column ``State``."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


_MiB = Annotated[int, Field(ge=0, le=MAX_GPU_MEMORY_MIB)]
_Seconds = Annotated[int, Field(ge=0, le=7 * 24 * 3600)]


class PhaseMemory(_Model):
    """Per-GPU memory (MiB) a replica needs in each phase; unlisted phases cost the peak.

    At least one phase: an empty map on a GPU role has no peak to reserve, and
    the extender refuses pods without one.
    """

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    rollout: _MiB | None = None
    scoring: _MiB | None = None
    training: _MiB | None = None
    weight_sync: _MiB | None = Field(default=None, alias="weight-sync")
    idle: _MiB | None = None

    def by_phase(self) -> dict[Phase, int]:
        values = {
            Phase.ROLLOUT: self.rollout,
            Phase.SCORING: self.scoring,
            Phase.TRAINING: self.training,
            Phase.WEIGHT_SYNC: self.weight_sync,
            Phase.IDLE: self.idle,
        }
        return {phase: mib for phase, mib in values.items() if mib is not None}

    @model_validator(mode="after")
    def _not_empty(self) -> PhaseMemory:
        if not self.by_phase():
            raise ValueError("must list the MiB of at least one phase")
        return self


class PhaseProfile(_Model):
    """Expected seconds per iteration in each phase; RLix refines it from observation."""

    rollout: _Seconds | None = None
    scoring: _Seconds | None = None
    training: _Seconds | None = None
    weight_sync: _Seconds | None = Field(default=None, alias="weight-sync")


class EnvVar(_Model):
    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    value: str = Field(default="", max_length=32_768)


class Role(_Model):
    """One kind of pod in the job, e.g. the policy trainer or the rollout workers."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.gpusPerReplica > 0 || !has(self.gpuMemoryMiB)",
                    "message": "gpuMemoryMiB needs gpusPerReplica > 0",
                    "fieldPath": ".gpuMemoryMiB",
                },
                {
                    "rule": "self.gpusPerReplica == 0 || has(self.gpuMemoryMiB)",
                    "message": "gpuMemoryMiB is required when the role uses GPUs",
                    "fieldPath": ".gpuMemoryMiB",
                },
            ]
        }
    )

    name: str = Field(min_length=1, max_length=ROLE_NAME_MAX_LENGTH, pattern=DNS_LABEL)
    kind: RoleKind
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    gpus_per_replica: int = Field(default=1, ge=0, le=MAX_GPUS_PER_REPLICA)
    image: str = Field(min_length=1, max_length=512, pattern=IMAGE)
    command: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=64
    )
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=256)
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    gpu_memory: PhaseMemory | None = Field(default=None, alias="gpuMemoryMiB")

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica


class RLJobSpec(_Model):
    """What the researcher asks for."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.roles.exists(r, r.kind == 'trainer')",
                    "message": "roles must include a role of kind trainer",
                    "fieldPath": ".roles",
                },
                {
                    "rule": "self.roles.all(r, r.kind != 'trainer' || r.gpusPerReplica > 0)",
                    "message": "roles: a trainer role needs gpusPerReplica > 0",
                    "fieldPath": ".roles",
                },
                {
                    "rule": "self.algorithm != 'GRPO' || !self.roles.exists(r, r.kind == 'critic')",
                    "message": "roles: GRPO has no critic; use algorithm PPO for a critic role",
                    "fieldPath": ".roles",
                },
            ]
        }
    )

    algorithm: Algorithm = Algorithm.OTHER
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY)
    preemptible_rollout: bool = Field(
        default=True, description="Rollout pods may be suspended in place for a higher priority."
    )
    backoff_limit: int = Field(
        default=3, ge=0, le=100, description="Pod failures tolerated before the job fails."
    )
    roles: list[Role] = Field(
        min_length=1,
        max_length=MAX_ROLES,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            # Admission placed exactly these pods as one gang; growing a role
            # afterwards would bypass it. A transition rule says so at apply time.
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "roles cannot change once the job exists; delete and re-create it",
                }
            ],
        },
    )
    phase_profile: PhaseProfile | None = None

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)


# Condition types on RLJob.status.conditions.
CONDITION_ADMITTED: Final = "Admitted"
CONDITION_RUNNING: Final = "Running"
CONDITION_FAILED: Final = "Failed"


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(_Model):
    """A metav1.Condition: the standard way to say why an object is as it is."""

    type: str = Field(min_length=1, max_length=316)
    status: ConditionStatus
    reason: str = Field(min_length=1, max_length=1024, pattern=_REASON)
    message: str = Field(default="", max_length=32_768)
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(default=None, ge=0)


class RoleStatus(_Model):
    name: str = Field(max_length=ROLE_NAME_MAX_LENGTH)
    phase: Phase | None = None
    replicas: int = Field(default=0, ge=0)
    bound: int = Field(default=0, ge=0, description="Pods placed on a node.")
    ready: int = Field(default=0, ge=0)
    restarts: int = Field(default=0, ge=0)


class RLJobStatus(_Model):
    """What the operator observed; every field is derived, none is an input."""

    observed_generation: int | None = Field(default=None, ge=0)
    state: JobState | None = None
    phase: Phase | None = Field(default=None, description="The trainer's current phase.")
    phase_since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    gpus: int | None = Field(default=None, ge=0)
    iterations: int = Field(default=0, ge=0)
    admitted_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    restarts: int = Field(default=0, ge=0)
    phase_seconds: dict[str, float] = Field(
        default_factory=dict, description="Seconds spent in each phase so far."
    )
    roles: list[RoleStatus] = Field(
        default_factory=list,
        max_length=MAX_ROLES,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class RLJob(_Model):
    """A whole RLJob object as read from the API server."""

    model_config = ConfigDict(extra="ignore")

    api_version: str = "rlix.io/v1alpha1"
    kind: str = "RLJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: RLJobSpec
    status: RLJobStatus = Field(default_factory=RLJobStatus)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", "default"))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
