"""The conductor: decides suspensions and resumes, and says what came of them.

It runs inside the operator (one more step of the operator's loop, over the
same watch-fed store), because it needs what the operator already holds: the
queue of waiting RLJobs, every RLIX pod, the nodes. It never calls a node
agent: it writes ``rlix.io/desired-suspension`` on a pod and reads the agent's
``rlix.io/observed-suspension`` back (docs/conductor.md). Each pass is a
function of the objects, so a restarted operator picks up where the last one
stopped: a pending generation is not asked again, a done one not redone.

Each pass:

1. accounts for what the agents reported since the last pass (events, metrics);
2. carries out people's requests (``rlix suspend|resume rljob``, an annotation
   on the RLJob), or refuses them with an event and condition saying why;
3. runs the core's decision (:func:`rlix.core.policy.conduct.decide`) and writes
   its suspensions and resumes;
4. writes each concerned job's ``Suspended`` condition: who, why, for whom,
   since when, how many bytes parked;
5. writes, on every pod of a job with an elastic rollout role, which of its
   replicas run (``rlix.io/active-replicas``): the node agent hands it to the
   pod's processes, so the trainer routes work only to active replicas.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlix.core import names
from rlix.core.agent_protocol import SELF, Location
from rlix.core.policy.conduct import Action, ConductConfig, Kind
from rlix.core.policy.ordering import DEFAULT_GRACE
from rlix.core.policy.port import PlacementPolicy
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.core.rljob import ConditionStatus
from rlix.core.suspension import (
    ANNOTATION_ACTIVE_REPLICAS,
    ANNOTATION_DESIRED,
    CONDITION_SUSPENDED,
    DesiredSuspension,
    Outcome,
    PodSuspension,
    Reason,
    Refusal,
    State,
    SuspensionRequest,
)
from rlix.core.validation import Capacity
from rlix.operator.admitting import FINISHED, WAITING, Admitter
from rlix.operator.kube import Kube
from rlix.operator.metrics import Metrics
from rlix.operator.queueing import gang_request, sizes
from rlix.operator.recording import Recorder
from rlix.operator.snapshots import build_snapshot
from rlix.operator.statuses import parse_time, rfc3339, with_condition
from rlix.operator.store import Store
from rlix.operator.suspensions import (
    active_replicas,
    agent_alive,
    annotations_of,
    decide_on_cluster,
    elastic_rollout,
    request_of,
    suspension_of,
)

log = logging.getLogger("rlix.operator.conductor")
Body = dict[str, Any]

# A suspend the agent refused or rolled back is not asked again by the policy
# for this long (a person's new request is asked at once).
RETRY_REFUSED_S = 30.0
MANUAL_WHY = "a person asked (rlix suspend / rlix resume, rlix.io/suspension-request)"


@dataclass
class Conductor:
    store: Store
    kube: Kube
    recorder: Recorder
    metrics: Metrics
    clock: Callable[[], datetime]
    policy: PlacementPolicy = field(default_factory=RLixPolicy)
    config: ConductConfig = field(default_factory=ConductConfig)
    target: Location = SELF  # where parked memory goes (docs/conductor.md, "Targets")
    # Where admission put each pod (its GPUs), for pods that do not say it.
    admitter: Admitter | None = None
    _accounted: dict[str, int] = field(default_factory=dict)  # pod uid -> generation
    _primed: bool = False
    _refusals: dict[str, tuple[str, str]] = field(default_factory=dict)  # job -> why
    _said: dict[tuple[str, str], str] = field(default_factory=dict)  # (job, reason) -> msg

    async def run(self) -> None:
        now = self.clock()
        await self._account()
        self._refusals = {}
        await self._requests(now)
        await self._decide(now)
        await self._conditions(now)
        await self._rosters()

    # -- 1. what the agents reported ----------------------------------------------
    async def _account(self) -> None:
        parked = 0
        for key, pods in list(self.store.pods.items()):
            for body in list(pods.values()):
                state = suspension_of(body)
                observed, desired = state.observed, state.desired
                if observed is None or desired is None:
                    continue
                if observed.state is State.SUSPENDED:
                    parked += observed.parked_bytes
                uid = str(body["metadata"].get("uid", ""))
                if self._accounted.get(uid) == observed.generation:
                    continue
                self._accounted[uid] = observed.generation
                if self._primed and observed.generation == desired.generation:
                    await self._report(key, body, desired, state)
        self._primed = True  # reports a restart found were told by the last operator
        self.metrics.parked_bytes.set(parked)

    async def _report(
        self, key: str, body: Body, desired: DesiredSuspension, state: PodSuspension
    ) -> None:
        observed = state.observed
        assert observed is not None
        pod = body["metadata"]["name"]
        counter = (
            self.metrics.suspensions if desired.state is State.SUSPENDED else self.metrics.resumes
        )
        counter.labels(reason=desired.reason, outcome=observed.outcome.value).inc()
        asked, done = parse_time(desired.since), parse_time(observed.at)
        if asked is not None and done is not None:
            action = "suspend" if desired.state is State.SUSPENDED else "resume"
            self.metrics.suspension_seconds.labels(action=action).observe(
                max((done - asked).total_seconds(), 0.0)
            )
        for_whom = f" for {desired.requester}" if desired.requester else ""
        if observed.outcome is Outcome.SUSPENDED:
            message = (
                f"pod {pod} suspended in place ({desired.reason}{for_whom}): "
                f"{observed.parked_bytes} bytes parked to {desired.target}"
            )
            await self.recorder.event(key, "Normal", "Suspended", message)
        elif observed.outcome is Outcome.RESUMED:
            message = (
                f"pod {pod} resumed ({desired.reason}, asked at {desired.since})"
                f"{observed.resumed_note()}"
            )
            await self.recorder.event(key, "Normal", "Resumed", message)
        else:
            reason = {
                Outcome.ROLLED_BACK: "SuspendRolledBack",
                Outcome.REFUSED: "SuspendRefused",
                Outcome.FAILED: "ResumeFailed",
            }[observed.outcome]
            self.metrics.refusals.labels(reason=reason).inc()
            await self.recorder.event(key, "Warning", reason, f"pod {pod}: {observed.error}")

    # -- 2. people's requests -----------------------------------------------------
    async def _requests(self, now: datetime) -> None:
        for key, body in list(self.store.jobs.items()):
            request = request_of(body)
            if request is None:
                continue
            pods = list(self.store.pods_of(key).values())
            if request.state is State.SUSPENDED:
                await self._suspend_request(key, request, pods, now)
            else:
                for pod in pods:
                    desired = suspension_of(pod).desired
                    manual = desired is not None and desired.reason == Reason.MANUAL
                    if manual and desired is not None and desired.state is State.SUSPENDED:
                        await self._ask(pod, State.RUNNING, Reason.MANUAL, "user", now, request)

    async def _suspend_request(
        self, key: str, request: SuspensionRequest, pods: list[Body], now: datetime
    ) -> None:
        targets = [p for p in pods if _preemptible(p)]
        if not targets:
            await self._refuse(
                key,
                Refusal.NOT_PREEMPTIBLE,
                "no pod of this job may be suspended: only rollout pods of a job with "
                "spec.preemptibleRollout true are (rlix.io/preemptible)",
            )
            return
        for pod in targets:
            desired = suspension_of(pod).desired
            if desired is not None and desired.nonce == request.nonce:
                continue  # asked already: never twice
            if await self._reachable(key, pod, now):
                await self._ask(pod, State.SUSPENDED, Reason.MANUAL, "user", now, request)

    # -- 3. the policy's decisions ------------------------------------------------
    async def _decide(self, now: datetime) -> None:
        waiting, held, elastic, live = [], set(), {}, []
        for key, body in list(self.store.jobs.items()):
            request = request_of(body)
            if request is not None and request.state is State.SUSPENDED:
                held.add(key)
            job, errors = self.store.job(key)
            if job is None or errors:
                continue
            if job.status.state not in FINISHED:
                live.append(job)
            if job.status.state not in WAITING and (rollout := elastic_rollout(job)) is not None:
                elastic[key] = rollout
        # Sizes (spec.iterations) order a class and let a far smaller job park
        # a larger one of it; the backlog is every live job's.
        capacity = Capacity.of(build_snapshot(self.store.nodes.values(), []))
        queued = [job.key for job in live if job.status.state in WAITING]
        # The admitter's grace, so that both see the same jobs in their grace.
        grace = self.admitter.grace if self.admitter is not None else DEFAULT_GRACE
        size = sizes(
            live,
            capacity.total_gpus if capacity else 0,
            now,
            queued,
            grace,
            rules=self.policy.sharing_rules,
            gpu_mib=capacity.max_gpu_memory_mib if capacity else 0,
        )
        for job in live:
            # A job in its grace (``ordering.precedence``) waits for free room:
            # nothing is parked or lent for it until the grace ends.
            if job.status.state in WAITING and size[job.key].waiting_as is None:
                waiting.append(gang_request(job, size[job.key]))
        pods = list(self.store.all_pods())
        actions = await asyncio.to_thread(
            decide_on_cluster,
            list(self.store.nodes.values()),
            pods,
            waiting,
            self.policy,
            now=now,
            held=frozenset(held),
            config=self.config,
            gpu_indices=self._planned_gpus(),
            elastic=elastic,
            work_left={key: s.reported for key, s in size.items() if s.reported},
        )
        by_name = {f"{p['metadata'].get('namespace')}/{p['metadata']['name']}": p for p in pods}
        for action in actions:
            await self._apply(action, by_name, now)

    def _planned_gpus(self) -> dict[str, tuple[int, ...]]:
        if self.admitter is None:
            return {}
        return {
            pod: placement.gpus
            for entry in self.admitter.reservations.values()
            for pod, placement in entry.placements.items()
        }

    async def _apply(self, action: Action, pods: Mapping[str, Body], now: datetime) -> None:
        if action.kind in (Kind.EVICT, Kind.UNRESOLVED):
            if action.kind is Kind.EVICT:
                self.metrics.evictions.inc()
            # RLix deletes no pod it does not own: kube-scheduler's own
            # preemption evicts it, and the waiting job is told why.
            await self._say(action.requester, "Warning", str(action.reason), action.message)
            return
        want = State.SUSPENDED if action.kind is Kind.SUSPEND else State.RUNNING
        asked = False
        for name in action.pods:
            pod = pods.get(name)
            if pod is None:
                continue
            if _already(suspension_of(pod), want, now):
                continue
            if want is State.SUSPENDED and not await self._reachable(action.job, pod, now):
                continue
            await self._ask(pod, want, action.reason, action.requester, now, None, action.message)
            asked = True
        if asked and want is State.SUSPENDED:
            # The parked job's `kubectl describe` says why, sizes included.
            await self._say(action.job, "Normal", str(action.reason), action.message)

    # -- writing and saying -------------------------------------------------------
    async def _ask(  # noqa: PLR0917 (one call per desired state: the fields it carries)
        self,
        pod: Body,
        want: State,
        reason: str,
        requester: str,
        now: datetime,
        request: SuspensionRequest | None,
        why: str = "",
    ) -> None:
        """``why``: the policy's words for its decision; a person's request
        (``request``) says so itself."""
        state = suspension_of(pod)
        desired = DesiredSuspension(
            generation=state.next_generation,
            state=want,
            reason=str(reason),
            requester=requester,
            target=self.target,
            since=rfc3339(now),
            nonce=request.nonce if request is not None else "",
        )
        meta = pod["metadata"]
        result = await self.kube.patch_pod_annotations(
            meta["namespace"], meta["name"], {ANNOTATION_DESIRED: desired.to_json()}
        )
        # The decision's own words: a log alone then tells why a pod was
        # parked or brought back, for whom, and (inside a class) both sizes.
        log.info(
            "%s/%s: asked %s (%s): %s",
            meta["namespace"],
            meta["name"],
            want.value,
            reason,
            MANUAL_WHY if request is not None else why,
        )
        if result is not None:
            self.store.put_pod(result)  # the next pass sees this generation, not the old one

    async def _reachable(self, key: str, pod: Body, now: datetime) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        name = pod["metadata"]["name"]
        if not node:
            await self._refuse(key, Refusal.NOT_PLACED, f"pod {name} is not bound to a node yet")
            return False
        if not agent_alive(self.store.nodes.get(node), now):
            await self._refuse(
                key,
                Refusal.AGENT_DOWN,
                f"pod {name}: the node agent on {node} has not reported within the last "
                "minute (rlix.io/agent-heartbeat), so nobody would carry a suspension out",
            )
            return False
        return True

    async def _refuse(self, key: str, why: Refusal, message: str) -> None:
        self._refusals[key] = (why.value, message)
        if await self._say(key, "Warning", why.value, message):
            self.metrics.refusals.labels(reason=why.value).inc()

    async def _say(self, key: str, kind: str, reason: str, message: str) -> bool:
        """One event per distinct message (a pass a second must not flood); True if said."""
        if self._said.get((key, reason)) == message:
            return False
        self._said[(key, reason)] = message
        await self.recorder.event(key, kind, reason, message)
        return True

    # -- 4. conditions ------------------------------------------------------------
    async def _conditions(self, now: datetime) -> None:
        for key in list(self.store.jobs):
            pods = list(self.store.pods_of(key).values())
            states = [(p, suspension_of(p)) for p in pods]
            if not any(s.desired is not None for _, s in states) and key not in self._refusals:
                continue
            job, errors = self.store.job(key)
            if job is None or errors:
                continue
            value, reason, message = _condition(states, self._refusals.get(key))
            new = with_condition(
                job.status,
                CONDITION_SUSPENDED,
                value,
                reason,
                message,
                now=now,
                generation=job.metadata.get("generation"),
            )
            await self.recorder.status(key, job.status, new)

    # -- 5. the active replicas of elastic jobs ------------------------------------
    async def _rosters(self) -> None:
        for key in list(self.store.jobs):
            job, errors = self.store.job(key)
            if job is None or errors:
                continue
            pods = list(self.store.pods_of(key).values())
            roster = active_replicas(job, pods)
            if roster is None:
                continue
            doc = roster.to_json()
            for pod in pods:
                if annotations_of(pod).get(ANNOTATION_ACTIVE_REPLICAS) == doc:
                    continue
                meta = pod["metadata"]
                result = await self.kube.patch_pod_annotations(
                    meta["namespace"], meta["name"], {ANNOTATION_ACTIVE_REPLICAS: doc}
                )
                if result is not None:
                    self.store.put_pod(result)


def _condition(
    states: list[tuple[Body, PodSuspension]], refusal: tuple[str, str] | None
) -> tuple[ConditionStatus, str, str]:
    # Parked now: asked away, or reported parked and not yet reported back (a
    # pending resume still holds its memory off the GPU).
    parked = [
        (p, s)
        for p, s in states
        if s.desired is not None
        and (s.suspended or (s.observed is not None and s.observed.state is State.SUSPENDED))
    ]
    if parked:
        first = next(
            (s.desired for _, s in parked if s.desired and s.desired.state is State.SUSPENDED),
            parked[0][1].desired,
        )
        assert first is not None
        pods = ", ".join(sorted(p["metadata"]["name"] for p, _ in parked))
        nbytes = sum(s.observed.parked_bytes for _, s in parked if s.observed is not None)
        waiting = [p["metadata"]["name"] for p, s in parked if s.pending]
        so_far = f"; waiting for the agent: {', '.join(sorted(waiting))}" if waiting else ""
        for_whom = f" for {first.requester}" if first.requester else ""
        return (
            ConditionStatus.TRUE,
            first.reason,
            f"suspended in place{for_whom} since {first.since}: {pods}; "
            f"{nbytes} bytes parked{so_far}",
        )
    if refusal is not None:
        return ConditionStatus.FALSE, refusal[0], refusal[1]
    for _, s in states:
        o = s.observed
        if o is not None and o.outcome in (Outcome.REFUSED, Outcome.ROLLED_BACK):
            reason = "SuspendRolledBack" if o.outcome is Outcome.ROLLED_BACK else "SuspendRefused"
            return ConditionStatus.FALSE, reason, o.error or o.outcome.value
    asked = [s.desired for _, s in states if s.desired is not None]
    done = [s.observed.at for _, s in states if s.observed is not None and s.observed.at]
    since = max((d.since for d in asked), default="")
    last = max(done, default=since)
    return ConditionStatus.FALSE, "Running", f"not suspended; last change at {last}"


def _preemptible(pod: Body) -> bool:
    meta = pod.get("metadata") or {}
    flag = (meta.get("labels") or {}).get(names.LABEL_PREEMPTIBLE) or annotations_of(pod).get(
        names.LABEL_PREEMPTIBLE
    )
    return str(flag).lower() == "true"


def _already(state: PodSuspension, want: State, now: datetime) -> bool:
    """Whether asking ``want`` of this pod now would ask twice (or too soon again)."""
    desired, observed = state.desired, state.observed
    if desired is None:
        return want is State.RUNNING  # never asked: it runs
    if state.pending:
        return desired.state is want
    assert observed is not None
    if observed.state is want:
        return True
    if want is State.SUSPENDED and observed.outcome in (Outcome.REFUSED, Outcome.ROLLED_BACK):
        at = parse_time(observed.at)
        return at is not None and (now - at).total_seconds() < RETRY_REFUSED_S
    return False
