"""Reconcile one admitted RLJob: its pods exist, failures back off, status is observed.

Idempotent by construction, so it can run after any crash: pod names are
deterministic and creation treats "already exists" as success; the restart
count lives in status; the only in-memory state (backoff deadlines, failures
already counted) is an optimisation a restart may lose, never a correctness
requirement.

A pod is the job's only if its controller ownerReference carries the job's
UID: a pod of the same name left by an earlier job of the same name (deleted
with ``--cascade=orphan``) is deleted and replaced, never adopted. A finished
job's pods are deleted *before* its final state is written, and finished jobs
are revisited on every resync, so a crash at any point leaves no pod running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rlix.core import names
from rlix.core.dra import pod_claim_names
from rlix.core.phases import Phase
from rlix.core.rljob import (
    CONDITION_ADMITTED,
    CONDITION_FAILED,
    CONDITION_RUNNING,
    CONDITION_SUCCEEDED,
    ConditionStatus,
    JobState,
    RLJob,
    RLJobStatus,
    Role,
    RoleKind,
)
from rlix.core.validation import FieldError
from rlix.operator.admitting import Admitter
from rlix.operator.claims import ClaimNotReadyError, delete_claim, ensure_claim
from rlix.operator.kube import Kube, KubeError
from rlix.operator.metrics import Metrics
from rlix.operator.pods import build_pod, desired_pod_names
from rlix.operator.prerequisites import PERMANENT, Prerequisites, Refusal
from rlix.operator.recording import Recorder
from rlix.operator.replanning import DEFAULT_AFTER_S, REASON_REPLANNING, Stuck, stuck_pods
from rlix.operator.replanning import message as replan_message
from rlix.operator.statuses import PodView, observe, parse_time, running_state, with_condition
from rlix.operator.store import Body, Store

log = logging.getLogger("rlix.operator")
# A pod whose claim cannot be written yet (its node's slice not published yet)
# is tried again this much later.
CLAIM_RETRY_S = 2.0
# A trainer that exits right after leaving training (its last weight sync, then
# idle) can be seen Succeeded before its node agent's publication of those
# phases lands: the agent publishes in the background, the kubelet writes the
# pod's phase on its own. Finishing the job then would lose its last
# iteration, so a job whose finished trainers still read `training` waits
# this long for their last phases before it is written Succeeded.
SETTLE_S = 10.0

ACTIVE = (JobState.ADMITTED, JobState.RUNNING)
FINISHED = (JobState.SUCCEEDED, JobState.FAILED)


def owned_by(body: Body, uid: str) -> bool:
    """Whether ``uid`` is the pod's controller (a name match alone proves nothing)."""
    refs = body.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("controller") and r.get("uid") == uid for r in refs)


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
    agent_socket_dir: str = names.AGENT_SOCKET_DIR
    scheduler_name: str = names.SCHEDULER_NAME
    replan_after_s: float = DEFAULT_AFTER_S
    _prerequisites: Prerequisites = field(init=False)
    _not_before: dict[str, float] = field(default_factory=dict)  # pod -> monotonic
    # job -> monotonic: when a pod of it that is unschedulable now is due for re-planning
    _recheck: dict[str, float] = field(default_factory=dict)
    _failures_seen: set[str] = field(default_factory=set)  # pod uids counted already
    _claims_deleted: set[str] = field(default_factory=set)  # "ns/claim" of finished jobs
    # job -> monotonic: when its trainers were first seen finished while still
    # reading `training` (``SETTLE_S``)
    _settling: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._prerequisites = Prerequisites(self.kube, self.recorder)

    def due(self) -> list[str]:
        """Jobs with a pod whose backoff has just expired."""
        now = time.monotonic()
        expired = [pod for pod, t in self._not_before.items() if t <= now]
        for pod in expired:
            del self._not_before[pod]
        recheck = [job for job, t in self._recheck.items() if t <= now]
        for job in recheck:
            del self._recheck[job]
        return sorted({pod.rsplit("/", 1)[0] for pod in expired} | set(recheck))

    async def reconcile(self, key: str) -> None:
        if key not in self.store.jobs:
            self._settling.pop(key, None)  # deleted while it settled
            return
        started = time.perf_counter()
        job, errors = self.store.job(key)
        if job is None or errors:
            await self._invalid(key, errors)
        elif job.status.state in ACTIVE:
            await self._active(job)
        elif job.status.state in FINISHED:
            # Also after a restart: a crash between a cleanup and its status
            # write, or an older operator that wrote the status first.
            await self._delete_pods(job)
        self.metrics.reconcile_seconds.observe(time.perf_counter() - started)

    def _settles(self, key: str, trainers: list[PodView]) -> bool:
        """Whether a finished job waits for its trainers' last phases (``SETTLE_S``);
        it is looked at again when they land or the wait is over."""
        if not any(v.phase is Phase.TRAINING for v in trainers):
            self._settling.pop(key, None)
            return False
        now = time.monotonic()
        since = self._settling.setdefault(key, now)
        if now - since >= SETTLE_S:
            self._settling.pop(key, None)
            return False
        self._recheck[key] = since + SETTLE_S
        return True

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
        pods = await self._own_pods(job, desired)
        status = job.status
        restarts = status.restarts + await self._handle_failures(job, pods)
        if restarts > job.spec.backoff_limit:
            await self._fail(job, restarts, "BackoffLimitExceeded")
            return
        stuck, wait = stuck_pods(pods, now, self.replan_after_s, parse_time(status.admitted_at))
        if stuck:
            await self._replan(job, stuck)
            return
        if wait is not None:
            self._recheck[job.key] = time.monotonic() + wait
        views = [PodView.of(b) for b in pods.values()]
        trainers = [v for v in views if _is_trainer(job, v.role)]
        finished = bool(trainers) and all(v.pod_phase == "Succeeded" for v in trainers)
        if finished and self._settles(job.key, trainers):
            return
        refusal = None
        # A finished job's missing pods are not created again: finishing deletes
        # them before it writes Succeeded (below), and after a crash in between
        # a restart would otherwise start its rollouts a second time.
        if not finished:
            refusal = await self._prerequisites.ensure(job)
            if refusal is None:
                refusal = await self._create_missing(job, desired, pods)
        if refusal is not None and refusal.permanent:
            # An invalid template, pod or Service name: no retry can fix it, so
            # the job fails and what admission reserved for it is released.
            await self._fail(job, restarts, refusal.reason, refusal.message)
            return
        new = observe(status, job.spec, views, now)
        state = JobState.SUCCEEDED if finished else running_state(len(desired), views)
        new = new.model_copy(
            update={
                "state": state,
                "restarts": restarts,
                "observed_generation": job.metadata.get("generation"),
            }
        )
        running = sum(1 for v in views if v.pod_phase == "Running")
        bound = sum(1 for v in views if v.node)
        message = f"{running}/{len(desired)} pods running, {bound} bound to nodes"
        reason = "AllPodsRunning" if state is JobState.RUNNING else "PodsStarting"
        if state is JobState.SUCCEEDED:
            reason, message = "Succeeded", "the trainer finished"
        elif refusal is not None:
            # Quota or policy: the admitted capacity stays promised (raising the
            # quota lets the job start), and the job says why it does not.
            reason, message = refusal.reason, refusal.message
            old = status.condition(CONDITION_RUNNING)
            if old is None or old.reason != reason:
                await self.recorder.event(job.key, "Warning", reason, message)
        new = with_condition(
            new,
            CONDITION_RUNNING,
            ConditionStatus.TRUE if state is JobState.RUNNING else ConditionStatus.FALSE,
            reason,
            message,
            now=now,
            generation=job.metadata.get("generation"),
        )
        finishing = state is JobState.SUCCEEDED and status.state is not JobState.SUCCEEDED
        if finishing:
            new = with_condition(
                new,
                CONDITION_SUCCEEDED,
                ConditionStatus.TRUE,
                "TrainerSucceeded",
                "every trainer pod finished successfully",
                now=now,
                generation=job.metadata.get("generation"),
            )
            # Delete first, mark second: a crash in between leaves a job that
            # is still active and is finished again, never a finished job
            # whose pods hold GPUs.
            await self._delete_pods(job)
        await self.recorder.status(job.key, status, new)
        if finishing:
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

    async def _own_pods(self, job: RLJob, desired: dict[str, tuple[Role, int]]) -> dict[str, Body]:
        """The job's pods by name; another incarnation's pods of our names are deleted."""
        uid = str(job.metadata.get("uid", ""))
        own: dict[str, Body] = {}
        # A copy: the loop awaits deletions, and pod events for this job change
        # the store meanwhile ("dictionary changed size during iteration").
        for name, body in list(self.store.pods_of(job.key).items()):
            if name not in desired:
                continue
            if owned_by(body, uid):
                own[name] = body
                continue
            if body["metadata"].get("deletionTimestamp"):
                continue  # already going; recreated once the DELETE event arrives
            await self.kube.delete_pod(job.namespace, name)
            await self.recorder.event(
                job.key,
                "Warning",
                "StalePodReplaced",
                f"pod {name} (uid {body['metadata'].get('uid')}) is not owned by this job "
                f"(uid {uid}), e.g. left by an earlier job of the same name; deleted, "
                "to be recreated",
            )
        return own

    async def _create_missing(
        self, job: RLJob, desired: dict[str, tuple[Role, int]], pods: dict[str, Body]
    ) -> Refusal | None:
        """Create the pods that do not exist; the first refusal, if the API refused one."""
        uid = str(job.metadata.get("uid", ""))
        now = time.monotonic()
        todo = []
        present = self.store.pods_of(job.key)
        for name, (role, index) in desired.items():
            if name in present or self._not_before.get(f"{job.key}/{name}", 0.0) > now:
                continue
            place = self.admitter.reservation(job.key, f"{job.namespace}/{name}")
            claim = None
            if place is not None and role.gpus_per_replica and self.store.claims_node(place.node):
                try:
                    claim = await ensure_claim(
                        self.kube, job, owner_uid=uid, role=role, pod=name, place=place
                    )
                except ClaimNotReadyError as exc:
                    log.warning("pod %s/%s waits for its claim: %s", job.namespace, name, exc)
                    self._not_before[f"{job.key}/{name}"] = now + CLAIM_RETRY_S
                    continue
            todo.append(
                build_pod(
                    job,
                    role,
                    index,
                    owner_uid=uid,
                    admitted_node=place.node if place else None,
                    agent_socket_dir=self.agent_socket_dir,
                    scheduler_name=self.scheduler_name,
                    claim=claim,
                )
            )
        if not todo:
            return None
        results = await asyncio.gather(
            *(self.kube.create_pod(p) for p in todo), return_exceptions=True
        )
        refusals = [r for r in results if isinstance(r, KubeError) and 400 <= r.status < 500]
        unexpected = [r for r in results if isinstance(r, BaseException) and r not in refusals]
        if unexpected:
            raise unexpected[0]
        count = sum(1 for r in results if r is True)
        self.metrics.pods_created.inc(count)
        if count:
            await self.recorder.event(
                job.key, "Normal", "CreatedPods", f"created {count} of {len(desired)} pods"
            )
        if not refusals:
            return None
        reason = "PodRejected" if refusals[0].status in PERMANENT else "PodCreationRefused"
        return Refusal.of(refusals[0], "a pod", reason)

    async def _replan(self, job: RLJob, stuck: list[Stuck]) -> None:
        """Release a gang whose plan cannot bind: delete its pods, queue it again.

        Delete first, queue second: a crash in between leaves an admitted job
        whose pods are recreated on the same plan and found stuck again, never
        a queued job with pods. The admission pass that sees ``Replanning``
        drops the job's ledger entry and decides it afresh.
        """
        text = replan_message(stuck, self.replan_after_s)
        log.warning("re-planning %s: %s", job.key, text)
        uid = str(job.metadata.get("uid", ""))
        doomed = [n for n, b in self.store.pods_of(job.key).items() if owned_by(b, uid)]
        await asyncio.gather(*(self.kube.delete_pod(job.namespace, n) for n in doomed))
        # Its claims too: the next plan may pin other GPUs, and a claim that
        # outlived its pod would keep consuming its GPU's published memory.
        desired = desired_pod_names(job)
        await asyncio.gather(*(delete_claim(self.kube, job.namespace, n) for n in desired))
        # The next plan writes claims of the same names: they are not gone for good.
        self._claims_deleted.difference_update(f"{job.namespace}/{n}" for n in desired)
        new = with_condition(
            job.status.model_copy(update={"state": JobState.QUEUED}),
            CONDITION_ADMITTED,
            ConditionStatus.FALSE,
            REASON_REPLANNING,
            text,
            now=self.clock(),
            generation=job.metadata.get("generation"),
        )
        await self.recorder.status(job.key, job.status, new)
        await self.recorder.event(job.key, "Warning", REASON_REPLANNING, text)
        self.metrics.replans.inc()
        self.store.queue_changed = True

    async def _fail(self, job: RLJob, restarts: int, reason: str, message: str = "") -> None:
        message = message or f"{restarts} pod failures, over backoffLimit {job.spec.backoff_limit}"
        # Delete first, mark second (see the module docstring).
        await self._delete_pods(job)
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
        self.store.queue_changed = True

    async def _delete_pods(self, job: RLJob) -> None:
        """Free the GPUs of a finished job; finished pods stay for their logs.

        Only the job's own pods: a pod of our name that another job owns is
        not ours to delete.
        """
        uid = str(job.metadata.get("uid", ""))
        doomed = [
            name
            for name, body in self.store.pods_of(job.key).items()
            if owned_by(body, uid)
            and body.get("status", {}).get("phase") not in ("Succeeded", "Failed")
        ]
        await asyncio.gather(*(self.kube.delete_pod(job.namespace, n) for n in doomed))
        if doomed:
            self.store.queue_changed = True
        # The job's claims go with it: a claim that outlived its pods would keep
        # consuming its GPU's published memory. Once per claim, not per resync.
        claims = {
            claim
            for body in self.store.pods_of(job.key).values()
            if owned_by(body, uid)
            for claim in pod_claim_names(body)
            if f"{job.namespace}/{claim}" not in self._claims_deleted
        }
        await asyncio.gather(*(delete_claim(self.kube, job.namespace, c) for c in claims))
        self._claims_deleted.update(f"{job.namespace}/{c}" for c in claims)


def _is_trainer(job: RLJob, role: str) -> bool:
    spec_role = job.spec.role(role)
    return spec_role is not None and spec_role.kind is RoleKind.TRAINER
