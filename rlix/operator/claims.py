"""The pinned ResourceClaim of a GPU role pod on a node RLix drives by DRA.

Admission chose the node and the GPUs; here that choice becomes a claim the
scheduler's DRA allocator must honour (``rlix.core.dra``): one claim per pod,
named like the pod, owned by the RLJob (so it outlives a pod the operator
recreates after a failure, and goes with the job), pinned by uuid to the GPUs
in the node's gpu.rlix.io ResourceSlice, for the pod's peak-phase memory. A
claim left from an earlier plan that pins other GPUs is replaced.
"""

from __future__ import annotations

import logging

from rlix.core import dra
from rlix.core.policy.admission import PodPlacement
from rlix.core.rljob import RLJob, Role
from rlix.operator.kube import Kube
from rlix.operator.peers import owner_reference

log = logging.getLogger("rlix.operator")


class ClaimNotReadyError(Exception):
    """The node's slice is missing or lacks a planned GPU: the pod waits for it."""


def slice_path(node: str) -> str:
    return f"/apis/{dra.API_VERSION}/resourceslices/{dra.slice_name(node)}"


def claims_path(namespace: str) -> str:
    return f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims"


async def ensure_claim(
    kube: Kube, job: RLJob, *, owner_uid: str, role: Role, pod: str, place: PodPlacement
) -> dra.ClaimPlan:
    """Create (or replace a stale) claim for ``pod`` as planned; the plan written."""
    published = await kube.get(slice_path(place.node))
    if published is None:
        raise ClaimNotReadyError(f"node {place.node} has no {dra.DRIVER} ResourceSlice")
    peak = max(role.gpu_memory.by_phase().values(), default=0) if role.gpu_memory else 0
    try:
        plan = dra.plan_claim(
            namespace=job.namespace,
            name=pod,
            gpus=place.gpus,
            published=dra.published_gpus(published),
            peak_memory_mib=peak,
        )
    except dra.ClaimPlanError as exc:
        raise ClaimNotReadyError(str(exc)) from exc
    body = dra.resource_claim(plan, owner_reference(job, owner_uid))
    path = claims_path(job.namespace)
    if await kube.create(path, body):
        return plan
    existing = await kube.get(f"{path}/{pod}")
    if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
        # Left by a gang that was re-planned: wait until it is gone.
        raise ClaimNotReadyError(f"claim {job.namespace}/{pod} is still being deleted")
    if existing is not None and dra.pinned_uuids(existing) == plan.uuids:
        return plan
    log.info("pod %s/%s: replacing its claim from an earlier plan", job.namespace, pod)
    await kube.delete(f"{path}/{pod}")
    if not await kube.create(path, body):
        raise ClaimNotReadyError(f"claim {job.namespace}/{pod} is still being deleted")
    return plan


async def delete_claim(kube: Kube, namespace: str, name: str) -> None:
    """Delete a pod's claim if there is one (a cluster without DRA answers 404: done)."""
    await kube.delete(f"{claims_path(namespace)}/{name}")
