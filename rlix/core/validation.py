"""Cross-field and cluster-aware RLJob rules, shared by the webhook and the operator.

The CRD schema checks each field alone and a few CEL rules; what needs the
cluster (is there a GPU with that much memory? a node with that many GPUs?)
cannot live in the schema, so the webhook runs these functions with a
``Capacity`` taken from its node cache. The operator runs them too, because a
cluster without the webhook must still not admit a job that can never fit.
Every error names the field, so ``kubectl apply`` says what to fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rlix.core import mps, names
from rlix.core.rljob import (
    DNS_LABEL,
    JOB_NAME_MAX_LENGTH,
    Algorithm,
    PodTemplate,
    RLJob,
    RLJobSpec,
    Role,
    RoleKind,
)
from rlix.core.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str  # "spec.roles[0].gpusPerReplica"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class Capacity:
    """The largest thing the cluster could ever run, from its schedulable GPU nodes."""

    max_gpu_memory_mib: int
    max_gpus_per_node: int
    total_gpus: int

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Capacity | None:
        """``None`` when the cluster has no GPU node yet: then nothing can be judged."""
        nodes = [n for n in snapshot.nodes.values() if n.schedulable and n.gpu_count > 0]
        if not nodes:
            return None
        return cls(
            max_gpu_memory_mib=max(n.gpu_memory_mib for n in nodes),
            max_gpus_per_node=max(n.gpu_count for n in nodes),
            total_gpus=sum(n.gpu_count for n in nodes),
        )


def field_path(loc: Iterable[int | str]) -> str:
    """Render a pydantic error location the way Kubernetes names fields."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _errors_from(exc: ValidationError, prefix: tuple[str, ...]) -> list[FieldError]:
    return [FieldError(field_path((*prefix, *e["loc"])), e["msg"]) for e in exc.errors()]


def spec_errors(spec: RLJobSpec) -> list[FieldError]:
    """The rules the CRD also states in CEL; kept here for clusters without them."""
    errors: list[FieldError] = []
    if not any(r.kind is RoleKind.TRAINER for r in spec.roles):
        errors.append(FieldError("spec.roles", "roles must include a role of kind trainer"))
    seen: set[str] = set()
    for i, role in enumerate(spec.roles):
        where = f"spec.roles[{i}]"
        if role.name in seen:
            errors.append(FieldError(f"{where}.name", f"duplicate role name {role.name!r}"))
        seen.add(role.name)
        if role.kind is RoleKind.TRAINER and role.gpus_per_replica == 0:
            errors.append(FieldError(f"{where}.gpusPerReplica", "a trainer role needs GPUs"))
        if role.gpus_per_replica > 0 and role.gpu_memory is None:
            errors.append(FieldError(f"{where}.gpuMemoryMiB", "required when the role uses GPUs"))
        if role.gpus_per_replica == 0 and role.gpu_memory is not None:
            errors.append(FieldError(f"{where}.gpuMemoryMiB", "needs gpusPerReplica > 0"))
        if role.mps is not None:
            errors += _mps_errors(role, where)
        errors += _elastic_errors(spec, role, where)
        if spec.algorithm is Algorithm.GRPO and role.kind is RoleKind.CRITIC:
            errors.append(FieldError(f"{where}.kind", "GRPO has no critic; use algorithm PPO"))
        if (role.image is None) == (role.template is None):
            errors.append(
                FieldError(f"{where}.image", "set exactly one of image (short form) and template")
            )
        if role.template is not None:
            if role.command or role.args or role.env:
                errors.append(
                    FieldError(
                        f"{where}.template",
                        "command, args and env belong in the template's containers "
                        "when a template is given",
                    )
                )
            errors += template_errors(role.template, f"{where}.template")
    return errors


def _mps_errors(role: Role, where: str) -> list[FieldError]:
    """An MPS role needs GPUs, and leaves MPS's env and volumes to RLix."""
    errors: list[FieldError] = []
    if role.gpus_per_replica == 0:
        errors.append(FieldError(f"{where}.mps", "needs gpusPerReplica > 0 (MPS shares GPUs)"))
    body = role.pod_template().spec.body()
    for i, container in enumerate(body["containers"]):
        for j, var in enumerate(container.get("env") or []):
            if isinstance(var, dict) and var.get("name") in mps.OWNED_ENV:
                errors.append(
                    FieldError(
                        f"{where}.template.spec.containers[{i}].env[{j}].name",
                        f"{var['name']} is set by RLix for an mps role (docs/dra.md)",
                    )
                )
    for volume in body.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") in (mps.VOLUME_PIPE, mps.VOLUME_SHM):
            errors.append(
                FieldError(
                    f"{where}.template.spec.volumes[{volume['name']}]",
                    "this volume name is RLix's (the node's MPS directory)",
                )
            )
    return errors


def _elastic_errors(spec: RLJobSpec, role: Role, where: str) -> list[FieldError]:
    if role.elastic is None:
        return []
    errors = []
    if role.kind is not RoleKind.ROLLOUT:
        errors.append(
            FieldError(f"{where}.elastic", f"only a rollout role may be elastic, not {role.kind}")
        )
    if role.elastic.min_replicas > role.replicas:
        errors.append(
            FieldError(
                f"{where}.elastic.minReplicas",
                f"{role.elastic.min_replicas} exceeds the role's {role.replicas} replicas",
            )
        )
    if not spec.preemptible_rollout:
        errors.append(
            FieldError(
                "spec.preemptibleRollout",
                f"role {role.name!r} is elastic: its replicas are suspended in place, "
                "which preemptibleRollout false forbids",
            )
        )
    return errors


