"""Preempt: out of the victims kube-scheduler proposes, keep the set that harms least.

kube-scheduler proposes, per candidate node, the lowest-priority pods whose
removal lets the pod fit *by its own accounting* (CPU, memory, and the
``nvidia.com/gpu`` count). It knows nothing of phases, gangs or in-place
suspension, so RLix rewrites each node's list:

* **Never a protected pod.** A pod marked ``rlix.io/preemptible: "false"`` (or of
  higher priority than the preemptor) is never a victim. One of equal priority
  is one only in place, and only when ``ordering.displaces`` says its job has
  far more work left than the preemptor's (both sizes known).
* **Never an RLix pod for an RLix pod.** When kube-scheduler preempts for an
  RLix-managed pod (``rlix.io/job``), RLix-managed victims are left out: RLix
  makes room among its own jobs in place (the conductor parks them and they
  come back bit for bit), so deleting one would lose what parking keeps. Only
  pods RLix does not manage may then be evicted (the conductor's said
  ``EvictionFallback``). A preemptor RLix does not manage (a plain pod) is
  answered as before: RLix cannot make room for it by parking.
* **Never half a gang.** A pod of a gang (``gang_size > 1``) is taken only with
  every other member of its job, and only if they all sit on this node: victims
  of one node are all the scheduler will remove, so a gang spread over several
  nodes cannot be taken whole and is left alone. *In place* (the conductor and
  the simulator park rather than delete), the unit is every preemptible member
  of the job: its rollout replicas go together, while its non-preemptible
  members (the trainer) stay and wait at their next safe point, so a job whose
  trainer is protected still has a rollout that can be parked.
* **Least harm first.** Candidates are taken in order of (priority, phase cost,
  needs eviction rather than in-place suspension, GPUs): a low-priority RLix
  rollout pod can be suspended in place by its node agent and resumed later, so
  it goes first; a training pod (optimizer state) or one already suspended
  (preempting it again risks what it parked) goes last.
* **Enough, and no more.** Units are added until the pod fits by RLix's memory
  model *and* as many GPUs are freed as the scheduler's own proposal freed (so
  its resource-count check still passes); then any unit not needed is dropped.

Victims the scheduler proposed but RLix does not know (non-GPU pods it may
need for CPU or memory) are passed through unchanged. A node with no valid
set is left out of the answer: the scheduler then preempts on another node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlix.core.phases import Phase
from rlix.core.policy.ordering import displaces
from rlix.core.policy.placement.fit import fit_demand, unresolvable
from rlix.core.policy.placement.loads import holdable_without, without
from rlix.core.policy.placement.view import PlacementView
from rlix.core.snapshot import Workload

# Cost of interrupting a pod in each phase: what is lost or must be moved.
_PHASE_COST: Mapping[Phase | None, int] = {
    Phase.ROLLOUT: 0,  # KV cache can be dropped or parked; vLLM/SGLang sleep cheaply
    Phase.IDLE: 1,
    None: 2,
    Phase.SCORING: 2,
    Phase.WEIGHT_SYNC: 3,  # a half-done sync has to be redone
    Phase.TRAINING: 4,  # optimizer state, gradient all-reduce in flight
}
_SUSPENDED_COST = 5


def harm(unit: Sequence[Workload]) -> tuple[int, int, int, int, tuple[str, ...]]:
    """Sort key of a victim unit: lower harms less."""
    top_priority = max(w.priority for w in unit)
    cost = max(_SUSPENDED_COST if w.suspended else _PHASE_COST.get(w.phase, 2) for w in unit)
    evict = int(any(not w.job for w in unit))  # not RLix-managed: must be evicted
    gpus = sum(w.gpus for w in unit)
    return top_priority, cost, evict, gpus, tuple(sorted(w.name for w in unit))


def _eligible(pod: Workload, w: Workload, *, in_place: bool = False) -> bool:
    if not (w.preemptible and w.name != pod.name):
        return False
    if not displaces(pod.priority, pod.work_left, w.priority, w.work_left):
        return False
    # Inside a priority only parking is cheap enough to reorder by size.
    if w.priority == pod.priority and not in_place:
        return False
    # Deleting (kube-scheduler's preemption) an RLix pod for an RLix pod is
    # never needed: the conductor parks it in place instead (module docstring).
    return in_place or not (pod.job and w.job)


def victim_units(
    view: PlacementView, pod: Workload, node: str, *, in_place: bool = False
) -> list[tuple[Workload, ...]]:
    """Groups of pods on ``node`` that may be taken together (a pod, or a whole gang;
    with ``in_place``, a gang's preemptible members)."""
    load = view.load(node)
    if load is None:
        return []
    units: dict[tuple[str, ...], tuple[Workload, ...]] = {}
    for w in load.residents:
        if not _eligible(pod, w, in_place=in_place):
            continue
        if w.gang_size > 1 and w.job:
            members = view.job_members(w.job)
            if len(members) < w.gang_size:
                # Part of the gang is unknown to us: it may be elsewhere.
                continue
            if in_place:
                members = tuple(m for m in members if m.preemptible)
            if any(m.node != node or not _eligible(pod, m, in_place=in_place) for m in members):
                continue
            unit = tuple(sorted(members, key=lambda m: m.name))
        else:
            unit = (w,)
        units[tuple(m.name for m in unit)] = unit
    return sorted(units.values(), key=harm)


def choose_victims_on(
    view: PlacementView,
    pod: Workload,
    node: str,
    proposed: Sequence[str],
    *,
    in_place: bool = False,
) -> tuple[str, ...] | None:
    """The least-harm victim names on ``node``, or None when no valid set exists.

    ``proposed`` are the scheduler's victims on this node (workload names);
    names the snapshot does not know are kept as they are.
    """
    load = view.load(node)
    if load is None:
        return None
    known = {w.name: w for w in load.residents}
    passthrough = [n for n in proposed if n not in known]
    proposed_known = [known[n] for n in proposed if n in known]
    # Non-GPU victims free CPU/memory the scheduler needs: keep them, if allowed.
    required = [w for w in proposed_known if w.gpus <= 0]
    if any(not _eligible(pod, w, in_place=in_place) for w in required):
        return None
    gpus_needed = sum(w.gpus for w in proposed_known)
    gpus_of = {w.name: w.gpus for w in load.residents}
    if pod.gpus > 0 and unresolvable(load, pod) is not None:
        return None  # too small, cordoned...: no victim set can help
    demand = fit_demand(pod, load.capacity_mib)

    def satisfied(removed: set[str]) -> bool:
        # The GPU count is the cheap test; the memory fit only runs once it passes.
        if sum(gpus_of[n] for n in removed) < gpus_needed:
            return False
        if holdable_without(load, removed, demand) < pod.gpus:
            return False
        # Memory is enough; the sharing rules must also let the pod take the GPUs.
        return without(load, removed).room_for(demand, pod, view.rules) >= pod.gpus

    removed = {w.name for w in required}
    chosen: list[tuple[Workload, ...]] = []
    done = satisfied(removed)
    for unit in victim_units(view, pod, node, in_place=in_place):
        if done:
            break
        if all(w.name in removed for w in unit):
            continue
        chosen.append(unit)
        removed.update(w.name for w in unit)
        done = satisfied(removed)
    if not done:
        return None
    for unit in reversed(list(chosen)):  # drop what turned out unnecessary
        trial = removed - {w.name for w in unit}
        if satisfied(trial):
            removed = trial
            chosen.remove(unit)
    names = sorted(removed) + [n for n in passthrough if n not in removed]
    return tuple(names) if names else None


def choose_victims(
    view: PlacementView, pod: Workload, proposals: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """Rewrite every node's proposal; nodes without a valid set are left out."""
    if pod.gpus <= 0:  # not a GPU pod: the scheduler's own choice stands
        return {node: tuple(v) for node, v in proposals.items() if v}
    out: dict[str, tuple[str, ...]] = {}
    for node, proposed in proposals.items():
        victims = choose_victims_on(view, pod, node, proposed)
        if victims:
            out[node] = victims
    return out
