"""What `rlix top` and `rlix describe` show, computed from plain API objects.

Pure functions over the JSON dicts the API server returns, so the numbers a
person reads are tested without a cluster and cannot drift between commands.
Pods, nodes and RLJobs are read through the core reader (``rlix.core.objects``),
so `rlix top` counts GPUs, memory and suspensions exactly as the extender and
the operator do; an object without a usable name is left out of the view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rlix.core import names
from rlix.core.objects import (
    NodeFacts,
    ObjectError,
    PodFacts,
    RLJobFacts,
    read_node,
    read_pod,
    read_rljob,
)
from rlix.core.phases import Phase
from rlix.core.suspension import CONDITION_SUSPENDED, PodSuspension, State
from rlix.core.times import parse_rfc3339

Obj = Mapping[str, Any]

# A GPU whose SM utilisation stays below this is counted idle: the NVML sample
# of a GPU that only holds memory (a parked or waiting rollout) is 0-2%.
IDLE_UTILIZATION = 0.05


def pods_of(objs: Iterable[Obj]) -> list[PodFacts]:
    return [f for f in map(_try(read_pod), objs) if f is not None]


def nodes_of(objs: Iterable[Obj]) -> list[NodeFacts]:
    return [f for f in map(_try(read_node), objs) if f is not None]


def rljobs_of(objs: Iterable[Obj]) -> list[RLJobFacts]:
    return [f for f in map(_try(read_rljob), objs) if f is not None]


def _try(read: Any) -> Any:
    def attempt(obj: Obj) -> Any:
        try:
            return read(obj)
        except ObjectError:
            return None

    return attempt


def age(timestamp: str | None, now: datetime) -> str:
    """kubectl-style age: 45s, 12m, 3h, 2d."""
    then = parse_rfc3339(timestamp)
    if then is None:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def pod_gpus(pod: Obj) -> int:
    """GPUs a pod object requests, counted as the scheduler counts them."""
    facts = _try(read_pod)(pod)
    return facts.workload.gpus if facts is not None else 0


def parked_mib(pod: Obj) -> int:
    """MiB a suspended pod parked off its GPUs, from what it declared per phase.

    The agent parks whatever the pod held; the declaration for its current
    phase (or its peak) times its GPUs is the estimate `top` can show. A
    malformed declaration reads as none (the reader's safe value): 0 shown.
    """
    facts = _try(read_pod)(pod)
    return _parked(facts) if facts is not None else 0


def _parked(pod: PodFacts) -> int:
    w = pod.workload
    return w.memory_in(w.phase) * w.gpus if w.suspended else 0


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
    # The Suspended condition's reason: why pods are parked ("Lend"), or why a
    # suspension was refused ("refused: AgentDown"); "-" when neither.
    suspension: str = "-"
    # Pods waiting their turn at their node's phase gate (every role's
    # ``status.roles[].waiting``): why a role reads idle while a partner works.
    waiting: int = 0


def _role_cell(role: Mapping[str, Any]) -> str:
    """``name:phase``, and how many of its pods wait their turn at the gate."""
    cell = f"{role.get('name')}:{role.get('phase') or '-'}"
    waiting = _count(role.get("waiting"))
    return f"{cell} ({waiting} waiting)" if waiting else cell


def _count(value: object) -> int:
    """A count the operator wrote (0 for anything else: a view never fails on it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _suspension_condition(status: Mapping[str, Any]) -> str:
    for c in status.get("conditions") or []:
        if not isinstance(c, Mapping) or c.get("type") != CONDITION_SUSPENDED:
            continue
        reason = str(c.get("reason") or "")[:64]
        if c.get("status") == "True" and reason:
            return reason
        if c.get("status") == "False" and reason and reason != "Running":
            return f"refused: {reason}"
    return "-"


def job_rows(rljobs: Iterable[Obj], pods: Iterable[Obj], now: datetime) -> list[JobRow]:
    by_job: dict[str, list[PodFacts]] = {}
    for pod in pods_of(pods):
        if pod.workload.job:
            by_job.setdefault(pod.workload.job, []).append(pod)
    rows = []
    for rljob, facts in ((j, read) for j in rljobs if (read := _try(read_rljob)(j)) is not None):
        meta, status = rljob.get("metadata", {}), rljob.get("status") or {}
        job_pods = by_job.get(f"{facts.namespace}/{facts.name}", [])
        role_list = [r for r in status.get("roles") or [] if isinstance(r, Mapping)]
        roles = ", ".join(_role_cell(r) for r in role_list)
        suspended = [p for p in job_pods if p.workload.suspended]
        rows.append(
            JobRow(
                namespace=facts.namespace,
                name=facts.name,
                state=facts.state or "Pending",
                phase=facts.phase.value if facts.phase else "-",
                roles=roles or "-",
                gpus=facts.gpus or sum(p.workload.gpus for p in job_pods),
                iterations=facts.iterations,
                suspended=len(suspended),
                parked_mib=sum(_parked(p) for p in suspended),
                age=age(meta.get("creationTimestamp"), now),
                suspension=_suspension_condition(status),
                waiting=sum(_count(r.get("waiting")) for r in role_list),
            )
        )
    return sorted(rows, key=lambda r: (r.namespace, r.name))


@dataclass(frozen=True)
class SuspensionRow:
    """Pods of one job parked (or being parked, or on their way back) for one reason."""

    namespace: str
    job: str
    pods: tuple[str, ...]
    state: str  # "parking" (asked, not yet done), "parked", "resuming"
    reason: str  # Manual, Priority, Lend, PhaseOverflow, Aged, MemoryFree
    requester: str  # for whom ("ns/job", or "user")
    since: str  # RFC 3339: when the conductor asked
    age: str
    parked_bytes: int


_STATES = {
    (True, State.SUSPENDED): "parking",  # asked, the agent has not answered yet
    (True, State.RUNNING): "resuming",  # asked back, not yet back
    (False, State.SUSPENDED): "parked",
    (False, State.RUNNING): "parked",  # a resume that failed: still parked (retried)
}


def suspension_rows(pods: Iterable[Obj], now: datetime) -> list[SuspensionRow]:
    """What the conductor protocol's annotations say is parked, per job and reason.

    Read from the pods' ``rlix.io/desired-suspension`` and
    ``rlix.io/observed-suspension`` (docs/conductor.md): a pod counts from the
    moment it is asked to park until the agent reports it resumed.
    """
    groups: dict[tuple[str, str, str, str, str], list[tuple[str, PodSuspension]]] = {}
    for body in pods:
        meta = body.get("metadata") or {}
        notes = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        if not isinstance(notes, Mapping) or not isinstance(labels, Mapping):
            continue
        s = PodSuspension.of({str(k): str(v) for k, v in notes.items()})
        d, o = s.desired, s.observed
        if d is None or not (s.suspended or (o is not None and o.state is State.SUSPENDED)):
            continue
        state = _STATES[(s.pending, d.state)]
        ns = str(meta.get("namespace") or "default")
        job = str(labels.get(names.LABEL_JOB) or "-")
        key = (ns, job, state, d.reason, d.requester)
        groups.setdefault(key, []).append((str(meta.get("name") or ""), s))
    rows = []
    for (ns, job, state, reason, requester), members in groups.items():
        since = min(
            (s.desired.since for _, s in members if s.desired and s.desired.since), default=""
        )
        rows.append(
            SuspensionRow(
                namespace=ns,
                job=job,
                pods=tuple(sorted(name for name, _ in members)),
                state=state,
                reason=reason,
                requester=requester or "-",
                since=since or "-",
                age=age(since, now) if since else "-",
                parked_bytes=sum(s.observed.parked_bytes for _, s in members if s.observed),
            )
        )
    return sorted(rows, key=lambda r: (r.namespace, r.job, r.state, r.reason))


@dataclass(frozen=True)
class NodeRow:
    name: str
    gpus: int
    allocated: int
    used_mib: int
    memory_mib: int
    utilization: float | None  # mean over GPUs; None without agent data
    idle_gpus: int | None
    # "shared": gpu.rlix.io DRA devices, pods share a GPU by memory through
    # pinned claims; "whole": nvidia.com/gpu, one pod per GPU (docs/dra.md).
    sharing: str = "whole"


def node_rows(nodes: Iterable[Obj], pods: Iterable[Obj]) -> list[NodeRow]:
    """GPU nodes (physical GPUs, as the scheduler's policy counts them) and their use."""
    allocated: dict[str, int] = {}
    for pod in pods_of(pods):
        w = pod.workload
        if w.node and not pod.finished:
            allocated[w.node] = allocated.get(w.node, 0) + w.gpus
    rows = []
    for facts in nodes_of(nodes):
        node = facts.node
        if node.gpu_count == 0 and not node.gpus:
            continue
        util = [g.utilization for g in node.gpus]
        rows.append(
            NodeRow(
                name=node.name,
                gpus=node.gpu_count,
                allocated=allocated.get(node.name, 0),
                used_mib=sum(g.used_mib for g in node.gpus),
                memory_mib=sum(g.memory_mib for g in node.gpus)
                or node.gpu_memory_mib * node.gpu_count,
                utilization=sum(util) / len(util) if util else None,
                idle_gpus=sum(1 for u in util if u < IDLE_UTILIZATION) if util else None,
                sharing="shared" if node.claims else "whole",
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
