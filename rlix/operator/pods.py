"""Pure builders for the pods an RLJob runs, and their Workload twins.

Pod names are deterministic (``<job>-<role>-<index>``) so that creating a pod is
idempotent: an operator killed between "create" and "record" that starts again
gets 409 Conflict instead of a duplicate. The same description feeds the
admission policy (as ``Workload``) so what is admitted is what gets created.
"""

from __future__ import annotations

import json
from typing import Any

from rlix.core import names
from rlix.core.rljob import RLJob, Role, RoleKind
from rlix.core.snapshot import Workload

LABEL_INDEX = f"{names.GROUP}/replica-index"
# Where admission planned the pod. The scheduler may bind it elsewhere; until it
# binds, the reservation is what keeps the next admission pass from promising
# the same GPUs twice (also after an operator restart).
ANNOTATION_ADMITTED_NODE = names.ANNOTATION_ADMITTED_NODE
CONTAINER = "main"


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def desired_pod_names(job: RLJob) -> dict[str, tuple[Role, int]]:
    """Every pod the job should have, by name."""
    return {
        pod_name(job.name, role.name, i): (role, i)
        for role in job.spec.roles
        for i in range(role.replicas)
    }


def gang_size(job: RLJob) -> int:
    return sum(role.replicas for role in job.spec.roles)


def preemptible(job: RLJob, role: Role) -> bool:
    # Only rollout is suspended in place: a trainer holds optimizer state that
    # the job cannot afford to lose mid-step.
    return job.spec.preemptible_rollout and role.kind is RoleKind.ROLLOUT


def _memory_annotation(role: Role) -> str | None:
    if role.gpu_memory is None:
        return None
    return json.dumps({p.value: mib for p, mib in role.gpu_memory.by_phase().items()})


def build_pod(
    job: RLJob, role: Role, index: int, *, owner_uid: str, admitted_node: str | None = None
) -> dict[str, Any]:
    """The Pod object for replica ``index`` of ``role``."""
    name = pod_name(job.name, role.name, index)
    annotations = {
        names.ANNOTATION_PRIORITY: str(job.spec.priority),
        names.ANNOTATION_GANG_SIZE: str(gang_size(job)),
    }
    if admitted_node:
        annotations[ANNOTATION_ADMITTED_NODE] = admitted_node
    memory = _memory_annotation(role)
    if memory is not None:
        annotations[names.ANNOTATION_GPU_MEMORY_MIB] = memory
    env = [
        {"name": "RLIX_JOB", "value": job.name},
        {"name": "RLIX_ROLE", "value": role.name},
        {"name": "RLIX_REPLICA_INDEX", "value": str(index)},
        {"name": "RLIX_REPLICAS", "value": str(role.replicas)},
        *({"name": e.name, "value": e.value} for e in role.env),
    ]
    container: dict[str, Any] = {"name": CONTAINER, "image": role.image, "env": env}
    if role.command:
        container["command"] = list(role.command)
    if role.args:
        container["args"] = list(role.args)
    if role.gpus_per_replica:
        gpus = str(role.gpus_per_replica)
        container["resources"] = {
            "limits": {names.GPU_RESOURCE: gpus},
            "requests": {names.GPU_RESOURCE: gpus},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": {
                names.LABEL_JOB: job.name,
                names.LABEL_ROLE: role.name,
                LABEL_INDEX: str(index),
                names.LABEL_PREEMPTIBLE: "true" if preemptible(job, role) else "false",
            },
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": names.KIND,
                    "name": job.name,
                    "uid": owner_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "schedulerName": names.SCHEDULER_NAME,
            # The operator restarts failed pods itself, with backoff and a limit
            # counted per job; a kubelet restart loop would hide failures from it.
            "restartPolicy": "Never",
            "hostname": name,
            "containers": [container],
        },
    }


def planned_workloads(job: RLJob) -> tuple[Workload, ...]:
    """The job's pods as the admission policy sees them before they exist."""
    size = gang_size(job)
    return tuple(
        Workload(
            name=f"{job.namespace}/{name}",
            job=job.key,
            role=role.name,
            gpus=role.gpus_per_replica,
            memory_mib=role.gpu_memory.by_phase() if role.gpu_memory else {},
            priority=job.spec.priority,
            preemptible=preemptible(job, role),
            gang_size=size,
        )
        for name, (role, _) in desired_pod_names(job).items()
    )
