"""Pure builders for how a job's pods find each other: a headless Service and env.

Like JobSet and the Kubeflow training operator, every job gets a headless
Service named after the job, and each pod ``hostname: <job>-<role>-<i>`` with
``subdomain: <job>``, so ``<job>-<role>-<i>.<job>`` resolves in the namespace.
The Service publishes pods before they are Ready: ranks must find the head
while it is still starting, which is when a rendezvous happens.

Ranks follow PyTorchJob's convention (the master is rank 0): the head role, the
job's first trainer role, comes first, then the other roles in spec order.
Every pod of the job is one torchrun "node", so ``WORLD_SIZE`` is the gang
size and ``RANK`` equals ``NODE_RANK``; torchrun's ``--nnodes`` is
``$WORLD_SIZE`` and its ``--node_rank`` is ``$NODE_RANK``.
"""

from __future__ import annotations

from typing import Any

from rlix.core import names
from rlix.core.rljob import RLJob, Role, RoleKind


def service_name(job: RLJob) -> str:
    """The headless Service: the job's own name, which is also the pods' subdomain."""
    return job.name


def head_role(job: RLJob) -> Role:
    """The role whose replica 0 is the master / Ray head: the first trainer role."""
    return next((r for r in job.spec.roles if r.kind is RoleKind.TRAINER), job.spec.roles[0])


def pod_fqdn(job: RLJob, role: str, index: int) -> str:
    """The name a peer resolves in the job's namespace."""
    return f"{job.name}-{role}-{index}.{service_name(job)}"


def rank_offsets(job: RLJob) -> dict[str, int]:
    """The global rank of each role's replica 0: the head role first, then spec order."""
    head = head_role(job)
    order = [head, *(r for r in job.spec.roles if r.name != head.name)]
    offsets: dict[str, int] = {}
    rank = 0
    for role in order:
        offsets[role.name] = rank
        rank += role.replicas
    return offsets


def peer_env(
    job: RLJob, role: Role, index: int, *, socket_path: str, claimed: bool = False
) -> list[dict[str, str]]:
    """The env RLix gives every container of replica ``index`` of ``role``.

    ``claimed``: the pod gets its GPUs through a ``gpu.rlix.io`` claim, whose CDI
    spec sets the memory budget (what the claim consumed, per GPU) when the
    kubelet prepares it; the env leaves it out, so there is one source, not two
    that could disagree.
    """
    world = sum(r.replicas for r in job.spec.roles)
    rank = rank_offsets(job)[role.name] + index
    head = pod_fqdn(job, head_role(job).name, 0)
    values = {
        names.ENV_JOB: job.name,
        names.ENV_ROLE: role.name,
        names.ENV_REPLICA_INDEX: str(index),
        names.ENV_REPLICAS: str(role.replicas),
        names.ENV_AGENT_SOCKET: socket_path,
        names.ENV_HEAD: head,
        names.ENV_MASTER_ADDR: head,
        names.ENV_MASTER_PORT: str(names.MASTER_PORT),
        names.ENV_WORLD_SIZE: str(world),
        names.ENV_RANK: str(rank),
        names.ENV_NODE_RANK: str(rank),
    }
    peak = max(role.gpu_memory.by_phase().values(), default=0) if role.gpu_memory else 0
    if peak and not claimed:
        values[names.ENV_GPU_MEMORY_MIB] = str(peak)
    return [{"name": key, "value": values[key]} for key in names.OWNED_ENV if key in values]


def owner_reference(job: RLJob, owner_uid: str) -> dict[str, Any]:
    """The controller reference that ties pods and Service to the job (and its GC)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "name": job.name,
        "uid": owner_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_service(job: RLJob, *, owner_uid: str) -> dict[str, Any]:
    """The job's headless Service, selecting every pod of the job."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job),
            "namespace": job.namespace,
            "labels": {names.LABEL_JOB: job.name},
            "ownerReferences": [owner_reference(job, owner_uid)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {names.LABEL_JOB: job.name},
            # Peers must resolve each other before they are Ready (rendezvous).
            "publishNotReadyAddresses": True,
        },
    }
