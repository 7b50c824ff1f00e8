"""The queue of RLJobs waiting for GPUs, and the port to the gang-admission policy.

The policy (``rlix.core.policy.admission``: a job is admitted only when every pod of
every role fits; priority first, then the least expected work left where the
RLJob declares ``iterations``, then arrival; a sized job of a higher class
waits at the lowest class's place for its grace, ``ordering.precedence``) is
pure and shared with the simulator. This module only turns RLJobs into its
requests and keeps the port narrow, so component tests can drive the
operator's bookkeeping with a table.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from rlix.core.phases import Phase
from rlix.core.policy.admission import Admission, GangRequest, admit
from rlix.core.policy.ordering import (
    DEFAULT_GRACE,
    Grace,
    Partners,
    aging_s,
    critical_jobs,
    grace_s,
    is_aged,
    planned_work_left,
    precedence,
    reported_left,
)
from rlix.core.policy.placement.sharing import (
    DEFAULT_RULES,
    SharingRules,
    kinds_may_pair,
    pair_kind,
)
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.rljob import RLJob
from rlix.core.snapshot import ClusterSnapshot
from rlix.operator.pods import planned_workloads
from rlix.operator.statuses import parse_time


class AdmissionPolicy(Protocol):
    def __call__(
        self, snapshot: ClusterSnapshot, requests: Iterable[GangRequest]
    ) -> Sequence[Admission]: ...


def work_left(job: RLJob) -> float:
    """Expected GPU-seconds left from ``spec.iterations``, the iterations the status
    counted and the seconds they took (``spec.phaseProfile`` until one is done)."""
    spec, status = job.spec, job.status
    if spec.iterations is None:
        return 0.0
    return planned_work_left(
        spec.gpus,
        spec.iterations,
        status.iterations,
        # Idle is left out: a parked or starved trainer reports it, and that
        # time is not the job's own length.
        sum(s for phase, s in status.phase_seconds.items() if phase != Phase.IDLE),
        spec.declared_iteration_s,
    )


@dataclass(frozen=True, slots=True)
class Size:
    """A job's place in its class: expected GPU-seconds left (0: unknown),
    whether it would set the finish if started later (``ordering.critical_jobs``),
    and, for a waiting job in its grace (``ordering.precedence``), the class
    whose place it queues at (None: its own). ``aged_at``: when it aged
    (``ordering.is_aged``; waiting, it goes first in its class; admitted after
    it, its class does not park it)."""

    work_left: float = 0.0
    critical: bool = False
    waiting_as: int | None = None
    grace_until: datetime | None = None
    aged_at: datetime | None = None

    @property
    def reported(self) -> float:
        """What its running pods say (``ordering.reported_left``)."""
        return reported_left(self.work_left, self.critical or self.aged_at is not None)


def sizes(
    jobs: Iterable[RLJob],
    gpus: int,
    now: datetime | None = None,
    waiting: Iterable[str] = (),
    grace: Grace = DEFAULT_GRACE,
    *,
    rules: SharingRules | None = None,
    gpu_mib: int = 0,
) -> dict[str, Size]:
    """Every job's ``Size``; ``jobs`` are the live ones (queued, admitted or
    running), whose work left is the backlog, over the cluster's ``gpus``.

    With ``now``, each job keyed in ``waiting`` that is still in its grace
    (waited since its creation less than ``ordering.grace_s`` of its expected
    length alone with ``grace``'s shares, among the classes the live jobs
    hold), gets ``waiting_as``; one that has waited ``ordering.aging_s`` of it,
    and an admitted job that had by its admission (``status.admittedAt``,
    judged by its declared length), get ``aged_at``.

    With ``rules`` that carry an interference matrix and the largest GPU's
    memory (``gpu_mib``), a job that would outlast the jobs it may share GPUs
    with is critical too (``ordering.short_of_partners``), as in the simulator.
    """
    live = list(jobs)
    left = {job.key: (work_left(job), job.spec.gpus) for job in live}
    critical = critical_jobs(left, gpus, _partners(live, rules, gpu_mib))
    out = {key: Size(w, key in critical) for key, (w, _) in left.items()}
    if now is None or not live:
        return out
    classes = [job.spec.priority for job in live]
    top, lowest = max(classes), min(classes)
    queued = set(waiting)
    for job in live:
        created = parse_time(job.metadata.get("creationTimestamp"))
        size = out[job.key]
        if created is None or job.spec.gpus <= 0:
            continue
        if job.key not in queued:
            # Only aging asks how long an admitted job waited.
            admitted = parse_time(job.status.admitted_at) if grace.aging else None
            if admitted is None:
                continue
            alone = _declared_alone_s(job)
            if is_aged((admitted - created).total_seconds(), alone, shares=grace):
                aged_at = created + timedelta(seconds=aging_s(alone, shares=grace))
                out[job.key] = replace(size, aged_at=aged_at)
            continue
        waited = (now - created).total_seconds()
        alone = size.work_left / job.spec.gpus
        if is_aged(waited, alone, shares=grace):
            size = replace(size, aged_at=created + timedelta(seconds=aging_s(alone, shares=grace)))
        queued_as = precedence(job.spec.priority, top, lowest, waited, alone, shares=grace)
        if queued_as != job.spec.priority:
            span = grace_s(job.spec.priority, top, lowest, alone, shares=grace)
            until = created + timedelta(seconds=span)
            size = replace(size, waiting_as=queued_as, grace_until=until)
        out[job.key] = size
    return out


def _declared_alone_s(job: RLJob) -> float:
    """The job's whole expected length alone from what it declares (0: unknown)."""
    spec = job.spec
    if spec.iterations is None or spec.gpus <= 0:
        return 0.0
    return (
        planned_work_left(spec.gpus, spec.iterations, 0, 0.0, spec.declared_iteration_s) / spec.gpus
    )


def _partners(live: list[RLJob], rules: SharingRules | None, gpu_mib: int) -> Partners | None:
    if rules is None or rules.interference is None or gpu_mib <= 0:
        return None
    return Partners(
        kind_of={job.key: pair_kind(planned_workloads(job)) for job in live},
        pair=functools.partial(kinds_may_pair, rules, gpu_mib=gpu_mib),
    )


def gang_request(job: RLJob, size: Size | None = None) -> GangRequest:
    created = parse_time(job.metadata.get("creationTimestamp"))
    size = size or Size(work_left(job))
    return GangRequest(
        job=job.key,
        # In its grace the queue places it at a lower class's place; its pods
        # keep their own class (the sharing rules and victims judge by it).
        priority=job.spec.priority if size.waiting_as is None else size.waiting_as,
        # creationTimestamp has one-second resolution; the job name then breaks
        # ties, so the order is the same on every pass and after a restart.
        arrival=created.timestamp() if created else 0.0,
        pods=tuple(replace(p, work_left=size.work_left) for p in planned_workloads(job)),
        work_left=size.work_left,
        # Aged, it goes first in its class as a critical job does.
        critical=size.critical or size.aged_at is not None,
    )


class RLixAdmission:
    """The shipped policy: ``rlix.core.policy.admission.admit`` over RLix placement."""

    def __init__(self, rules: SharingRules = DEFAULT_RULES) -> None:
        self._placement = RLixPolicy(rules=rules)

    @property
    def rules(self) -> SharingRules:
        return self._placement.rules

    def __call__(
        self, snapshot: ClusterSnapshot, requests: Iterable[GangRequest]
    ) -> Sequence[Admission]:
        return admit(snapshot, requests, self._placement)
