"""Kubernetes objects and extender requests for tests, benchmarks and e2e.

Turns the placement builders' Workload/Node into the Pod/Node JSON a watch
delivers and the ExtenderArgs JSON kube-scheduler sends, so tests feed the app
exactly what production feeds it. Test-only: it lives with the tests, not in
the package.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rlix.core import names
from rlix.core.snapshot import Node, Workload


def uid_for(name: str) -> str:
    """A stable fake UID for a "ns/name" pod."""
    return "uid-" + name.replace("/", "-")


def pod_object(w: Workload, *, uid: str | None = None) -> dict[str, Any]:
    ns, name = w.name.split("/", 1) if "/" in w.name else ("default", w.name)
    labels: dict[str, str] = {}
    notes: dict[str, str] = {}
    if w.job:
        labels[names.LABEL_JOB] = w.job.split("/", 1)[-1]
    if w.role:
        labels[names.LABEL_ROLE] = w.role
    labels[names.LABEL_PREEMPTIBLE] = "true" if w.preemptible else "false"
    if w.memory_mib:
        notes[names.ANNOTATION_GPU_MEMORY_MIB] = json.dumps(
            {p.value: mib for p, mib in w.memory_mib.items()}
        )
    if w.phase is not None:
        notes[names.ANNOTATION_PHASE] = w.phase.value
    if w.suspended:
        notes[names.ANNOTATION_SUSPENDED] = "true"
    if w.gang_size > 1:
        notes[names.ANNOTATION_GANG_SIZE] = str(w.gang_size)
    if w.gpu_indices:
        notes[names.ANNOTATION_GPU_INDICES] = ",".join(map(str, w.gpu_indices))
    if w.load_profile and w.iteration_s:
        # What a pod can say of its profile: seconds per phase (pressures are
        # read back as full for busy phases, none for idle).
        seconds: dict[str, float] = {}
        for seg in w.load_profile:
            seconds[seg.phase.value] = seconds.get(seg.phase.value, 0.0) + seg.share * w.iteration_s
        notes[names.ANNOTATION_PHASE_SECONDS] = json.dumps(seconds)
    resources = {"limits": {names.GPU_RESOURCE: str(w.gpus)}} if w.gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": names.SCHEDULER_NAME,
        "priority": w.priority,
        "containers": [{"name": "main", "image": "trainer", "resources": resources}],
    }
    if w.node:
        spec["nodeName"] = w.node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": uid or uid_for(w.name),
            "labels": labels,
            "annotations": notes,
        },
        "spec": spec,
        "status": {"phase": "Running" if w.node else "Pending"},
    }


def node_object(n: Node, *, headroom: float | None = None) -> dict[str, Any]:
    """``n`` as a Node object; ``headroom``: its GPUs published by RLix's agent
    as gpu.rlix.io claims at that factor x physical memory (what n's own
    ``claims`` and ``memory_overcommit`` say when None)."""
    labels = {
        names.NODE_LABEL_GPU_COUNT: str(n.gpu_count),
        names.NODE_LABEL_GPU_MEMORY_MIB: str(n.gpu_memory_mib),
        names.NODE_LABEL_GPU_PRODUCT: n.product,
    }
    if n.nvlink_domain:
        labels[names.LABEL_NVLINK_DOMAIN] = n.nvlink_domain
    notes = {}
    claims, overcommit = (n.claims, n.memory_overcommit) if headroom is None else (True, headroom)
    if claims:
        notes[names.ANNOTATION_NODE_GPU_CLAIMS] = "true"
        notes[names.ANNOTATION_NODE_MEMORY_OVERCOMMIT] = f"{overcommit:g}"
    if n.gpus:
        notes[names.ANNOTATION_NODE_GPUS] = json.dumps(
            [
                {
                    "index": g.index,
                    "memoryMiB": g.memory_mib,
                    "usedMiB": g.used_mib,
                    "utilization": g.utilization,
                }
                for g in n.gpus
            ]
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": n.name, "labels": labels, "annotations": notes},
        "spec": {"unschedulable": not n.schedulable},
        "status": {"allocatable": {names.GPU_RESOURCE: str(n.gpu_count)}},
    }


def extender_args(pod: Mapping[str, Any], node_names: Sequence[str]) -> bytes:
    """ExtenderArgs as a nodeCacheCapable kube-scheduler sends it."""
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": list(node_names)}).encode()


def preemption_args(pod: Mapping[str, Any], victims: Mapping[str, Iterable[str]]) -> bytes:
    """ExtenderPreemptionArgs with NodeNameToMetaVictims (victims given as UIDs)."""
    return json.dumps(
        {
            "Pod": pod,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
                for node, uids in victims.items()
            },
        }
    ).encode()
