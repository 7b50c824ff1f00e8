"""Pure conversion of watched Nodes and Pods into the core ``ClusterSnapshot``.

The operator needs its own (small) reader because components never import each
other; annotations it reads were written by its own pod builder, so a value
that does not parse degrades to "unknown" rather than failing admission.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.snapshot import ClusterSnapshot, Node, Workload
from rlix.operator.pods import ANNOTATION_ADMITTED_NODE

Body = Mapping[str, Any]
_DONE = ("Succeeded", "Failed")


def _int(raw: object, default: int = 0) -> int:
    try:
        return int(str(raw))
    except ValueError:
        return default


def node_from_body(body: Body) -> Node:
    meta = body.get("metadata", {})
    labels = meta.get("labels") or {}
    allocatable = (body.get("status") or {}).get("allocatable") or {}
    spec = body.get("spec") or {}
    gpus = _int(allocatable.get(names.GPU_RESOURCE, labels.get(names.NODE_LABEL_GPU_COUNT, 0)))
    return Node(
        name=str(meta.get("name", "")),
        gpu_count=gpus,
        gpu_memory_mib=_int(labels.get(names.NODE_LABEL_GPU_MEMORY_MIB, 0)),
        product=str(labels.get(names.NODE_LABEL_GPU_PRODUCT, "")),
        nvlink_domain=labels.get(names.LABEL_NVLINK_DOMAIN),
        schedulable=not spec.get("unschedulable", False),
    )


def pod_gpus(body: Body) -> int:
    total = 0
    for container in (body.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or resources.get("requests") or {}
        total += _int(limits.get(names.GPU_RESOURCE, 0))
    return total


def _memory(raw: str | None) -> dict[Phase, int]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[Phase, int] = {}
    for key, mib in value.items():
        phase = Phase.parse(str(key))
        if phase is not None and isinstance(mib, int):
            out[phase] = mib
    return out


def holds_resources(body: Body) -> bool:
    """Finished pods free their GPUs; only live ones count against capacity."""
    return (body.get("status") or {}).get("phase") not in _DONE


def workload_from_pod(body: Body) -> Workload:
    meta = body.get("metadata", {})
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    namespace = str(meta.get("namespace", "default"))
    job = labels.get(names.LABEL_JOB, "")
    node = (body.get("spec") or {}).get("nodeName") or notes.get(ANNOTATION_ADMITTED_NODE)
    return Workload(
        name=f"{namespace}/{meta.get('name', '')}",
        job=f"{namespace}/{job}" if job else "",
        role=str(labels.get(names.LABEL_ROLE, "")),
        gpus=pod_gpus(body),
        memory_mib=_memory(notes.get(names.ANNOTATION_GPU_MEMORY_MIB)),
        priority=_int(notes.get(names.ANNOTATION_PRIORITY, 0)),
        preemptible=labels.get(names.LABEL_PREEMPTIBLE) == "true",
        phase=Phase.parse(notes.get(names.ANNOTATION_PHASE)),
        node=node or None,
        gang_size=_int(notes.get(names.ANNOTATION_GANG_SIZE, 1), 1),
    )


def build_snapshot(
    nodes: Iterable[Body], pods: Iterable[Body], planned: Iterable[Workload] = ()
) -> ClusterSnapshot:
    """Nodes, live pods, and workloads admitted but not yet created as pods."""
    live = [workload_from_pod(p) for p in pods if holds_resources(p)]
    seen = {w.name for w in live}
    return ClusterSnapshot.of(
        (node_from_body(n) for n in nodes),
        [*live, *(w for w in planned if w.name not in seen)],
    )
