"""Watched pods and nodes -> what the conductor decides on (no I/O here).

The conductor sees a pod as parked from the moment it asks for it (its desired
state says suspended), not only once the agent reports it: memory asked back
is counted as coming back, memory asked away as going, so two passes never
ask the same thing twice. The core decides; this module only reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from rlix.core import names
from rlix.core.policy.admission import GangRequest
from rlix.core.policy.conduct import Action, ConductConfig, ElasticRollout, JobClock, decide
from rlix.core.policy.port import PlacementPolicy
from rlix.core.rljob import RLJob, RoleKind
from rlix.core.snapshot import ClusterSnapshot
from rlix.core.suspension import (
    AGENT_STALE_S,
    ANNOTATION_AGENT_HEARTBEAT,
    ANNOTATION_REQUEST,
    ActiveReplicas,
    PodSuspension,
    State,
    SuspensionError,
    SuspensionRequest,
)
from rlix.operator.snapshots import build_snapshot
from rlix.operator.statuses import parse_time

Body = Mapping[str, Any]


def annotations_of(body: Body) -> dict[str, str]:
    return dict((body.get("metadata") or {}).get("annotations") or {})


def suspension_of(body: Body) -> PodSuspension:
    return PodSuspension.of(annotations_of(body))


def pod_key(body: Body) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def request_of(job_body: Body) -> SuspensionRequest | None:
    """A person's request on the RLJob; a malformed one reads as none (and is logged)."""
    raw = annotations_of(job_body).get(ANNOTATION_REQUEST)
    if not raw:
        return None
    try:
        return SuspensionRequest.parse(raw)
    except SuspensionError:
        return None


def agent_alive(node: Body | None, now: datetime) -> bool:
    """Whether the node's agent wrote its heartbeat within ``AGENT_STALE_S``."""
    if node is None:
        return False
    beat = parse_time(annotations_of(node).get(ANNOTATION_AGENT_HEARTBEAT))
    return beat is not None and (now - beat).total_seconds() <= AGENT_STALE_S


def conduct_snapshot(
    nodes: Iterable[Body],
    pods: Iterable[Body],
    gpu_indices: Mapping[str, tuple[int, ...]] | None = None,
    work_left: Mapping[str, float] | None = None,
) -> ClusterSnapshot:
    """The cluster as the conductor counts it: asked-for suspensions as parked.

    ``gpu_indices`` ("ns/pod" -> GPUs) is where admission put each pod, for
    pods that do not say it themselves: with whole ``nvidia.com/gpu`` nothing
    on the pod names its GPUs (a DRA claim's allocation would), and the
    conductor needs them to know who shares a GPU with whom.

    A pod asked to park whose agent has not yet done it still shows in its
    GPUs' measured use; ``ClusterSnapshot.parking`` takes it off, as it will be
    off once the agent acts. Counted as parked but measured as resident, the
    memory would be taken twice, and the next pass would park a second victim
    for a job the first one already made room for.

    ``work_left`` ("ns/job" -> expected GPU-seconds left) sizes the pods of
    jobs that declare ``spec.iterations``; the pods themselves carry no size.
    """
    bodies = list(pods)
    parked = {pod_key(b) for b in bodies if suspension_of(b).suspended}
    planned = gpu_indices or {}
    sized = work_left or {}
    snapshot = build_snapshot(nodes, bodies)
    workloads = []
    for read in snapshot.workloads:
        w = read
        if not w.gpu_indices and w.name in planned:
            w = replace(w, gpu_indices=planned[w.name])
        if w.job in sized:
            w = replace(w, work_left=sized[w.job])
        workloads.append(w)
    return replace(snapshot, workloads=tuple(workloads)).parking(parked)


