"""One admission pass: the waiting RLJobs against a snapshot of the cluster.

Deciding is the pure policy's job; this module gathers its inputs (nodes, live
pods, reservations of admitted jobs whose pods are not bound yet) and records
its answers. The reservations are not this process's memory but the admission
ledger (``rlix.operator.ledger``): read before deciding, written with a
resourceVersion precondition before any status, so neither a restart nor a
second operator can promise the same GPUs twice. Then ``Admitted`` goes into
status *before* any pod exists, so a restart finds the decision and creates the
pods instead of deciding again; a waiting job gets ``Admitted=False`` with the
policy's typed reason and its sentence.

Before its first pass a (re)started admitter lists nodes, role pods and RLJobs
from the API server itself: the watches may not have delivered them yet, and a
pass over a half-filled cache would see running jobs' GPUs as free. The
operator's loop lists again every few minutes (``relist``), which also drops
what a watch kept after missing its deletion.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from rlix.core import names
from rlix.core.policy.admission import Admission, PodPlacement, WaitReason, queue_order
from rlix.core.policy.ordering import DEFAULT_GRACE, Grace
from rlix.core.rljob import CONDITION_ADMITTED, ConditionStatus, JobState, RLJob
from rlix.core.snapshot import Workload
from rlix.core.validation import Capacity, FieldError, capacity_errors
from rlix.operator.kube import Kube
from rlix.operator.ledger import Entry
from rlix.operator.metrics import Metrics
from rlix.operator.pods import planned_workloads
from rlix.operator.queueing import AdmissionPolicy, gang_request, sizes
from rlix.operator.recording import Recorder
from rlix.operator.replanning import REASON_REPLANNING
from rlix.operator.snapshots import build_snapshot
from rlix.operator.statuses import parse_time, rfc3339, with_condition
from rlix.operator.store import Body, Store

log = logging.getLogger("rlix.operator")

WAITING = (None, JobState.QUEUED)
FINISHED = (JobState.SUCCEEDED, JobState.FAILED)
# Jobs handed to the policy per pass, in queue order. Gang placement costs tens
# of milliseconds per job on a busy snapshot, and a pass over a thousand-job
# queue would take half a minute; later jobs get their turn as the head of the
# queue is admitted. A job beyond the window is told its place instead.
DEFAULT_WINDOW = 32
# A waiting job's message can change on every pass (free GPUs move); rewriting it
# for every job in a long queue each time would flood the API server.
MESSAGE_REFRESH_S = 10.0


def pod_slot_errors(spec_pods: int, nodes: Iterable[Body]) -> list[FieldError]:
    """A gang with more pods than the cluster has pod slots can never all run.

    The kubelet's ``allocatable.pods`` (110 by default) bounds pods per node
    whatever their GPUs; CPU-only roles can land on any schedulable node.
    """
    slots = 0
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        raw = ((node.get("status") or {}).get("allocatable") or {}).get("pods")
        try:
            slots += int(str(raw))
        except ValueError:
            return []  # a node that does not say: the cluster's pod slots are unknown
    if spec_pods <= slots:
        return []
    return [
        FieldError(
            "spec.roles",
            f"the job has {spec_pods} pods (the sum of replicas), but the cluster's "
            f"schedulable nodes have {slots} pod slots (allocatable pods)",
        )
    ]


@dataclass
class Admitter:
    store: Store
    recorder: Recorder
    policy: AdmissionPolicy
    metrics: Metrics
    clock: Callable[[], datetime]
    kube: Kube
    ledger_namespace: str = "default"
    window: int = DEFAULT_WINDOW
    # How long a sized job of a higher class queues among the lowest
    # (``ordering.precedence``; ``ordering.STRICT``: not at all).
    grace: Grace = DEFAULT_GRACE
    # job key -> its ledger entry (pod "namespace/name" -> where admission
    # planned it), as last read from or written to the ledger.
    reservations: dict[str, Entry] = field(default_factory=dict)
    # namespaces to list at the first pass (empty: cluster-wide)
    namespaces: tuple[str, ...] = ()
    _primed: bool = False
    _last_write: dict[str, float] = field(default_factory=dict)

    def reservation(self, job: str, pod: str) -> PodPlacement | None:
        entry = self.reservations.get(job)
        return entry.placements.get(pod) if entry is not None else None

    async def relist(self) -> None:
        """Fill the store from the API server itself, and forget what is gone.

        Before the first decision, so a pass never sees a half-filled cache;
        then every few minutes (``loop.run_loop``), so an object whose DELETED
        event the watch never delivered does not hold its admission or its GPUs
        until the operator restarts."""
        prefixes: list[tuple[str, str | None]] = [
            (f"/namespaces/{ns}", ns) for ns in self.namespaces
        ] or [("", None)]
        await self._relist("nodes", "/api/v1/nodes", "", None)
        for prefix, namespace in prefixes:
            await self._relist("pods", f"/api/v1{prefix}/pods", names.LABEL_JOB, namespace)
            path = f"/apis/{names.GROUP}/{names.VERSION}{prefix}/{names.PLURAL}"
            await self._relist("jobs", path, "", namespace)
        self._primed = True

    async def _relist(self, kind: str, path: str, selector: str, namespace: str | None) -> None:
        items, version = await self.kube.list_snapshot(path, label_selector=selector)
        # Watch events handled while the list was in flight are safe either
        # way: the store keeps the newer version of what both carry, remembers
        # what was deleted (uids), and forgets only what is older than the list.
        put = {"nodes": self.store.put_node, "pods": self.store.put_pod, "jobs": self.store.put_job}
        for item in items:
            put[kind](item)
        gone = self.store.forget_unlisted(kind, items, version, namespace)
        if gone:
            self.metrics.forgotten.labels(kind=kind).inc(len(gone))
            log.warning(
                "relist: %d %s gone from the API server but still in the watch's "
                "view (a missed deletion), forgotten: %s",
                len(gone),
                kind,
                ", ".join(sorted(gone)[:10]) + (" ..." if len(gone) > 10 else ""),
            )

    def live(self) -> list[RLJob]:
        """Every valid job not finished: the queue and what holds GPUs."""
        out = []
        for key in list(self.store.jobs):
            job, errors = self.store.job(key)
            if job is not None and not errors and job.status.state not in FINISHED:
                out.append(job)
        return out

    def _planned(self) -> list[Workload]:
        """Every ledger placement, as the workload its job's spec describes.

        Pods that exist replace their planned twin in the snapshot (by name),
        so a placement counts exactly until its pod is seen.
        """
        out = []
        for key, entry in self.reservations.items():
            job, _ = self.store.job(key) if key in self.store.jobs else (None, [])
            if job is None:
                continue
            for w in planned_workloads(job):
                place = entry.placements.get(w.name)
                if place is not None:
                    out.append(replace(w, node=place.node, gpu_indices=place.gpus))
        return out

    async def _stale(self, key: str, entry: Entry) -> bool:
        """Whether an entry's job has finished, no longer exists (asked of the API) or
        is being re-planned."""
        body = self.store.jobs.get(key)
        if body is None or body["metadata"].get("uid") != entry.uid:
            namespace, name = key.split("/", 1)
            body = await self.kube.get_rljob(namespace, name)
            if body is None or body["metadata"].get("uid") != entry.uid:
                return True
            self.store.put_job(body)  # admitted by another operator, not watched yet
        job, _ = self.store.job(key)
        if job is None or job.status.state in FINISHED:
            return True
        # The reconciler sent the gang back to the queue: its placements failed.
        admitted = job.status.condition(CONDITION_ADMITTED)
        return (
            job.status.state in WAITING
            and admitted is not None
            and admitted.reason == REASON_REPLANNING
        )

    async def run(self) -> None:
        started = time.perf_counter()
        if not self._primed:
            await self.relist()
        book = await self.kube.read_ledger(self.ledger_namespace)
        entries = dict(book.entries)
        stale = [k for k, e in entries.items() if await self._stale(k, e)]
        # Read once: nothing below awaits before the decision, so the store holds still.
        live = self.live()
        queued = [job for job in live if job.status.state in WAITING]
        # Released by the reconciler (its plan could not bind): decided afresh.
        stale += [
            job.key
            for job in queued
            if job.key in entries
            and entries[job.key].uid == job.metadata.get("uid")
            and (c := job.status.condition(CONDITION_ADMITTED)) is not None
            and c.reason == REASON_REPLANNING
        ]
        for key in dict.fromkeys(stale):
            del entries[key]
        self.reservations = entries
        # Admitted in the ledger but not (yet) in status: a crash, or another
        # operator, between the two writes. The status follows the ledger.
        follow = [
            job
            for job in queued
            if job.key in entries and entries[job.key].uid == job.metadata.get("uid")
        ]
        waiting = [job for job in queued if job.key not in entries]
        self.metrics.queue_length.set(len(waiting))
        decisions: dict[str, Admission] = {}
        if waiting:
            decisions = await self._decide(waiting, live)
        uids = {job.key: str(job.metadata.get("uid", "")) for job in waiting}
        admitted = {
            k: Entry(uids[k], {p.pod: p for p in d.placements})
            for k, d in decisions.items()
            if d.admitted
        }
        if stale or admitted:
            entries.update(admitted)
            if not await self.kube.write_ledger(
                self.ledger_namespace, entries, book.resource_version
            ):
                # Another admitter wrote first: decide again from what it wrote.
                log.info("admission ledger changed under this pass; deciding again")
                self.store.queue_changed = True
                self.store.wakeup.set()
                return
            self.reservations = entries
        self.metrics.admitted_jobs.set(len(self.reservations))
        self.metrics.admission_seconds.observe(time.perf_counter() - started)
        by_key = {job.key: job for job in waiting}
        records = [self._record(by_key[k], d) for k, d in decisions.items()]
        for job in follow:
            placements = tuple(entries[job.key].placements.values())
            records.append(self._record(job, Admission(job.key, True, placements)))
        await asyncio.gather(*records)

    async def _decide(self, waiting: list[RLJob], live: list[RLJob]) -> dict[str, Admission]:
        snapshot = build_snapshot(self.store.nodes.values(), self.store.all_pods(), self._planned())
        capacity = Capacity.of(snapshot)
        decisions: dict[str, Admission] = {}
        candidates = []
        size = sizes(
            live,
            capacity.total_gpus if capacity else 0,
            self.clock(),
            (j.key for j in waiting),
            self.grace,
            # RLixAdmission's rules; a policy without any (a test's table) has no partners.
            rules=getattr(self.policy, "rules", None),
            gpu_mib=capacity.max_gpu_memory_mib if capacity else 0,
        )
        for job in waiting:
            if capacity is None:
                decisions[job.key] = Admission.waiting(
                    job.key, WaitReason.NO_GPU_NODE, "no schedulable GPU node"
                )
                continue
            never = capacity_errors(job.spec, capacity) + pod_slot_errors(
                len(planned_workloads(job)), self.store.nodes.values()
            )
            if never:
                text = "; ".join(str(e) for e in never)
                decisions[job.key] = Admission.waiting(
                    job.key, WaitReason.NEVER_FITS, f"can never fit: {text}"
                )
            else:
                candidates.append(gang_request(job, size.get(job.key)))
        ordered = queue_order(candidates)
        considered, behind = ordered[: self.window], ordered[self.window :]
        for position, request in enumerate(behind, start=self.window + 1):
            decisions[request.job] = Admission.waiting(
                request.job,
                WaitReason.QUEUED,
                f"position {position} in the queue; the first {self.window} are "
                "considered in each admission pass",
            )
        # The policy is CPU-bound pure code: run it off the event loop so watch
        # events, status writes and the webhook keep being served meanwhile.
        for decision in await asyncio.to_thread(self.policy, snapshot, considered):
            decisions[decision.job] = decision
        for key, decision in decisions.items():
            place = size.get(key)
            if (
                decision.reason not in (WaitReason.WAITING_FOR_GPUS, WaitReason.QUEUED)
                or place is None
            ):
                continue
            why = []
            if place.grace_until is not None:
                why.append(
                    f"in its grace until {rfc3339(place.grace_until)}: it queues among "
                    f"priority {place.waiting_as}, least work first, and nothing is parked "
                    "for it before then"
                )
            if place.aged_at is not None:
                why.append(
                    f"aged at {rfc3339(place.aged_at)} (it has waited {self.grace.aging:g} "
                    "times its expected length): it goes first in its class, and once "
                    "running its class does not park it"
                )
            if why:
                decisions[key] = replace(decision, message="; ".join([decision.message, *why]))
        return decisions

    async def _record(self, job: RLJob, decision: Admission) -> None:
        now = self.clock()
        generation = job.metadata.get("generation")
        if decision.admitted:
            new = job.status.model_copy(
                update={
                    "state": JobState.ADMITTED,
                    "admitted_at": rfc3339(now),
                    "gpus": job.spec.gpus,
                }
            )
            nodes = sorted({p.node for p in decision.placements})
            message = f"all {len(decision.placements)} pods fit (on {', '.join(nodes)})"
            if decision.message:  # the GPUs it shares, and with whom
                message = f"{message}; {decision.message}"
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
                created = parse_time(job.metadata.get("creationTimestamp"))
                if created is not None:
                    self.metrics.queue_wait.observe(max(0.0, (now - created).total_seconds()))
                await self.recorder.event(job.key, "Normal", "Admitted", message)
            return
        reason = str(decision.reason or WaitReason.WAITING_FOR_GPUS)
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
            decision.message,
            now=now,
            generation=generation,
        )
        if await self.recorder.status(job.key, job.status, new):
            self._last_write[job.key] = time.monotonic()
            if old is None or old.reason != reason:
                kind = "Warning" if decision.reason is WaitReason.NEVER_FITS else "Normal"
                await self.recorder.event(job.key, kind, reason, decision.message)
