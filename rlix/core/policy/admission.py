"""Gang admission: a job starts only when *every* one of its pods fits, else it waits.

Why gangs: an RL job's roles all-reduce and sync weights every iteration, so a
job with 3 of its 4 pods placed holds GPUs while doing nothing, and two such
half-placed jobs can deadlock a cluster. Admission therefore places all pods of
a job on a what-if copy of the snapshot and admits only if the last one fits.

Why this order: higher priority first; inside a priority, the job that would
set the finish, then the least expected work left (``rlix.core.policy.ordering``;
jobs of unknown size keep arrival order ahead of them), then name, so the same
queue always gives the same answer. A job
that does not fit does not block smaller jobs behind it (Kueue's
BestEffortFIFO): a strict head-of-line queue idles GPUs that a small job could
use, while a large waiting job's starvation is bounded by preemption instead.

The placement questions go to a ``PlacementPolicy``: the operator and the
simulator call this same function with RLix's policy, so what is benchmarked is
what decides. A decision carries a typed ``WaitReason`` (what callers branch on,
and the condition's ``reason``) and a sentence (what a user reads in
``kubectl describe rljob``); nobody has to parse the sentence.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace

from rlix.core.policy.ordering import class_key
from rlix.core.policy.port import PlacementPolicy
from rlix.core.snapshot import ClusterSnapshot, Workload


@dataclass(frozen=True, slots=True)
class GangRequest:
    """A waiting job: its pods (unbound Workloads) and its place in the queue."""

    job: str
    priority: int
    arrival: float  # seconds or any monotonic sequence number
    pods: tuple[Workload, ...]
    # Expected GPU-seconds of work left (0: unknown) and whether the job goes
    # first in its class: it would set the finish if started later, or it has
    # aged (``rlix.core.policy.ordering``).
    work_left: float = 0.0
    critical: bool = False


@dataclass(frozen=True, slots=True)
class PodPlacement:
    pod: str
    node: str
    gpus: tuple[int, ...]
    score: int


class WaitReason(enum.StrEnum):
    """Why a job is not admitted; the value is the ``Admitted=False`` condition's reason."""

    # Every pod has somewhere to go once capacity frees: the normal wait.
    WAITING_FOR_GPUS = "WaitingForGPUs"
    # Beyond the admission window: not even tried this pass.
    QUEUED = "Queued"
    # Larger than the whole cluster, or its pods could not exist on it: waiting
    # will not help until the cluster (or the spec) changes.
    NEVER_FITS = "NeverFits"
    # The cluster has no schedulable GPU node yet: nothing can be judged.
    NO_GPU_NODE = "NoGPUNode"


@dataclass(frozen=True, slots=True)
class Admission:
    """The decision for one job: admitted with placements, or a reason and a message."""

    job: str
    admitted: bool
    placements: tuple[PodPlacement, ...] = ()
    reason: WaitReason | None = None  # None exactly when admitted
    message: str = ""

    @classmethod
    def waiting(cls, job: str, reason: WaitReason, message: str) -> Admission:
        return cls(job, False, reason=reason, message=message)


def queue_order(requests: Iterable[GangRequest]) -> list[GangRequest]:
    """Priority (high first), then ``ordering.class_key`` inside it, then name."""
    return sorted(
        requests, key=lambda r: (*class_key(r.priority, r.work_left, r.critical, r.arrival), r.job)
    )


def summarize_reasons(verdicts: dict[str, str | None]) -> str:
    """kube-scheduler style: '0/12 nodes are available: 9 x <reason>; 3 x <reason>'."""
    failed = Counter(r for r in verdicts.values() if r is not None)
    parts = "; ".join(f"{n} x {reason}" for reason, n in failed.most_common())
    fits = sum(1 for r in verdicts.values() if r is None)
    return f"{fits}/{len(verdicts)} nodes are available" + (f": {parts}" if parts else "")


