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

from rlix.core.names import SCHEDULER_NAME as SCHEDULER
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
# The container a short-form role (image/command/args/env) runs in.
SHORT_FORM_CONTAINER: Final = "main"


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
    """Expected seconds per iteration in each phase; RLix refines it from observation.
    With iterations, their sum sizes the job until its first iteration is measured.
    Each pod carries its part (rlix.io/phase-seconds): with an interference matrix,
    RLix lets two jobs share a GPU only where their phases are expected to pay."""

    rollout: _Seconds | None = None
    scoring: _Seconds | None = None
    training: _Seconds | None = None
    weight_sync: _Seconds | None = Field(default=None, alias="weight-sync")


class EnvVar(_Model):
    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    value: str = Field(default="", max_length=32_768)


class TemplateMetadata(_Model):
    """The labels and annotations a template adds to every pod of its role.

    A name or namespace on a template would be ignored (RLix names the pods),
    so only these two are accepted, as JobSet and Kueue do in practice.
    """

    labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(default_factory=dict)
    # The API server bounds all annotations of an object to 256 KiB together.
    annotations: dict[str, Annotated[str, Field(max_length=262_144)]] = Field(default_factory=dict)


class Container(_Model):
    """A core/v1 Container: name and image typed, every other field passed through.

    The API server validates the rest when the operator creates the pod; the
    schema keeps it (``x-kubernetes-preserve-unknown-fields``) instead of
    copying the ~3,000-line Container schema into the CRD.
    """

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    image: str = Field(min_length=1, max_length=512, pattern=IMAGE)


# The same rules as rlix.core.validation.template_errors, for a cluster
# without the webhook: the API server names the field too.
_POD_SPEC_RULES: Final[list[Any]] = [
    {
        "rule": f"!has(self.schedulerName) || self.schedulerName == '{SCHEDULER}'",
        "message": f"must be {SCHEDULER} or unset: RLix places the job's pods",
        "fieldPath": ".schedulerName",
    },
    {
        "rule": "!has(self.restartPolicy) || self.restartPolicy == 'Never'",
        "message": "must be Never or unset: RLix restarts failed pods",
        "fieldPath": ".restartPolicy",
    },
    *[
        {
            "rule": f"!has(self.{owned})",
            "message": f"must be unset: RLix sets {owned}",
            "fieldPath": f".{owned}",
        }
        for owned in ("hostname", "subdomain", "priorityClassName", "priority")
    ],
]


class PodSpec(_Model):
    """A core/v1 PodSpec: what RLix reads or owns is typed, the rest passed through.

    ``containers`` is typed because RLix adds its env, socket mount and GPU
    requests to them; the fields RLix owns (schedulerName, hostname,
    subdomain, priorityClassName, priority, restartPolicy) are typed so the
    validation can name them when a template contradicts RLix.
    """

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-validations": _POD_SPEC_RULES,
        },
    )

    containers: list[Container] = Field(
        min_length=1,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    scheduler_name: str | None = Field(default=None, max_length=253)
    hostname: str | None = Field(default=None, max_length=63)
    subdomain: str | None = Field(default=None, max_length=63)
    priority_class_name: str | None = Field(default=None, max_length=253)
    priority: int | None = None
    restart_policy: str | None = Field(default=None, max_length=16)

    def body(self) -> dict[str, Any]:
        """The spec as the API server would store it (camelCase, extras kept)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class PodTemplate(_Model):
    """A core/v1 PodTemplateSpec, as JobSet, KubeRay and Kueue's integrations take it."""

    metadata: TemplateMetadata = Field(default_factory=TemplateMetadata)
    spec: PodSpec


class Mps(_Model):
    """Run the role's GPU processes as CUDA MPS clients (docs/dra.md, "Kernels side by side").

    Its pods go only to nodes whose agent runs the MPS control daemon
    (``rlix.io/mps: "true"``); each process is limited to the role's memory
    budget on each GPU by MPS itself.
    """

    active_thread_percentage: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Share of each GPU's SMs one process of the role may use "
        "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); unset: all of them. Measured on an H200 "
        "(bench/results/gpu_mps.md): a limit slows the process even alone and lets "
        "co-runners overlap no better; set one only to keep a bandwidth-bound process "
        "from starving beside a compute-bound one.",
    )


