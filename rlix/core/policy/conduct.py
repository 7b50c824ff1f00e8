"""The conductor's decisions: which pods to park in place, which to bring back.

Pure: a snapshot, the waiting gangs and each job's suspension clock in, a list
of actions out. The operator's conductor runs it on the cluster it watches; the
simulator runs :func:`plan_preemption` where it preempts, so a benchmark
measures the code that decides on a cluster.

The rules, in the order they are applied:

1. **Bounded suspension.** A job parked longer than ``max_suspended_s`` is
   *aged*: its priority counts ``aging_boost`` higher per bound elapsed, it is
   considered before anything else, and it may park lower (effective) priority
   preemptible residents of its GPUs to come back. No job starves behind a
   stream of higher-priority arrivals.
2. **Priority.** A waiting gang that does not fit asks :func:`plan_preemption`:
   the least-harm set of lower-priority victims (the placement policy's
   ``victims``, the same rules the extender's preempt verb applies), whole jobs
   only, never a non-preemptible pod, never a job resumed less than
   ``min_run_s`` ago (no ping-pong). RLix-managed victims are parked in place;
   a victim RLix cannot park (no ``rlix.io/job``) is evicted, and the action
   says so: eviction is the fallback, never the first choice. Only where
   that lets the gang in: where parked memory stays counted (below), nobody
   is parked and the waiting job is told why (``Refusal.FREES_NOTHING``).
   Before any whole job is parked, an *elastic* rollout lends: the replicas
   above its ``minReplicas`` (highest replica index first, lowest priority
   job first) are parked alone, never below the minimum, when that is enough
   for the waiting gang (reason ``Lend``); the lender's trainer and its other
   replicas run on.
3. **Physical HBM.** On every GPU the memory its running (not parked) pods
   need in their current phases stays within the GPU's physical memory: when a
   phase change would overflow it, the lower-priority preemptible co-residents
   are parked (least harm first) and the starting job waits at its safe point
   until they are. When nothing can be parked, the action list says so.
   Where the nodes park at the gate (``SharingRules.parks_at_gate``), pods
   that take turns count as the larger of them and a context: the gate parks
   the one that does not work, so a pair placed by turns is no overflow.
4. **Resume as soon as memory allows.** A parked job whose memory fits on its
   own GPUs again (host memory is node-local, so it returns where it left) is
   resumed, aged jobs and higher priority first, then the longest parked;
   only where the policy's sharing rules let its pods join the jobs running
   there (``PlacementPolicy.sharing_rules``: not under a job of another
   class, not as a third job on a GPU).

Parking frees schedulable room only where RLix publishes GPU memory above
physical (``Node.memory_overcommit`` > 1 on a gpu-claims node): the placement
policy then lets parked memory take that headroom, so the waiting job is
admitted beside it. Elsewhere a pod's ``nvidia.com/gpu`` (or its claim at 1x)
stays counted while the pod exists, so parking for a waiting job there would
cost the victims their progress and let nobody in: rule 2 parks nobody there
(parking for phase overflow, rule 3, and a person's request still do). See
docs/conductor.md, "What parking frees".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from rlix.core.policy.admission import (
    Admission,
    GangRequest,
    PodPlacement,
    bind,
    place_gang,
    place_pod,
    queue_order,
)
from rlix.core.policy.placement.preemption import harm
from rlix.core.policy.placement.sharing import (
    DEFAULT_RULES,
    SharingRules,
    joinable,
    resident_mib,
)
from rlix.core.policy.port import PlacementPolicy
from rlix.core.snapshot import ClusterSnapshot, Workload
from rlix.core.suspension import Reason, Refusal


class Kind(enum.StrEnum):
    SUSPEND = "suspend"  # park in place
    RESUME = "resume"
    EVICT = "evict"  # the fallback: what cannot be parked is deleted
    UNRESOLVED = "unresolved"  # nothing can be done; said, not hidden


@dataclass(frozen=True, slots=True)
class Action:
    kind: Kind
    job: str  # the job acted on ("" for UNRESOLVED about a GPU)
    pods: tuple[str, ...]
    reason: Reason | Refusal
    requester: str  # the job it is done for
    message: str


@dataclass(frozen=True, slots=True)
class JobClock:
    """When a job was last parked and last resumed (seconds, the caller's clock)."""

    suspended_at: float | None = None
    resumed_at: float | None = None


@dataclass(frozen=True, slots=True)
class ElasticRollout:
    """A job's elastic rollout role: replicas above ``min_replicas`` may be lent."""

    role: str
    min_replicas: int


@dataclass(frozen=True, slots=True)
class ConductConfig:
    max_suspended_s: float = 600.0
    aging_boost: int = 1000
    min_run_s: float = 60.0


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """Where a gang goes once ``victims`` (whole jobs) are off their GPUs."""

    admission: Admission
    victims: tuple[str, ...]
    snapshot: ClusterSnapshot  # the trial, with the gang bound and the victims gone


def plan_preemption(
    snapshot: ClusterSnapshot, request: GangRequest, policy: PlacementPolicy
) -> PreemptionPlan | None:
    """Place the gang, taking lower-priority jobs off a node where a pod fits nowhere.

    Per pod: where it fits, it goes; else on every node the policy names its
    victims and the node whose victims harm least (highest victim priority, then
    GPUs taken) is chosen; their whole jobs leave the trial. None when some pod
    fits nowhere even then.
    """
    trial, victims, placed = snapshot, set[str](), list[PodPlacement]()
    for pod in request.pods:
        placement, _ = place_pod(trial, pod, policy)
        if placement is None:
            best: tuple[tuple[int, int], str, tuple[Workload, ...]] | None = None
            for node in trial.nodes:
                chosen = policy.victims(trial, pod, node)
                if chosen:
                    cost = (max(w.priority for w in chosen), sum(w.gpus for w in chosen))
                    if best is None or cost < best[0]:
                        best = (cost, node, chosen)
            if best is None:
                return None
            jobs = {w.job or w.name for w in best[2]}
            trial = trial.without(w.name for w in trial.workloads if _parkable(w, jobs))
            only = ClusterSnapshot({best[1]: trial.nodes[best[1]]}, trial.workloads)
            placement, _ = place_pod(only, pod, policy)
            if placement is None:
                return None
            victims |= jobs
        placed.append(placement)
        trial = trial.with_workload(bind(pod, placement))
    admission = Admission(request.job, True, tuple(placed))
    return PreemptionPlan(admission, tuple(sorted(victims)), trial)


def decide(
    snapshot: ClusterSnapshot,
    waiting: Sequence[GangRequest],
    policy: PlacementPolicy,
    *,
    clocks: Mapping[str, JobClock],
    now: float,
    config: ConductConfig = ConductConfig(),
    held: frozenset[str] = frozenset(),
    elastic: Mapping[str, ElasticRollout] | None = None,
) -> tuple[Action, ...]:
    """Everything the conductor should do now, in the order it should be done.

    ``held`` names jobs a person parked (``rlix suspend rljob``): they come
    back only when a person says so, never by this policy. ``elastic`` names
    the jobs whose rollout role may lend replicas above its minimum.
    """
    actions: list[Action] = []
    trial = _protect(snapshot, clocks, now, config)
    rules = policy.sharing_rules
    trial = _resume_aged(
        trial, clocks=clocks, now=now, config=config, actions=actions, held=held, rules=rules
    )
    trial = _admit_by_priority(trial, waiting, policy, actions, elastic or {})
    trial = _keep_within_hbm(trial, actions, rules or DEFAULT_RULES)
    _resume_when_free(
        trial, clocks=clocks, now=now, config=config, actions=actions, held=held, rules=rules
    )
    return tuple(actions)


def _parkable(w: Workload, jobs: Iterable[str]) -> bool:
    """Whether ``w`` goes when its job is parked: its preemptible pods, never the others.

    A job's parking unit is all of its preemptible pods together (never half of
    its rollout replicas); its non-preemptible pods (a trainer) stay, waiting at
    their next safe point for the rollout to come back. In the simulator every
    pod of a job shares the job's flag, so this is the whole job there.
    """
    return (w.job or w.name) in set(jobs) and w.preemptible


def _unit(trial: ClusterSnapshot, job: str) -> list[Workload]:
    """The running pods parking ``job`` would take: all its preemptible ones, together."""
    return [w for w in trial.workloads if not w.suspended and _parkable(w, (job,))]


def _managed(unit: Iterable[Workload]) -> bool:
    """Whether RLix can park ``unit`` in place (every pod carries ``rlix.io/job``);
    a victim it cannot park is evicted instead."""
    return all(w.job for w in unit)


def _parked_jobs(trial: ClusterSnapshot, held: frozenset[str]) -> dict[str, list[Workload]]:
    """Each parked job's parked pods (a person's holds left out)."""
    out: dict[str, list[Workload]] = {}
    for w in trial.workloads:
        if w.suspended and (w.job or w.name) not in held:
            out.setdefault(w.job or w.name, []).append(w)
    return out


def _jobs(workloads: Iterable[Workload]) -> dict[str, list[Workload]]:
    out: dict[str, list[Workload]] = {}
    for w in workloads:
        out.setdefault(w.job or w.name, []).append(w)
    return out


def _aged_priority(
    job: str, priority: int, clocks: Mapping[str, JobClock], now: float, config: ConductConfig
) -> int:
    clock = clocks.get(job)
    if clock is None or clock.suspended_at is None or config.max_suspended_s <= 0:
        return priority
    periods = int((now - clock.suspended_at) // config.max_suspended_s)
    return priority + max(periods, 0) * config.aging_boost


def _protect(
    snapshot: ClusterSnapshot, clocks: Mapping[str, JobClock], now: float, config: ConductConfig
) -> ClusterSnapshot:
    """A job resumed less than ``min_run_s`` ago is no victim yet (no ping-pong)."""
    fresh = {
        job
        for job, c in clocks.items()
        if c.resumed_at is not None and now - c.resumed_at < config.min_run_s
    }
    if not fresh:
        return snapshot
    return replace(
        snapshot,
        workloads=tuple(
            replace(w, preemptible=False) if w.job in fresh and not w.suspended else w
            for w in snapshot.workloads
        ),
    )


def _park(trial: ClusterSnapshot, job: str) -> ClusterSnapshot:
    return trial.parking(w.name for w in trial.workloads if _parkable(w, (job,)))


def _gpu_memory(trial: ClusterSnapshot, node: str, index: int) -> int:
    n = trial.nodes[node]
    published = next((g.memory_mib for g in n.gpus if g.index == index), None)
    return published if published is not None else n.gpu_memory_mib


def _resident(trial: ClusterSnapshot, node: str, index: int) -> list[Workload]:
    return [
        w
        for w in trial.on_node(node)
        if not w.suspended and w.node is not None and index in w.gpu_indices
    ]


def _fits_back(
    trial: ClusterSnapshot, pods: Sequence[Workload], rules: SharingRules | None
) -> bool:
    """Whether parked pods fit on their own GPUs next to what runs there now,
    and (``rules``) whether those residents would let them in: a job admitted
    beside parked memory is not then slowed by the parked job coming back
    under it (rule 3: another priority class), and a GPU never ends up with
    more jobs running than the rules allow (rule 1)."""
    need: dict[tuple[str, int], int] = {}
    for w in pods:
        if w.node is None or w.node not in trial.nodes:
            return False
        for i in w.gpu_indices:
            need[(w.node, i)] = need.get((w.node, i), 0) + w.memory_in(w.phase)
            if rules is not None:
                others = [r for r in _resident(trial, w.node, i) if r.job != w.job]
                if others and not joinable(rules, w, others, _gpu_memory(trial, w.node, i)):
                    return False
    for (node, i), mib in need.items():
        used = sum(r.memory_in(r.phase) for r in _resident(trial, node, i))
        # What the node's agent measures in use is a floor, as placement counts
        # it: memory nobody known explains stays taken. It also holds a pod
        # back in the moment it reads as parked while its GPU still reads as
        # holding it (the pod and the node come through different watches):
        # resumed then, it would take back the room it was parked to make, and
        # the job it was parked for would wait out the no-ping-pong guard.
        used = max(used, _measured(trial, node, i))
        if used + mib > _gpu_memory(trial, node, i):
            return False
    return True


def _measured(trial: ClusterSnapshot, node: str, index: int) -> int:
    return next((g.used_mib for g in trial.nodes[node].gpus if g.index == index), 0)


def _unpark(trial: ClusterSnapshot, job: str) -> ClusterSnapshot:
    return replace(
        trial,
        workloads=tuple(
            replace(w, suspended=False) if (w.job or w.name) == job else w for w in trial.workloads
        ),
    )


def _resume_aged(
    trial: ClusterSnapshot,
    *,
    clocks: Mapping[str, JobClock],
    now: float,
    config: ConductConfig,
    actions: list[Action],
    held: frozenset[str],
    rules: SharingRules | None,
) -> ClusterSnapshot:
    """Bring back jobs parked past the bound, parking lower-priority residents for them."""
    parked = _parked_jobs(trial, held)
    aged = [
        (j, ws)
        for j, ws in parked.items()
        if _aged_priority(j, ws[0].priority, clocks, now, config) > ws[0].priority
    ]
    aged.sort(
        key=lambda item: (
            -_aged_priority(item[0], item[1][0].priority, clocks, now, config),
            item[0],
        )
    )
    for job, pods in aged:
        effective = _aged_priority(job, pods[0].priority, clocks, now, config)
        places = {(w.node, i) for w in pods for i in w.gpu_indices}
        candidates = _jobs(
            r
            for node, i in places
            if node is not None
            for r in _resident(trial, node, i)
            if r.job != job
        )
        attempt = trial
        taken: list[tuple[str, list[Workload]]] = []
        units = sorted(candidates.items(), key=lambda item: harm(item[1]))
        for other, _ in units:
            if _fits_back(attempt, pods, rules):
                break
            unit = _unit(attempt, other)
            if any(w.gpu_indices for w in unit) and max(w.priority for w in unit) < effective:
                attempt = _park(attempt, other)
                taken.append((other, unit))
        if not _fits_back(attempt, pods, rules):
            continue
        for other, ws in taken:
            actions.append(
                Action(
                    Kind.SUSPEND,
                    other,
                    tuple(sorted(w.name for w in ws)),
                    Reason.AGED,
                    job,
                    f"{job} was parked longer than {config.max_suspended_s:.0f}s and needs "
                    "its GPUs back",
                )
            )
        trial = _unpark(attempt, job)
        actions.append(
            Action(
                Kind.RESUME,
                job,
                tuple(sorted(w.name for w in pods)),
                Reason.AGED,
                job,
                f"parked longer than {config.max_suspended_s:.0f}s: it goes first",
            )
        )
    return trial


def _admit_by_priority(
    trial: ClusterSnapshot,
    waiting: Sequence[GangRequest],
    policy: PlacementPolicy,
    actions: list[Action],
    elastic: Mapping[str, ElasticRollout],
) -> ClusterSnapshot:
    for request in queue_order(waiting):
        admission, after = place_gang(trial, request, policy)
        if admission.admitted:
            trial = after  # fits as it is: admission places it, nothing to park
            continue
        # Memory parked for it by an earlier pass needs no reserving: where
        # parking lets a job in (``_once_parked``), the policy counts parked
        # memory apart, so the job fits as it is above, and its binding in the
        # trial keeps the parked memory from coming back under it. Taking
        # parked memory off the trial here (as until 2026-12-06) admitted it
        # where the scheduler still counts that memory, and kept the parked
        # job parked for it.
        lent = _lend(trial, request, policy, elastic)
        if lent is not None:
            admission, loans = lent
            for job, pods in loans.items():
                actions.append(
                    Action(
                        Kind.SUSPEND,
                        job,
                        pods,
                        Reason.LEND,
                        request.job,
                        f"elastic rollout replicas above its minimum lent so that {request.job} "
                        f"(priority {request.priority}) fits",
                    )
                )
            lent_pods = {p for pods in loans.values() for p in pods}
            trial = trial.parking(lent_pods)
            for placement in admission.placements:
                pod = next(p for p in request.pods if p.name == placement.pod)
                trial = trial.with_workload(bind(pod, placement))
            continue
        plan = plan_preemption(trial, request, policy)
        if plan is None:
            continue  # waits; the admission condition says why
        admission = _once_parked(trial, plan.victims, request, policy)
        if not admission.admitted:
            actions.append(_frees_nothing(trial, plan, request))
            continue
        for victim in plan.victims:
            ws = _unit(trial, victim)
            running = tuple(sorted(w.name for w in ws))
            if not running:
                continue
            managed = _managed(ws)
            kind = Kind.SUSPEND if managed else Kind.EVICT
            message = (
                f"parked in place so that {request.job} (priority {request.priority}"
                f"{_smaller(request, ws)}) fits"
                if managed
                else f"not an RLix pod, so it cannot be parked: evicted for {request.job}"
            )
            reason = Reason.PRIORITY if managed else Refusal.NOTHING_ELSE_WORKS
            actions.append(Action(kind, victim, running, reason, request.job, message))
            trial = _park(trial, victim)
        for placement in admission.placements:
            pod = next(p for p in request.pods if p.name == placement.pod)
            trial = trial.with_workload(bind(pod, placement))
    return trial


def _once_parked(
    trial: ClusterSnapshot, victims: Iterable[str], request: GangRequest, policy: PlacementPolicy
) -> Admission:
    """The gang's admission once ``victims`` are gone the way they would go.

    ``plan_preemption`` weighs victims as if they left their GPUs; a parked
    pod does not leave: Kubernetes counts its GPU (its ``nvidia.com/gpu``, or
    its claim) for as long as it exists, and only published headroom
    (``Node.memory_overcommit`` > 1 on a gpu-claims node) takes parked memory.
    So parking, unlike evicting, lets the gang in only where the policy's
    own accounting of parked memory says so; elsewhere it would cost the
    victims their progress and admit nobody.
    """
    parked: list[str] = []
    evicted: list[str] = []
    for victim in victims:
        ws = _unit(trial, victim)
        (parked if _managed(ws) else evicted).extend(w.name for w in ws)
    admission, _ = place_gang(trial.without(evicted).parking(parked), request, policy)
    return admission


def _frees_nothing(trial: ClusterSnapshot, plan: PreemptionPlan, request: GangRequest) -> Action:
    """Said to the waiting job when parking its victims would not let it in."""
    nodes = [trial.nodes[n] for n in sorted({p.node for p in plan.admission.placements})]
    flat = [n.name for n in nodes if not (n.claims and n.memory_overcommit > 1)]
    if flat:
        why = (
            f"on {', '.join(flat)} a parked pod's GPU memory stays counted for as long as "
            "the pod exists (whole GPUs, or GPU memory published at 1x); publish headroom "
            "for parked memory with the node agent's --memory-overcommit (chart: "
            "nodeAgent.dra.memoryOvercommit)"
        )
    else:
        factors = ", ".join(f"{n.name} {n.memory_overcommit:g}x" for n in nodes)
        why = (
            f"the headroom published for parked memory ({factors}) would not hold what "
            f"would be parked beside {request.job}'s claims"
        )
    return Action(
        Kind.UNRESOLVED,
        "",
        (),
        Refusal.FREES_NOTHING,
        request.job,
        f"parking {', '.join(plan.victims)} would not let {request.job} in: {why}; nobody "
        f"is parked and {request.job} waits for room "
        '(docs/conductor.md, "What parking frees")',
    )


def _smaller(request: GangRequest, victim: Sequence[Workload]) -> str:
    """Why a job of the requester's own class goes: the sizes (``ordering.displaces``)."""
    same = [w for w in victim if w.priority == request.priority]
    if not same:
        return ""
    return (
        f", its class: {request.work_left / 3600:.1f} expected GPU-hours left against "
        f"this job's {same[0].work_left / 3600:.1f}"
    )


def _replica_index(w: Workload) -> int:
    """The replica index a pod's name ends in (``<job>-<role>-<index>``), or -1."""
    _, _, tail = w.name.rpartition("-")
    return int(tail) if tail.isdigit() else -1


def _spare(trial: ClusterSnapshot, job: str, rollout: ElasticRollout) -> list[Workload]:
    """The job's running elastic replicas above its minimum, the tail (highest index) first.

    The lowest-indexed ``min_replicas`` running replicas always stay. Empty when
    the job may not be parked now (a resume less than ``min_run_s`` ago, or not
    preemptible).
    """
    running = sorted(
        (
            w
            for w in trial.workloads
            if w.job == job and w.role == rollout.role and not w.suspended and w.node is not None
        ),
        key=_replica_index,
    )
    if not all(w.preemptible for w in running):
        return []
    return list(reversed(running[rollout.min_replicas :]))


def _lend(
    trial: ClusterSnapshot,
    request: GangRequest,
    policy: PlacementPolicy,
    elastic: Mapping[str, ElasticRollout],
) -> tuple[Admission, dict[str, tuple[str, ...]]] | None:
    """Park only elastic replicas above their minimum, if that is enough for ``request``.

    Lenders are lower-priority jobs, lowest priority first, each one's tail
    first; replicas are taken until the gang fits, then any taken replica the
    gang does not need is given back (so a tail on a node the gang does not
    use keeps running). None when all the spare replicas together are not enough.
    """
    lenders = [
        (w.priority, job, w)
        for job, rollout in elastic.items()
        for w in _spare(trial, job, rollout)
        if w.priority < request.priority
    ]
    lenders.sort(key=lambda item: (item[0], item[1]))  # stable: each tail stays in order
    taken: list[Workload] = []
    admission: Admission | None = None
    for _, _, w in lenders:
        taken.append(w)
        admission, _ = place_gang(trial.parking(t.name for t in taken), request, policy)
        if admission.admitted:
            break
    if admission is None or not admission.admitted:
        return None
    for w in list(reversed(taken)):
        fewer = [t for t in taken if t is not w]
        attempt, _ = place_gang(trial.parking(t.name for t in fewer), request, policy)
        if attempt.admitted:
            taken, admission = fewer, attempt
    loans: dict[str, list[str]] = {}
    for w in taken:
        loans.setdefault(w.job, []).append(w.name)
    return admission, {job: tuple(sorted(pods)) for job, pods in sorted(loans.items())}


def _keep_within_hbm(
    trial: ClusterSnapshot, actions: list[Action], rules: SharingRules
) -> ClusterSnapshot:
    for node in sorted(trial.nodes):
        indices = sorted({i for w in trial.on_node(node) for i in w.gpu_indices})
        for index in indices:
            trial = _relieve(trial, node, index, actions, rules)
    return trial


def _relieve(
    trial: ClusterSnapshot, node: str, index: int, actions: list[Action], rules: SharingRules
) -> ClusterSnapshot:
    capacity = _gpu_memory(trial, node, index)

    def over(t: ClusterSnapshot) -> int:
        # Pods that take turns where the nodes park at the gate hold the
        # larger of their phases' memory at a time (``sharing.resident_mib``):
        # the gate keeps them within the GPU, and parking one here would make
        # a turn a suspension.
        return resident_mib(rules, _resident(t, node, index)) - capacity

    if over(trial) <= 0:
        return trial
    residents = _resident(trial, node, index)
    # The one that keeps the GPU: highest priority, then the costlier phase
    # (the one entering training or scoring is the one that needs the memory).
    keeper = max(residents, key=lambda w: (w.priority, harm([w])[1], w.name))
    units = _jobs(w for w in residents if (w.job or w.name) != (keeper.job or keeper.name))
    for job, here in sorted(units.items(), key=lambda item: harm(item[1])):
        if over(trial) <= 0:
            break
        whole = _unit(trial, job)
        frees = any(w.name in {h.name for h in here} for w in whole)
        if not frees or not all(w.job and w.priority <= keeper.priority for w in whole):
            continue
        running = tuple(sorted(w.name for w in whole))
        actions.append(
            Action(
                Kind.SUSPEND,
                job,
                running,
                Reason.PHASE_OVERFLOW,
                keeper.job,
                f"GPU {index} of {node} would hold {over(trial) + capacity} MiB, over its "
                f"{capacity} MiB, when {keeper.job} enters {keeper.phase or 'its phase'}",
            )
        )
        trial = _park(trial, job)
    if over(trial) > 0:
        actions.append(
            Action(
                Kind.UNRESOLVED,
                "",
                (),
                Refusal.NOTHING_ELSE_WORKS,
                keeper.job,
                f"GPU {index} of {node} needs {over(trial)} MiB more than its {capacity} MiB "
                "and no lower-priority preemptible co-resident is left to park",
            )
        )
    return trial


def _resume_when_free(
    trial: ClusterSnapshot,
    *,
    clocks: Mapping[str, JobClock],
    now: float,
    config: ConductConfig,
    actions: list[Action],
    held: frozenset[str],
    rules: SharingRules | None,
) -> None:
    parked = list(_parked_jobs(trial, held).items())

    def order(item: tuple[str, list[Workload]]) -> tuple[int, float, str]:
        job, ws = item
        since = clocks.get(job, JobClock()).suspended_at
        return (-_aged_priority(job, ws[0].priority, clocks, now, config), since or 0.0, job)

    for job, pods in sorted(parked, key=order):
        if any(a.kind is Kind.SUSPEND and a.job == job for a in actions):
            continue  # parked by this very pass
        if not _fits_back(trial, pods, rules):
            continue
        trial = _unpark(trial, job)
        actions.append(
            Action(
                Kind.RESUME,
                job,
                tuple(sorted(w.name for w in pods)),
                Reason.MEMORY_FREE,
                job,
                "its memory fits on its GPUs again",
            )
        )
