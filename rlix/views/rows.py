"""What `rlix top` and `rlix describe` show, computed from plain API objects.

Pure functions over the JSON dicts the API server returns, so the numbers a
person reads are tested without a cluster and cannot drift between commands.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlix.core import names
from rlix.core.phases import Phase

Obj = Mapping[str, Any]

# A GPU whose SM utilisation stays below this is counted idle: the NVML sample
# of a GPU that only holds memory (a parked or waiting rollout) is 0-2%.
IDLE_UTILIZATION = 0.05


def _annotations(obj: Obj) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def _labels(obj: Obj) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def age(timestamp: str | None, now: datetime) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    if not timestamp:
        return "-"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def pod_gpus(pod: Obj) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        limits = (c.get("resources") or {}).get("limits") or {}
        try:
            total += int(limits.get(names.GPU_RESOURCE, 0))
        except (TypeError, ValueError):
            continue
    return total


def parked_mib(pod: Obj) -> int:
    """MiB a suspended pod parked off its GPUs, from what it declared per phase.

    The agent parks whatever the pod held; the declaration for its current
    phase (or its peak) times its GPUs is the estimate `top` can show.
    """
    if _annotations(pod).get(names.ANNOTATION_SUSPENDED) != "true":
        return 0
    raw = _annotations(pod).get(names.ANNOTATION_GPU_MEMORY_MIB, "")
    try:
        declared = json.loads(raw) if raw else {}
    except ValueError:
        return 0
    per_gpu = 0
    if isinstance(declared, int):
        per_gpu = declared
    elif isinstance(declared, dict):
        phase = _annotations(pod).get(names.ANNOTATION_PHASE, "")
        values = [v for v in declared.values() if isinstance(v, int)]
        current = declared.get(phase)
        per_gpu = current if isinstance(current, int) else max(values, default=0)
    return per_gpu * pod_gpus(pod)


@dataclass(frozen=True)
class JobRow:
    namespace: str
    name: str
    state: str
    phase: str
    roles: str
    gpus: int
    iterations: int
    suspended: int
    parked_mib: int
    age: str


def job_rows(rljobs: Iterable[Obj], pods: Iterable[Obj], now: datetime) -> list[JobRow]:
    by_job: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        job = _labels(pod).get(names.LABEL_JOB)
        if job:
            by_job.setdefault((pod["metadata"].get("namespace", ""), job), []).append(pod)
    rows = []
    for rljob in rljobs:
        meta, status = rljob.get("metadata", {}), rljob.get("status") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        job_pods = by_job.get(key, [])
        roles = ", ".join(
            f"{r.get('name')}:{r.get('phase') or '-'}" for r in status.get("roles") or []
        )
        suspended = [
            p for p in job_pods if _annotations(p).get(names.ANNOTATION_SUSPENDED) == "true"
        ]
        rows.append(
            JobRow(
                namespace=key[0],
                name=key[1],
                state=str(status.get("state") or "Pending"),
                phase=str(status.get("phase") or "-"),
                roles=roles or "-",
                gpus=int(status.get("gpus") or sum(pod_gpus(p) for p in job_pods)),
                iterations=int(status.get("iterations") or 0),
                suspended=len(suspended),
                parked_mib=sum(parked_mib(p) for p in suspended),
                age=age(meta.get("creationTimestamp"), now),
            )
        )
    return sorted(rows, key=lambda r: (r.namespace, r.name))


@dataclass(frozen=True)
class NodeRow:
    name: str
    gpus: int
    allocated: int
    used_mib: int
    memory_mib: int
    utilization: float | None  # mean over GPUs; None without agent data
    idle_gpus: int | None


def node_gpu_state(node: Obj) -> list[dict[str, Any]]:
    raw = _annotations(node).get(names.ANNOTATION_NODE_GPUS)
    if not raw:
        return []
    try:
        doc = json.loads(raw)
    except ValueError:
        return []
    return [g for g in doc if isinstance(g, dict)] if isinstance(doc, list) else []


def node_rows(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[NodeRow]:
    allocated: dict[str, int] = {}
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if node and pod.get("status", {}).get("phase") in {"Pending", "Running"}:
            allocated[node] = allocated.get(node, 0) + pod_gpus(pod)
    rows = []
    for node in nodes:
        alloc = (node.get("status", {}).get("allocatable") or {}).get(names.GPU_RESOURCE)
        if alloc is None:
            continue
        name = node["metadata"]["name"]
        gpus = node_gpu_state(node)
        labels = _labels(node)
        per_gpu = int(labels.get(names.NODE_LABEL_GPU_MEMORY_MIB, "0") or 0)
        util = [float(g.get("utilization", 0.0)) for g in gpus]
        rows.append(
            NodeRow(
                name=name,
                gpus=int(alloc),
                allocated=allocated.get(name, 0),
                used_mib=sum(int(g.get("usedMiB", 0)) for g in gpus),
                memory_mib=sum(int(g.get("memoryMiB", 0)) for g in gpus) or per_gpu * int(alloc),
                utilization=sum(util) / len(util) if util else None,
                idle_gpus=sum(1 for u in util if u < IDLE_UTILIZATION) if util else None,
            )
        )
    return sorted(rows, key=lambda r: r.name)


@dataclass(frozen=True)
class Summary:
    gpus: int
    allocated: int
    idle_pct: float | None  # of GPUs with agent data, the share below IDLE_UTILIZATION
    jobs_by_state: dict[str, int]
    suspended_pods: int
    parked_mib: int


def summary(jobs: list[JobRow], nodes: list[NodeRow]) -> Summary:
    measured = [n for n in nodes if n.idle_gpus is not None]
    measured_gpus = sum(n.gpus for n in measured)
    idle = sum(n.idle_gpus or 0 for n in measured)
    states: dict[str, int] = {}
    for j in jobs:
        states[j.state] = states.get(j.state, 0) + 1
    return Summary(
        gpus=sum(n.gpus for n in nodes),
        allocated=sum(n.allocated for n in nodes),
        idle_pct=100.0 * idle / measured_gpus if measured_gpus else None,
        jobs_by_state=states,
        suspended_pods=sum(j.suspended for j in jobs),
        parked_mib=sum(j.parked_mib for j in jobs),
    )


def phase_order(phase: str) -> int:
    """Sort key that lists phases in the order an RL iteration runs them."""
    try:
        return list(Phase).index(Phase(phase))
    except ValueError:
        return len(Phase)


def now_utc() -> datetime:
    return datetime.now(UTC)
