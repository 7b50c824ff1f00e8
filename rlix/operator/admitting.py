"""One admission pass: the waiting RLJobs against a snapshot of the cluster.

Deciding is the pure policy's job; this module gathers its inputs (nodes, live
pods, reservations of admitted jobs whose pods are not bound yet) and records
its answers: ``Admitted`` in status *before* any pod exists, so a restart finds
the decision and creates the pods instead of deciding again; a waiting job gets
``Admitted=False`` with the policy's reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from rlix.core.policy.admission import Admission, PodPlacement, queue_order
from rlix.core.rljob import CONDITION_ADMITTED, ConditionStatus, JobState, RLJob
from rlix.core.snapshot import Workload
from rlix.core.validation import Capacity, capacity_errors
from rlix.operator.metrics import Metrics
from rlix.operator.pods import planned_workloads
from rlix.operator.queueing import AdmissionPolicy, gang_request
from rlix.operator.recording import Recorder
from rlix.operator.snapshots import build_snapshot
from rlix.operator.statuses import rfc3339, with_condition
from rlix.operator.store import Store

WAITING = (None, JobState.QUEUED)
# Jobs handed to the policy per pass, in queue order. Gang placement costs tens
# of milliseconds per job on a busy snapshot, and a pass over a thousand-job
# queue would take half a minute; later jobs get their turn as the head of the
# queue is admitted. A job beyond the window is told its place instead.
DEFAULT_WINDOW = 32
# A waiting job's message can change on every pass (free GPUs move); rewriting it
# for every job in a long queue each time would flood the API server.
MESSAGE_REFRESH_S = 10.0


@dataclass
class Admitter:
    store: Store
    recorder: Recorder
    policy: AdmissionPolicy
    metrics: Metrics
    clock: Callable[[], datetime]
    window: int = DEFAULT_WINDOW
    # job key -> pod "namespace/name" -> where admission planned it (the pod
    # carries it too, as an annotation, for after a restart).
    reservations: dict[str, dict[str, PodPlacement]] = field(default_factory=dict)
    _last_write: dict[str, float] = field(default_factory=dict)

    def reservation(self, job: str, pod: str) -> PodPlacement | None:
        return self.reservations.get(job, {}).get(pod)

    def _waiting(self) -> list[RLJob]:
        out = []
        for key in list(self.store.jobs):
            job, errors = self.store.job(key)
            if job is not None and not errors and job.status.state in WAITING:
                out.append(job)
        return out

    def _planned(self) -> list[Workload]:
        """Admitted jobs' pods that are not created yet, at their reserved nodes."""
        out = []
        for key in self.store.jobs:
            job, _ = self.store.job(key)
            if job is None or job.status.state not in (JobState.ADMITTED, JobState.RUNNING):
                continue
            for w in planned_workloads(job):
                place = self.reservation(key, w.name)
                if place is not None:
                    out.append(replace(w, node=place.node, gpu_indices=place.gpus))
        return out

    async def run(self) -> None:
        started = time.perf_counter()
        for key in [k for k in self.reservations if k not in self.store.jobs]:
            del self.reservations[key]
        waiting = self._waiting()
        self.metrics.queue_length.set(len(waiting))
        if not waiting:
            return
        snapshot = build_snapshot(self.store.nodes.values(), self.store.all_pods(), self._planned())
        capacity = Capacity.of(snapshot)
        decisions: dict[str, Admission] = {}
        candidates = []
        for job in waiting:
            if capacity is None:
                decisions[job.key] = Admission(job.key, False, reason="no schedulable GPU node")
                continue
            never = capacity_errors(job.spec, capacity)
            if never:
                text = "; ".join(str(e) for e in never)
                decisions[job.key] = Admission(job.key, False, reason=f"can never fit: {text}")
            else:
                candidates.append(gang_request(job))
        ordered = queue_order(candidates)
        considered, behind = ordered[: self.window], ordered[self.window :]
        for position, request in enumerate(behind, start=self.window + 1):
            decisions[request.job] = Admission(
                request.job,
                False,
                reason=f"position {position} in the queue; the first {self.window} are "
                "considered in each admission pass",
            )
        # The policy is CPU-bound pure code: run it off the event loop so watch
        # events, status writes and the webhook keep being served meanwhile.
        for decision in await asyncio.to_thread(self.policy, snapshot, considered):
            decisions[decision.job] = decision
        self.metrics.admission_seconds.observe(time.perf_counter() - started)
        by_key = {job.key: job for job in waiting}
        await asyncio.gather(*(self._record(by_key[k], d) for k, d in decisions.items()))

    async def _record(self, job: RLJob, decision: Admission) -> None:
        now = self.clock()
        generation = job.metadata.get("generation")
        if decision.admitted:
            self.reservations[job.key] = {p.pod: p for p in decision.placements}
            new = job.status.model_copy(
                update={
                    "state": JobState.ADMITTED,
                    "admitted_at": rfc3339(now),
                    "gpus": job.spec.gpus,
                }
            )
            nodes = sorted({p.node for p in decision.placements})
            message = f"all {len(decision.placements)} pods fit (on {', '.join(nodes)})"
            new = with_condition(
                new,
                CONDITION_ADMITTED,
                ConditionStatus.TRUE,
                "Admitted",
                message,
                now=now,
                generation=generation,
            )
            if await self.recorder.status(job.key, job.status, new):
                self.metrics.admitted.inc()
                await self.recorder.event(job.key, "Normal", "Admitted", message)
            return
        reason = (
            "NeverFits"
            if decision.reason.startswith("can never fit")
            else "Queued"
            if decision.reason.startswith("position ")
            else "WaitingForGPUs"
        )
        old = job.status.condition(CONDITION_ADMITTED)
        if old is not None and old.reason == reason:
            last = self._last_write.get(job.key, 0.0)
            if time.monotonic() - last < MESSAGE_REFRESH_S:
                return
        new = job.status.model_copy(
            update={
                "state": JobState.QUEUED,
                "gpus": job.spec.gpus,
                "observed_generation": generation,
            }
        )
        new = with_condition(
            new,
            CONDITION_ADMITTED,
            ConditionStatus.FALSE,
            reason,
            decision.reason,
            now=now,
            generation=generation,
        )
        if await self.recorder.status(job.key, job.status, new):
            self._last_write[job.key] = time.monotonic()
            if old is None or old.reason != reason:
                await self.recorder.event(job.key, "Normal", reason, decision.reason)
