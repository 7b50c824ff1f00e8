"""A Pod object -> the facts RLix uses about it (``PodFacts``, with a ``Workload``).

Every value goes through its row in ``facts``; a malformed one yields that
row's ``on_bad`` value plus an ``ObjectError`` in ``errors``. Callers choose
what an error means: the extender refuses the pod being scheduled (its owner
must see the error) but keeps reading pods already running with the safe
values (one bad pod must not wedge scheduling for everyone); the operator and
the CLI read leniently and report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlix.core import names
from rlix.core.objects import facts as f
from rlix.core.objects.bounds import ObjectError
from rlix.core.objects.metadata import identity, part, strings, uid
from rlix.core.objects.nodes import label_pairs, tolerations_of
from rlix.core.snapshot import Workload, load_profile_of

_FINISHED = ("Succeeded", "Failed")
# More containers than any pod has; the API server's own limit is far lower in practice.
_MAX_CONTAINERS = 256


@dataclass(frozen=True, slots=True)
class PodFacts:
    workload: Workload
    uid: str
    admitted_node: str | None  # the operator's plan for a pod not bound yet
    finished: bool  # status.phase Succeeded or Failed: it holds no GPUs
    errors: tuple[ObjectError, ...]


def _container_gpus(reading: f.Reading, container: object) -> int:
    resources = part(container, "resources")
    found = [
        reading.get(f.POD_GPUS, part(resources, side).get(names.GPU_RESOURCE))
        for side in ("limits", "requests")
    ]
    return max(found)


def _containers(spec: Mapping[str, Any], key: str) -> list[object]:
    raw = spec.get(key)
    return raw[:_MAX_CONTAINERS] if isinstance(raw, list) else []


def _gpus(reading: f.Reading, spec: Mapping[str, Any]) -> int:
    """GPUs the way the scheduler counts an extended resource."""
    main = sum(_container_gpus(reading, c) for c in _containers(spec, "containers"))
    init = max(
        (_container_gpus(reading, c) for c in _containers(spec, "initContainers")), default=0
    )
    return max(main, init)


def read_pod(obj: object) -> PodFacts:
    """Read one Pod object; ``ObjectError`` only if it has no usable name."""
    name = identity(obj, "Pod", namespaced=True)
    reading = f.Reading("Pod", name)
    labels, notes = strings(obj, "labels"), strings(obj, "annotations")
    spec = part(obj, "spec")
    ns = name.split("/", 1)[0]

    job = reading.get(f.POD_JOB, labels.get(names.LABEL_JOB))
    raw_pre = labels.get(names.LABEL_PREEMPTIBLE, notes.get(names.LABEL_PREEMPTIBLE))
    priority = reading.get(f.POD_PRIORITY_ANNOTATION, notes.get(names.ANNOTATION_PRIORITY))
    if priority is None:
        priority = reading.get(f.POD_PRIORITY, spec.get("priority"))
    phase = part(obj, "status").get("phase")
    memory = reading.get(f.POD_MEMORY, notes.get(names.ANNOTATION_GPU_MEMORY_MIB))
    seconds = reading.get(f.POD_PHASE_SECONDS, notes.get(names.ANNOTATION_PHASE_SECONDS))
    profile, iteration_s = load_profile_of(seconds)
    workload = Workload(
        name=name,
        job=f"{ns}/{job}" if job else "",
        role=reading.get(f.POD_ROLE, labels.get(names.LABEL_ROLE)),
        gpus=max(
            _gpus(reading, spec),
            reading.get(f.POD_CLAIMED_GPUS, notes.get(names.ANNOTATION_CLAIMED_GPUS)),
        ),
        memory_mib=dict(memory),  # a copy: the row's default is shared
        priority=priority,
        preemptible=reading.get(f.POD_PREEMPTIBLE, raw_pre),
        phase=reading.get(f.POD_PHASE, notes.get(names.ANNOTATION_PHASE)),
        node=reading.get(f.POD_NODE, spec.get("nodeName")) or None,
        gpu_indices=reading.get(f.POD_GPU_INDICES, notes.get(names.ANNOTATION_GPU_INDICES)),
        suspended=reading.get(f.POD_SUSPENDED, notes.get(names.ANNOTATION_SUSPENDED)),
        loads_through_gate=reading.get(
            f.POD_LOADS_THROUGH_GATE, notes.get(names.ANNOTATION_LOADS_THROUGH_GATE)
        ),
        gang_size=reading.get(f.POD_GANG_SIZE, notes.get(names.ANNOTATION_GANG_SIZE)),
        node_selector=label_pairs(spec.get("nodeSelector")),
        tolerations=tolerations_of(spec.get("tolerations")),
        load_profile=profile,
        iteration_s=iteration_s,
    )
    return PodFacts(
        workload=workload,
        uid=uid(obj),
        admitted_node=reading.get(f.POD_ADMITTED_NODE, notes.get(names.ANNOTATION_ADMITTED_NODE))
        or None,
        finished=phase in _FINISHED,
        errors=tuple(reading.errors),
    )


def pod_name(obj: object) -> str:
    """``ns/name`` of a Pod object; ``ObjectError`` if it has none."""
    return identity(obj, "Pod", namespaced=True)
