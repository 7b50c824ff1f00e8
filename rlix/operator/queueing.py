"""The queue of RLJobs waiting for GPUs, and the port to the gang-admission policy.

The policy (``rlix.core.policy.admission``: a job is admitted only when every pod of
every role fits; priority first, then the least expected work left where the
RLJob declares ``iterations``, then arrival) is pure and shared with the
simulator. This module only turns RLJobs into its requests and keeps the port
narrow, so component tests can drive the operator's bookkeeping with a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from rlix.core.phases import Phase
from rlix.core.policy.admission import Admission, GangRequest, admit
from rlix.core.policy.ordering import planned_work_left
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


def gang_request(job: RLJob) -> GangRequest:
    created = parse_time(job.metadata.get("creationTimestamp"))
    return GangRequest(
        job=job.key,
        priority=job.spec.priority,
        # creationTimestamp has one-second resolution; the job name then breaks
        # ties, so the order is the same on every pass and after a restart.
        arrival=created.timestamp() if created else 0.0,
        pods=planned_workloads(job),
        work_left=work_left(job),
    )


class RLixAdmission:
    """The shipped policy: ``rlix.core.policy.admission.admit`` over RLix placement."""

    def __init__(self) -> None:
        self._placement = RLixPolicy()

    def __call__(
        self, snapshot: ClusterSnapshot, requests: Iterable[GangRequest]
    ) -> Sequence[Admission]:
        return admit(snapshot, requests, self._placement)
