"""The queue of RLJobs waiting for GPUs, and the port to the gang-admission policy.

The policy (``rlix.core.policy.admission``: a job is admitted only when every pod of
every role fits; priority first, then arrival) is pure and shared with the
simulator. This module only turns RLJobs into its requests and keeps the port
narrow, so component tests can drive the operator's bookkeeping with a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from rlix.core.policy.admission import Admission, GangRequest, admit
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.rljob import RLJob
from rlix.core.snapshot import ClusterSnapshot
from rlix.operator.pods import planned_workloads
from rlix.operator.statuses import parse_time


class AdmissionPolicy(Protocol):
    def __call__(
        self, snapshot: ClusterSnapshot, requests: Iterable[GangRequest]
    ) -> Sequence[Admission]: ...


def gang_request(job: RLJob) -> GangRequest:
    created = parse_time(job.metadata.get("creationTimestamp"))
    return GangRequest(
        job=job.key,
        priority=job.spec.priority,
        # creationTimestamp has one-second resolution; the job name then breaks
        # ties, so the order is the same on every pass and after a restart.
        arrival=created.timestamp() if created else 0.0,
        pods=planned_workloads(job),
    )


class RLixAdmission:
    """The shipped policy: ``rlix.core.policy.admission.admit`` over RLix placement."""

    def __init__(self) -> None:
        self._placement = RLixPolicy()

    def __call__(
        self, snapshot: ClusterSnapshot, requests: Iterable[GangRequest]
    ) -> Sequence[Admission]:
        return admit(snapshot, requests, self._placement)
