"""RLix's GPUs as DRA devices: the ResourceSlice the agent publishes, the
ResourceClaim the operator writes for a plan, and what an allocation says.

Why RLix is the driver (``gpu.rlix.io``) and not a user of NVIDIA's: Kubernetes
counts a claim for as long as its pod exists, so parking a pod in place frees
nothing the scheduler sees unless the published capacity is RLix's to define.
The agent publishes one device per GPU with a consumable ``memory`` capacity of
physical HBM times a configured overcommit factor, multiple allocations allowed
(KEP-5075); the conductor keeps what is resident within physical HBM.

Why a claim pins the GPU by uuid: admission already chose the node and the GPUs
with the shared policy; the claim makes that choice binding (the scheduler's DRA
allocator can only take the named device, and keeps the sum of the consumed
capacities within the published one), so nobody guesses later which pod holds
which GPU: the allocation says it.

Pure builders and readers over plain JSON dicts, like the rest of the core.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

DRIVER: Final = "gpu.rlix.io"
DEVICE_CLASS: Final = DRIVER
API_VERSION: Final = "resource.k8s.io/v1"
MEMORY: Final = "memory"
# The pod's entry in spec.resourceClaims, and what its GPU container names.
POD_CLAIM_NAME: Final = "rlix-gpus"

_DEVICE = re.compile(r"gpu-(\d{1,4})")
_QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
_FACTORS: Final = {
    None: 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


class ClaimPlanError(ValueError):
    """A plan that cannot be written as a claim (e.g. a GPU the slice lacks)."""


def device_name(index: int) -> str:
    """The device name of GPU ``index`` in RLix's slices (stable across restarts)."""
    return f"gpu-{index}"


def device_index(name: str) -> int | None:
    """GPU index of one of RLix's device names; None for any other name."""
    match = _DEVICE.fullmatch(name)
    return int(match.group(1)) if match else None


def mib_quantity(mib: int) -> str:
    return f"{mib}Mi"


def quantity_mib(raw: object) -> int | None:
    """MiB in a Kubernetes quantity as the API server writes memory ("80Gi",
    "85899345920"); None for anything else (fractions, exponents: not ours)."""
    if not isinstance(raw, str) or len(raw) > 32:
        return None
    match = _QUANTITY.fullmatch(raw)
    if match is None:
        return None
    return int(match.group(1)) * _FACTORS[match.group(2)] // (1 << 20)


@dataclass(frozen=True, slots=True)
class SliceGpu:
    """One GPU as the agent publishes it."""

    index: int
    uuid: str
    product: str
    memory_mib: int  # physical
    nvlink_domain: str = ""