# What RLix sets on every role pod, and where the RLJob says it instead.
_OWNED_POD_FIELDS = {
    "hostname": "RLix sets it to <job>-<role>-<index>",
    "subdomain": "RLix sets it to the job's headless Service (the job's name)",
    "priorityClassName": "RLix sets it from the RLJob's spec.priority",
    "priority": "RLix sets it from the RLJob's spec.priority (through its PriorityClass)",
}


def template_errors(template: PodTemplate, where: str) -> list[FieldError]:
    """Where a role's pod template contradicts what RLix owns on the pod.

    RLix adds its scheduler, labels, annotations, env, GPU requests and the
    agent socket; a template that sets one of them differently would either be
    overwritten silently or break scheduling, so it is refused by name.
    """
    errors: list[FieldError] = []
    prefix = f"{names.GROUP}/"
    for kind, found in (
        ("labels", template.metadata.labels),
        ("annotations", template.metadata.annotations),
    ):
        for key in sorted(k for k in found if k.startswith(prefix)):
            errors.append(
                FieldError(f"{where}.metadata.{kind}[{key}]", f"the {prefix} prefix is RLix's own")
            )
    spec = template.spec
    if spec.scheduler_name not in (None, names.SCHEDULER_NAME):
        errors.append(
            FieldError(
                f"{where}.spec.schedulerName",
                f"must be {names.SCHEDULER_NAME} or unset: RLix places the job's pods",
            )
        )
    if spec.restart_policy not in (None, "Never"):
        errors.append(
            FieldError(
                f"{where}.spec.restartPolicy",
                "must be Never or unset: RLix restarts failed pods (spec.backoffLimit)",
            )
        )
    body = spec.body()
    for field, why in _OWNED_POD_FIELDS.items():
        if field in body:
            errors.append(FieldError(f"{where}.spec.{field}", f"must be unset: {why}"))
    for volume in body.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name") == names.AGENT_SOCKET_VOLUME:
            errors.append(
                FieldError(
                    f"{where}.spec.volumes[{names.AGENT_SOCKET_VOLUME}]",
                    "this volume name is RLix's (the node agent's socket)",
                )
            )
    for i, container in enumerate(body["containers"]):
        errors += _container_errors(container, f"{where}.spec.containers[{i}]")
    return errors


def _container_errors(container: dict[str, Any], where: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for j, var in enumerate(container.get("env") or []):
        if isinstance(var, dict) and var.get("name") in names.OWNED_ENV:
            errors.append(
                FieldError(
                    f"{where}.env[{j}].name",
                    f"{var['name']} is set by RLix (docs/rljob.md, Environment)",
                )
            )
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        found = resources.get(kind) if isinstance(resources, dict) else None
        if isinstance(found, dict) and names.GPU_RESOURCE in found:
            errors.append(
                FieldError(
                    f"{where}.resources.{kind}[{names.GPU_RESOURCE}]",
                    "RLix requests GPUs from the role's gpusPerReplica; set that instead",
                )
            )
    return errors


def capacity_errors(spec: RLJobSpec, capacity: Capacity) -> list[FieldError]:
    """Rules that need the cluster: a job that could never be placed is refused."""
    errors: list[FieldError] = []
    for i, role in enumerate(spec.roles):
        where = f"spec.roles[{i}]"
        if role.gpus_per_replica > capacity.max_gpus_per_node:
            errors.append(
                FieldError(
                    f"{where}.gpusPerReplica",
                    f"{role.gpus_per_replica} GPUs per replica, but no node has more than "
                    f"{capacity.max_gpus_per_node}",
                )
            )
        memory = role.gpu_memory.by_phase() if role.gpu_memory else {}
        for phase, mib in memory.items():
            if mib > capacity.max_gpu_memory_mib:
                errors.append(
                    FieldError(
                        f"{where}.gpuMemoryMiB.{phase.value}",
                        f"{mib} MiB, but the largest GPU in the cluster has "
                        f"{capacity.max_gpu_memory_mib} MiB",
                    )
                )
    if spec.gpus > capacity.total_gpus:
        errors.append(
            FieldError(
                "spec.roles",
                f"the job needs {spec.gpus} GPUs (replicas x gpusPerReplica), but the "
                f"cluster has {capacity.total_gpus}",
            )
        )
    return errors


def parse(manifest: Mapping[str, Any]) -> tuple[RLJob | None, list[FieldError]]:
    """Parse a manifest into the typed model, or say which fields are wrong."""
    errors: list[FieldError] = []
    name = manifest.get("metadata", {}).get("name", "")
    if isinstance(name, str) and len(name) > JOB_NAME_MAX_LENGTH:
        errors.append(
            FieldError("metadata.name", f"must be at most {JOB_NAME_MAX_LENGTH} characters")
        )
    if isinstance(name, str) and name and not re.fullmatch(DNS_LABEL, name):
        errors.append(
            FieldError(
                "metadata.name",
                "must be a DNS label (lowercase letters, digits and '-', no '.'): "
                "it names the job's pods and their hostnames",
            )
        )
    try:
        # Strict JSON mode: like the API server, "3" is not an integer and "yes"
        # is not a boolean, while enums still arrive as their string values.
        job = RLJob.model_validate_json(json.dumps(manifest), strict=True)
    except ValidationError as exc:
        return None, errors + _errors_from(exc, ())
    return job, errors


def validate_manifest(
    manifest: Mapping[str, Any], capacity: Capacity | None = None
) -> list[FieldError]:
    """Every rule RLix knows, schema-level and cross-field; empty means valid."""
    job, errors = parse(manifest)
    if job is None:
        return errors
    errors += spec_errors(job.spec)
    if capacity is not None:
        errors += capacity_errors(job.spec, capacity)
    return errors
