"""Reconcile one admitted RLJob: its pods exist, failures back off, status is observed.

Idempotent by construction, so it can run after any crash: pod names are
deterministic and creation treats "already exists" as success; the restart
count lives in status; the only in-memory state (backoff deadlines, failures
already counted) is an optimisation a restart may lose, never a correctness
requirement.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rlix.core.rljob import (
    CONDITION_FAILED,
    CONDITION_RUNNING,
    ConditionStatus,
    JobState,
    RLJob,
    RLJobStatus,
    Role,
    RoleKind,
)
from rlix.core.validation import FieldError
from rlix.operator.admitting import Admitter
from rlix.operator.kube import Kube
from rlix.operator.metrics import Metrics
from rlix.operator.pods import build_pod, desired_pod_names
from rlix.operator.recording import Recorder
from rlix.operator.statuses import PodView, observe, running_state, with_condition
from rlix.operator.store import Body, Store

ACTIVE = (JobState.ADMITTED, JobState.RUNNING)
FINISHED = (JobState.SUCCEEDED, JobState.FAILED)


def backoff_s(restarts: int, *, base_s: float = 1.0, cap_s: float = 300.0) -> float:
    """Exponential restart delay: base, 2 x base, 4 x base, ... up to ``cap_s``."""
    return float(min(cap_s, base_s * 2 ** max(restarts - 1, 0)))


@dataclass
class Reconciler:
    store: Store
    kube: Kube
    recorder: Recorder
    admitter: Admitter
    metrics: Metrics
    clock: Callable[[], datetime]
    backoff_base_s: float = 1.0
    _not_before: dict[str, float] = field(default_factory=dict)  # pod -> monotonic
    _failures_seen: set[str] = field(default_factory=set)  # pod uids counted already

    def due(self) -> list[str]:
        """Jobs with a pod whose backoff has just expired."""
        now = time.monotonic()
        expired = [pod for pod, t in self._not_before.items() if t <= now]
        for pod in expired:
            del self._not_before[pod]
        return sorted({pod.rsplit("/", 1)[0] for pod in expired})

    async def reconcile(self, key: str) -> None:
        if key not in self.store.jobs:
            return
        started = time.perf_counter()
        job, errors = self.store.job(key)
        if job is None or errors:
            await self._invalid(key, errors)
        elif job.status.state in ACTIVE:
            await self._active(job)
        elif job.status.state is JobState.FAILED:
            await self._delete_pods(job)
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)

    async def _invalid(self, key: str, errors: list[FieldError]) -> None:
        """A spec the webhook would refuse (it was down, or the cluster shrank)."""
        body = self.store.jobs[key]
        status = RLJobStatus.model_validate(body.get("status") or {})
        if status.state is JobState.FAILED:
            return
        message = "; ".join(str(e) for e in errors)
        new = with_condition(
            status.model_copy(update={"state": JobState.FAILED}),
            CONDITION_FAILED,
            ConditionStatus.TRUE,
            "InvalidSpec",
            message,
            now=self.clock(),
            generation=body["metadata"].get("generation"),
        )
        await self.recorder.status(key, status, new)
        await self.recorder.event(key, "Warning", "InvalidSpec", message)

    async def _active(self, job: RLJob) -> None:
        now = self.clock()
        desired = desired_pod_names(job)
        pods = {n: b for n, b in self.store.pods_of(job.key).items() if n in desired}
        status = job.status
        restarts = status.restarts + await self._handle_failures(job, pods)
        if restarts > job.spec.backoff_limit:
            await self._fail(job, restarts, "BackoffLimitExceeded")
            return
        await self._create_missing(job, desired, pods)
        views = [PodView.of(b) for b in pods.values()]
        new = observe(status, job.spec, views, now)
        state = running_state(len(desired), views)
        trainers = [v for v in views if _is_trainer(job, v.role)]
        if trainers and all(v.pod_phase == "Succeeded" for v in trainers):
            state = JobState.SUCCEEDED
        new = new.model_copy(
            update={
                "state": state,
                "restarts": restarts,
                "observed_generation": job.metadata.get("generation"),
            }
        )
        running = sum(1 for v in views if v.pod_phase == "Running")
        bound = sum(1 for v in views if v.node)
        new = with_condition(
            new,
            CONDITION_RUNNING,
            ConditionStatus.TRUE if state is JobState.RUNNING else ConditionStatus.FALSE,
            "AllPodsRunning" if state is JobState.RUNNING else "PodsStarting",
            f"{running}/{len(desired)} pods running, {bound} bound to nodes",
            now=now,
            generation=job.metadata.get("generation"),
        )
        await self.recorder.status(job.key, status, new)
        if state is JobState.SUCCEEDED and status.state is not JobState.SUCCEEDED:
            await self._delete_pods(job)
            await self.recorder.event(job.key, "Normal", "Succeeded", "the trainer finished")
            self.store.queue_changed = True

    async def _handle_failures(self, job: RLJob, pods: dict[str, Body]) -> int:
        """Delete failed pods (recreated after a backoff); return how many are new."""
        failed = 0
        for name, body in pods.items():
            uid = body["metadata"].get("uid", name)
            if body.get("status", {}).get("phase") != "Failed" or uid in self._failures_seen:
                continue
            self._failures_seen.add(uid)
            failed += 1
            self.metrics.pod_failures.inc()
            delay = backoff_s(job.status.restarts + failed, base_s=self.backoff_base_s)
            self._not_before[f"{job.key}/{name}"] = time.monotonic() + delay
            # Delete before counting in status: a crash in between loses one
            # count (harmless) instead of counting the same failure twice.
            await self.kube.delete_pod(job.namespace, name)
            await self.recorder.event(
                job.key, "Warning", "PodFailed", f"pod {name} failed; recreating in {delay:.0f}s"
            )
        return failed

    async def _create_missing(
        self, job: RLJob, desired: dict[str, tuple[Role, int]], pods: dict[str, Body]
    ) -> None:
        uid = str(job.metadata.get("uid", ""))
        now = time.monotonic()
        todo = []
        for name, (role, index) in desired.items():
            if name in pods or self._not_before.get(f"{job.key}/{name}", 0.0) > now:
                continue
            place = self.admitter.reservation(job.key, f"{job.namespace}/{name}")
            todo.append(
                build_pod(
                    job, role, index, owner_uid=uid, admitted_node=place.node if place else None
                )
            )
        if not todo:
            return
        created = await asyncio.gather(*(self.kube.create_pod(p) for p in todo))
        count = sum(created)
        self.metrics.pods_created.inc(count)
        if count:
            await self.recorder.event(
                job.key, "Normal", "CreatedPods", f"created {count} of {len(desired)} pods"
            )

    async def _fail(self, job: RLJob, restarts: int, reason: str) -> None:
        message = f"{restarts} pod failures, over backoffLimit {job.spec.backoff_limit}"
        new = with_condition(
            job.status.model_copy(update={"state": JobState.FAILED, "restarts": restarts}),
            CONDITION_FAILED,
            ConditionStatus.TRUE,
            reason,
            message,
            now=self.clock(),
            generation=job.metadata.get("generation"),
        )
        await self.recorder.status(job.key, job.status, new)
        await self.recorder.event(job.key, "Warning", reason, message)
        await self._delete_pods(job)

    async def _delete_pods(self, job: RLJob) -> None:
        """Free the GPUs of a finished job; finished pods stay for their logs."""
        doomed = [
            name
            for name, body in self.store.pods_of(job.key).items()
            if body.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        await asyncio.gather(*(self.kube.delete_pod(job.namespace, n) for n in doomed))
        if doomed:
            self.store.queue_changed = True


def _is_trainer(job: RLJob, role: str) -> bool:
    spec_role = job.spec.role(role)
    return spec_role is not None and spec_role.kind is RoleKind.TRAINER