def resource_slice(
    *,
    node: str,
    node_uid: str,
    gpus: Sequence[SliceGpu],
    overcommit: float,
    generation: int = 1,
) -> dict[str, Any]:
    """The node's ResourceSlice: one pool named after the node, one device per GPU.

    Owned by the Node (as DRA drivers do), so it goes when the node goes.
    """
    if overcommit < 1:
        raise ValueError(f"memory overcommit factor must be >= 1, got {overcommit}")
    devices = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        attributes: dict[str, Any] = {
            "uuid": {"string": gpu.uuid},
            "index": {"int": gpu.index},
            "productName": {"string": gpu.product},
            "nvlinkDomain": {"string": gpu.nvlink_domain},
        }
        devices.append(
            {
                "name": device_name(gpu.index),
                "attributes": attributes,
                "capacity": {
                    MEMORY: {"value": mib_quantity(int(gpu.memory_mib * overcommit))},
                },
                "allowMultipleAllocations": True,
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def device_class() -> dict[str, Any]:
    """The DeviceClass pods' claims name: every device of RLix's driver."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def shares_capacity(body: Mapping[str, Any]) -> bool:
    """Whether the API server kept the consumable-capacity fields of a slice.

    A server without DRAConsumableCapacity drops ``allowMultipleAllocations``
    silently; its devices are then whole-device only, and RLix must not promise
    sharing there.
    """
    devices = (body.get("spec") or {}).get("devices") or []
    return bool(devices) and all(d.get("allowMultipleAllocations") is True for d in devices)


@dataclass(frozen=True, slots=True)
class PublishedGpu:
    index: int
    uuid: str
    memory_mib: int  # the published capacity (physical x overcommit)


def published_gpus(body: Mapping[str, Any]) -> dict[int, PublishedGpu]:
    """GPU index -> what one of RLix's slices publishes for it."""
    spec = body.get("spec") or {}
    if spec.get("driver") != DRIVER:
        return {}
    out: dict[int, PublishedGpu] = {}
    for device in spec.get("devices") or []:
        index = device_index(str(device.get("name", "")))
        attrs = device.get("attributes") or {}
        uuid = (attrs.get("uuid") or {}).get("string")
        memory = quantity_mib(((device.get("capacity") or {}).get(MEMORY) or {}).get("value"))
        if index is not None and isinstance(uuid, str) and memory is not None:
            out[index] = PublishedGpu(index, uuid, memory)
    return out


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """The claim one pod gets: these GPUs (by uuid), this much memory on each."""

    namespace: str
    name: str
    uuids: tuple[str, ...]
    memory_mib: int
    gpus: tuple[int, ...] = ()  # the indices the uuids name (the node's GPUs)


def claim_memory_mib(peak_memory_mib: int, published_mib: int) -> int:
    """A claim's memory on each of its GPUs: the pod's peak-phase memory (it keeps
    its claim in every phase), or, when it declares none, the GPU's whole
    published memory (the plain-Kubernetes meaning)."""
    return peak_memory_mib if peak_memory_mib > 0 else published_mib


def plan_claim(
    *,
    namespace: str,
    name: str,
    gpus: Sequence[int],
    published: Mapping[int, PublishedGpu],
    peak_memory_mib: int,
) -> ClaimPlan:
    """The claim for a pod admission placed on ``gpus`` of a node publishing ``published``.

    The request is the pod's peak-phase memory: the pod keeps its claim in every
    phase, so the claim must cover the largest. A pod that declares no memory
    takes the GPU's whole published capacity, the plain-Kubernetes meaning.
    """
    if not gpus:
        raise ClaimPlanError(f"pod {namespace}/{name}: a claim needs at least one GPU")
    missing = [i for i in gpus if i not in published]
    if missing:
        raise ClaimPlanError(
            f"pod {namespace}/{name}: GPU index(es) {missing} are not in the node's "
            f"{DRIVER} ResourceSlice (it publishes {sorted(published)})"
        )
    memory = claim_memory_mib(peak_memory_mib, min(published[i].memory_mib for i in gpus))
    uuids = tuple(published[i].uuid for i in gpus)
    return ClaimPlan(namespace, name, uuids, memory, tuple(gpus))


def resource_claim(plan: ClaimPlan, owner: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaim for ``plan``: one request per GPU, each pinned by uuid."""
    requests = [
        {
            "name": f"gpu-{i}",
            "exactly": {
                "deviceClassName": DEVICE_CLASS,
                "allocationMode": "ExactCount",
                "count": 1,
                "selectors": [
                    {"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{uuid}"'}}
                ],
                "capacity": {"requests": {MEMORY: mib_quantity(plan.memory_mib)}},
            },
        }
        for i, uuid in enumerate(plan.uuids)
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": plan.name,
            "namespace": plan.namespace,
            "ownerReferences": [dict(owner)],
        },
        "spec": {"devices": {"requests": requests}},
    }


def pinned_uuids(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The uuids a claim written by :func:`resource_claim` pins (to compare plans)."""
    out = []
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    for request in requests:
        for selector in (request.get("exactly") or {}).get("selectors") or []:
            expression = str((selector.get("cel") or {}).get("expression", ""))
            out.append(expression.rsplit("==", 1)[-1].strip().strip('"'))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the scheduler's DRA allocator gave a claim on RLix's devices."""

    node: str
    gpus: tuple[int, ...]
    consumed_mib: tuple[int, ...]  # parallel to ``gpus``


def read_allocation(claim: Mapping[str, Any]) -> Allocation | None:
    """The claim's allocation of RLix devices, or None (not allocated, not ours).

    The pool is the node's name (:func:`resource_slice`), so the allocation alone
    says where the pod holds which GPU.
    """
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    nodes, gpus, consumed = set(), [], []
    for result in results:
        if result.get("driver") != DRIVER:
            continue
        index = device_index(str(result.get("device", "")))
        if index is None:
            continue
        nodes.add(str(result.get("pool", "")))
        gpus.append(index)
        mib = quantity_mib((result.get("consumedCapacity") or {}).get(MEMORY))
        consumed.append(mib or 0)
    if len(nodes) != 1 or not gpus:
        return None
    return Allocation(nodes.pop(), tuple(gpus), tuple(consumed))


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_claim_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the ResourceClaims a pod references directly (not by template)."""
    refs = (pod.get("spec") or {}).get("resourceClaims") or []
    return tuple(
        str(r["resourceClaimName"])
        for r in refs
        if isinstance(r, dict) and isinstance(r.get("resourceClaimName"), str)
    )