def job_clocks(pods: Iterable[Body], job_of: Mapping[str, str]) -> dict[str, JobClock]:
    """When each job was last parked / resumed, from the pods' own annotations.

    Times are epoch seconds; the protocol's RFC 3339 stamps survive a restart of
    either side, so aging and the no-ping-pong guard do too.
    """
    out: dict[str, JobClock] = {}
    for body in pods:
        job = job_of.get(pod_key(body))
        state = suspension_of(body)
        if job is None or state.desired is None:
            continue
        clock = out.get(job, JobClock())
        since = parse_time(state.desired.since)
        if state.desired.state is State.SUSPENDED and since is not None:
            first = clock.suspended_at
            at = since.timestamp()
            clock = replace(clock, suspended_at=at if first is None else min(first, at))
        observed = state.observed
        if (
            state.desired.state is State.RUNNING
            and observed is not None
            and observed.state is State.RUNNING
            and (done := parse_time(observed.at)) is not None
        ):
            last = clock.resumed_at
            clock = replace(clock, resumed_at=max(last or 0.0, done.timestamp()))
        out[job] = clock
    return out


def decide_on_cluster(
    nodes: Iterable[Body],
    pods: Sequence[Body],
    waiting: Sequence[GangRequest],
    policy: PlacementPolicy,
    *,
    now: datetime,
    held: frozenset[str] = frozenset(),
    config: ConductConfig | None = None,
    gpu_indices: Mapping[str, tuple[int, ...]] | None = None,
    elastic: Mapping[str, ElasticRollout] | None = None,
    work_left: Mapping[str, float] | None = None,
) -> tuple[Action, ...]:
    """The core's decision on the watched objects: what the conductor acts on."""
    snapshot = conduct_snapshot(nodes, pods, gpu_indices, work_left)
    job_of = {w.name: w.job for w in snapshot.workloads}
    clocks = job_clocks(pods, job_of)
    return decide(
        snapshot,
        waiting,
        policy,
        clocks=clocks,
        now=now.timestamp(),
        config=config or ConductConfig(),
        held=held,
        elastic=elastic,
    )


def elastic_rollout(job: RLJob) -> ElasticRollout | None:
    """The job's elastic rollout role, as the core's decision takes it (None: not elastic)."""
    for role in job.spec.roles:
        if role.elastic is not None:
            return ElasticRollout(role=role.name, min_replicas=role.elastic.min_replicas)
    return None


def active_replicas(job: RLJob, pods: Iterable[Body]) -> ActiveReplicas | None:
    """Which replicas of the job's rollout role run, from its pods' suspension state.

    The elastic role where the job declares one, else its (first) rollout
    role with ``min_replicas`` = ``replicas``: nothing of it is lent, but when
    the conductor parks the whole rollout for a higher-priority job the
    trainer learns it has no replica to send work to and waits, instead of
    sending requests nobody serves. None when the job has no rollout role.
    A replica whose pod does not exist (yet) or has finished is in neither list.
    """
    rollout = elastic_rollout(job)
    if rollout is None:
        rollout = next(
            (
                ElasticRollout(role=r.name, min_replicas=r.replicas)
                for r in job.spec.roles
                if r.kind is RoleKind.ROLLOUT
            ),
            None,
        )
    role = job.spec.role(rollout.role) if rollout is not None else None
    if rollout is None or role is None:
        return None
    active: list[int] = []
    parked: list[int] = []
    for body in pods:
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        index = str(labels.get(names.LABEL_REPLICA_INDEX, ""))
        finished = (body.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if labels.get(names.LABEL_ROLE) != role.name or not index.isdigit() or finished:
            continue
        (active if suspension_of(body).active else parked).append(int(index))
    return ActiveReplicas(
        role=role.name,
        replicas=role.replicas,
        min_replicas=rollout.min_replicas,
        active=tuple(sorted(i for i in active if i < role.replicas)),
        suspended=tuple(sorted(i for i in parked if i < role.replicas)),
    )


def job_label(body: Body) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{(meta.get('labels') or {}).get(names.LABEL_JOB)}"