class Elastic(_Model):
    """An elastic rollout role: replicas above ``minReplicas`` may be lent.

    The conductor may suspend those replicas in place (their memory parked, the
    pods kept) to lend their GPUs, and resumes them; it never leaves fewer than
    ``minReplicas`` running that way. The client library tells the trainer
    which replicas are active (``rlix.active_replicas()``) so it routes work
    only to them. docs/conductor.md, "Elastic rollout".
    """

    min_replicas: int = Field(ge=1, le=MAX_REPLICAS)


class Role(_Model):
    """One kind of pod in the job, e.g. the policy trainer or the rollout workers.

    Its pods come from ``template`` (a full pod template) or from the short
    form ``image``/``command``/``args``/``env``, which stands for a template
    with one container named ``main``; exactly one of the two.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.image) != has(self.template)",
                    "message": "set exactly one of image (the short form) and template",
                    "fieldPath": ".image",
                },
                {
                    "rule": "!has(self.template) || "
                    "(!has(self.command) && !has(self.args) && !has(self.env))",
                    "message": "command, args and env belong in the template's containers "
                    "when a template is given",
                    "fieldPath": ".template",
                },
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
                {
                    "rule": "self.gpusPerReplica > 0 || !has(self.mps)",
                    "message": "mps needs gpusPerReplica > 0 (MPS shares GPUs)",
                    "fieldPath": ".mps",
                },
                {
                    "rule": "!has(self.elastic) || self.kind == 'rollout'",
                    "message": "only a rollout role may be elastic",
                    "fieldPath": ".elastic",
                },
                {
                    "rule": "!has(self.elastic) || self.elastic.minReplicas <= self.replicas",
                    "message": "minReplicas must not exceed the role's replicas",
                    "fieldPath": ".elastic.minReplicas",
                },
            ]
        }
    )

    name: str = Field(min_length=1, max_length=ROLE_NAME_MAX_LENGTH, pattern=DNS_LABEL)
    kind: RoleKind
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    gpus_per_replica: int = Field(default=1, ge=0, le=MAX_GPUS_PER_REPLICA)
    image: str | None = Field(default=None, min_length=1, max_length=512, pattern=IMAGE)
    template: PodTemplate | None = None
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
    mps: Mps | None = None
    loads_through_gate: bool = Field(
        default=False,
        description="Every process of this role allocates GPU memory first inside "
        "rlix.loading() (an engine's KV cache too), so that the load waits at the node "
        "agent's phase gate. Where the agents park at the gate, only such pods may share a "
        "GPU by turns with a partner whose peak does not fit beside theirs.",
    )
    elastic: Elastic | None = Field(
        default=None,
        description="Rollout replicas above minReplicas may be suspended in place to lend "
        "their GPUs (rollout roles of a job with preemptibleRollout only).",
    )

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    def pod_template(self) -> PodTemplate:
        """The role's template; the short form becomes one container named ``main``."""
        if self.template is not None:
            return self.template
        container: dict[str, Any] = {"name": SHORT_FORM_CONTAINER, "image": self.image or ""}
        if self.command:
            container["command"] = list(self.command)
        if self.args:
            container["args"] = list(self.args)
        if self.env:
            container["env"] = [{"name": e.name, "value": e.value} for e in self.env]
        return PodTemplate(spec=PodSpec.model_validate({"containers": [container]}))


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
                    "rule": "self.preemptibleRollout || !self.roles.exists(r, has(r.elastic))",
                    "message": "roles: an elastic role's replicas are suspended in place, "
                    "which preemptibleRollout false forbids",
                    "fieldPath": ".preemptibleRollout",
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
    iterations: int | None = Field(
        default=None,
        ge=1,
        le=100_000_000,
        description="Planned training iterations (TRL's max_steps, verl's "
        "total_training_steps). With phaseProfile, or once an iteration is measured, "
        "it sizes the job: inside a priority the least expected GPU-seconds left goes "
        "first. Unset: arrival order.",
    )

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def declared_iteration_s(self) -> float:
        """Seconds per iteration that phaseProfile declares (0: none)."""
        p = self.phase_profile
        if p is None:
            return 0.0
        return float(sum(s or 0 for s in (p.rollout, p.scoring, p.training, p.weight_sync)))

    def role(self, name: str) -> Role | None:
        return next((r for r in self.roles if r.name == name), None)

    def pod_phase_seconds(self, role: Role) -> dict[Phase, int]:
        """Seconds one iteration keeps a pod of ``role`` in each phase, by
        phaseProfile (``rlix.io/phase-seconds``; empty without one).

        A job with a rollout role is disaggregated: its rollout pods work in
        rollout and weight sync and wait (``idle``) through scoring and
        training, its trainer pods the other way round (the simulator's
        ``ROLE_ACTIVE``). A job without one runs every phase in its trainer.
        Reference, reward and critic roles are left undeclared: when they work
        depends on the framework, and undeclared is judged at full pressure.
        A role without GPUs holds no GPU's turn: nothing to declare.
        """
        p = self.phase_profile
        if p is None or role.gpus_per_replica == 0:
            return {}
        seconds = {
            Phase.ROLLOUT: p.rollout or 0,
            Phase.SCORING: p.scoring or 0,
            Phase.TRAINING: p.training or 0,
            Phase.WEIGHT_SYNC: p.weight_sync or 0,
        }
        disaggregated = any(r.kind is RoleKind.ROLLOUT for r in self.roles)
        if role.kind is RoleKind.ROLLOUT:
            works = {Phase.ROLLOUT, Phase.WEIGHT_SYNC}
        elif role.kind is RoleKind.TRAINER:
            works = set(seconds) - {Phase.ROLLOUT} if disaggregated else set(seconds)
        else:
            return {}
        out = {phase: s for phase, s in seconds.items() if phase in works and s > 0}
        idle = sum(s for phase, s in seconds.items() if phase not in works)
        if idle > 0:
            out[Phase.IDLE] = idle
        return out if any(s > 0 for phase, s in out.items() if phase is not Phase.IDLE) else {}