def place_pod(
    snapshot: ClusterSnapshot, pod: Workload, policy: PlacementPolicy
) -> tuple[PodPlacement | None, str]:
    """Filter, score and pick the best node for one pod; (None, reason) if none fits."""
    verdicts = dict(policy.filter(snapshot, pod))
    # kube-scheduler's own node predicates, whatever the policy: the plan is
    # pinned (required node affinity), so a node it would refuse is no plan.
    for name, reason in list(verdicts.items()):
        node = snapshot.nodes.get(name)
        if reason is None and node is not None:
            verdicts[name] = pod.refused_by(node)
    feasible = [name for name, reason in verdicts.items() if reason is None]
    if not feasible:
        return None, summarize_reasons(verdicts)
    scores = policy.score(snapshot, pod, feasible)
    # Highest score wins; ties go to the earliest node in snapshot order, so the
    # decision is reproducible (kube-scheduler breaks ties at random).
    best = max(feasible, key=lambda n: scores.get(n, 0))
    gpus = policy.gpus(snapshot, pod, best)
    if len(gpus) < pod.gpus:
        return None, f"node {best} passed the filter but offered {len(gpus)} GPUs"
    return PodPlacement(pod.name, best, gpus, scores.get(best, 0)), ""


def bind(pod: Workload, placement: PodPlacement) -> Workload:
    return replace(pod, node=placement.node, gpu_indices=placement.gpus)


def place_gang(
    snapshot: ClusterSnapshot, request: GangRequest, policy: PlacementPolicy
) -> tuple[Admission, ClusterSnapshot]:
    """Place every pod on a what-if snapshot; admit only if all fit.

    Returns the decision and the snapshot with the pods bound (unchanged when
    the job waits), so a caller admitting a queue sees earlier admissions.
    """
    trial = snapshot
    placements: list[PodPlacement] = []
    for pod in request.pods:
        placement, reason = place_pod(trial, pod, policy)
        if placement is None:
            where = f"pod {pod.name} ({pod.gpus} GPUs)"
            done = f" after placing {len(placements)} of {len(request.pods)} pods"
            message = f"{where} fits nowhere{done}: {reason}"
            return Admission.waiting(request.job, WaitReason.WAITING_FOR_GPUS, message), snapshot
        placements.append(placement)
        trial = trial.with_workload(bind(pod, placement))
    return Admission(request.job, True, tuple(placements)), trial


def sharing_note(snapshot: ClusterSnapshot, job: str, placements: Iterable[PodPlacement]) -> str:
    """Which GPUs ``job``'s placed pods share, and with which jobs, for its
    ``Admitted`` message: 'shares GPUs n1/0, n1/1 with ns/a' ('' if none).
    A resident whose memory is parked beside it is named so."""
    gpus_by_job: dict[str, set[tuple[str, int]]] = {}
    for placement in placements:
        residents = snapshot.on_node(placement.node)
        for gpu in placement.gpus:
            for w in residents:
                if w.job != job and gpu in w.gpu_indices:
                    who = (w.job or w.name) + (" (parked)" if w.suspended else "")
                    gpus_by_job.setdefault(who, set()).add((placement.node, gpu))
    parts = [
        f"GPU{'s' if len(where) > 1 else ''} "
        f"{', '.join(f'{node}/{gpu}' for node, gpu in sorted(where))} with {who}"
        for who, where in sorted(gpus_by_job.items())
    ]
    return "shares " + "; ".join(parts) if parts else ""


def admit(
    snapshot: ClusterSnapshot, requests: Iterable[GangRequest], policy: PlacementPolicy
) -> tuple[Admission, ...]:
    """Decide the whole queue against one snapshot, in queue order; an admitted
    job's message says which GPUs it shares (``sharing_note``)."""
    decisions = []
    for request in queue_order(requests):
        decision, after = place_gang(snapshot, request, policy)
        if decision.admitted:
            note = sharing_note(snapshot, request.job, decision.placements)
            decision = replace(decision, message=note)
        decisions.append(decision)
        snapshot = after
    return tuple(decisions)