# Condition types on RLJob.status.conditions.
CONDITION_ADMITTED: Final = "Admitted"
CONDITION_RUNNING: Final = "Running"
CONDITION_FAILED: Final = "Failed"
# True once the trainer finished: `kubectl wait --for=condition=Succeeded rlj/NAME`.
CONDITION_SUCCEEDED: Final = "Succeeded"


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
    waiting: int = Field(
        default=0,
        ge=0,
        description="Pods of the role waiting their turn at their node's phase gate "
        "(rlix.io/waiting-for-turn): a GPU they share is busy with a partner's phase.",
    )


class RLJobStatus(_Model):
    """What the operator observed; every field is derived, none is an input."""

    observed_generation: int | None = Field(default=None, ge=0)
    state: JobState | None = None
    reason: str | None = Field(
        default=None,
        max_length=1024,
        pattern=_REASON,
        description="Why the job is in its state (the reason of its latest condition); "
        "the printer column Reason.",
    )
    phase: Phase | None = Field(default=None, description="The trainer's current phase.")
    phase_since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    gpus: int | None = Field(default=None, ge=0)
    iterations: int = Field(default=0, ge=0)
    admitted_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    restarts: int = Field(default=0, ge=0)
    waiting_for_turn: int = Field(
        default=0,
        ge=0,
        description="Pods of the job waiting their turn at their node's phase gate, every "
        "role's waiting summed; the printer column Waiting (kubectl get -o wide).",
    )
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
