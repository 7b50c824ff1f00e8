"""Filter: can a pod's GPUs fit on a node, and if not, why (in words)?

The reason ends up in ``kubectl describe pod`` ("0/12 nodes are available: ..."),
so it names the numbers a user can act on. A failure is *unresolvable* when
evicting every other pod would still not help (the node is too small, has no
GPUs, is cordoned); the scheduler then skips preemption on that node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rlix.core.policy.placement.loads import GPULoad, NodeLoad, owed_mib
from rlix.core.policy.placement.memo import key_id
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules, pair_traits
from rlix.core.policy.placement.view import PlacementView
from rlix.core.snapshot import Workload


@dataclass(frozen=True, slots=True)
class Fit:
    """The verdict for one node. ``candidates`` are the GPUs that could host the pod."""

    ok: bool
    reason: str = ""
    resolvable: bool = True
    candidates: tuple[GPULoad, ...] = ()


def pod_demand_mib(pod: Workload, capacity_mib: int) -> int:
    """Per-GPU memory the pod needs (its current and coming phase; whole GPU if undeclared)."""
    return owed_mib(pod, capacity_mib)


def fit_demand(pod: Workload, capacity_mib: int) -> int:
    """The ``demand`` to test GPUs with (``GPULoad.can_hold``): 0 means "an untouched
    GPU", for pods that declare no memory or nodes that publish no GPU size."""
    if pod.peak_memory_mib <= 0 or capacity_mib <= 0:
        return 0 if pod.peak_memory_mib <= 0 else pod_demand_mib(pod, capacity_mib)
    return pod_demand_mib(pod, capacity_mib)


def _mib(value: int) -> str:
    return f"{value} MiB" if value < 1024 else f"{value / 1024:.1f} GiB"


def unresolvable(load: NodeLoad, pod: Workload) -> str | None:
    """Why no preemption could ever make ``pod`` fit on this node, or None."""
    node = load.node
    if not node.schedulable:
        return "node is cordoned"
    refused = pod.refused_by(node)
    if refused is not None:
        return refused
    if not load.gpus:
        return "node has no GPUs (no nvidia.com/gpu.count label or agent GPU state)"
    if len(load.gpus) < pod.gpus:
        return f"node has {len(load.gpus)} GPUs, pod needs {pod.gpus} on one node"
    capacity = load.capacity_mib
    if capacity > 0 and pod_demand_mib(pod, capacity) > capacity:
        return (
            f"pod needs {_mib(pod_demand_mib(pod, capacity))} per GPU, "
            f"node's GPUs have {_mib(capacity)} ({node.product or 'unknown product'})"
        )
    return None


def fit(load: NodeLoad, pod: Workload, rules: SharingRules = DEFAULT_RULES) -> Fit:
    """Whether ``pod`` fits on ``load``'s node right now (memory, then the sharing rules)."""
    if pod.gpus <= 0:
        return Fit(ok=True)
    never = unresolvable(load, pod)
    if never is not None:
        return Fit(ok=False, reason=never, resolvable=False)
    capacity = load.capacity_mib
    demand = fit_demand(pod, capacity)
    candidates = tuple(load.gpus[p] for p in load.holdable_for(demand, pod.job))
    for group in load.sets_for(demand, pod, rules):
        if len(group) >= pod.gpus:
            return Fit(ok=True, candidates=tuple(load.gpus[p] for p in group))
    if len(candidates) >= pod.gpus:
        room = load.room_for(demand, pod, rules)
        over = "all of a pod's GPUs" if rules.interference is None else "a pod's shared GPUs"
        return Fit(
            ok=False,
            reason=(
                f"{len(candidates)} of {len(load.gpus)} GPUs have room for the pod, but the "
                f"sharing rules let it take at most {room} of them together (one partner job "
                f"over {over}, at most {rules.max_jobs_per_gpu} jobs per GPU, "
                "partners of the same priority whose pair the interference model says gains "
                "and whose peaks fit one GPU together)"
            ),
            candidates=candidates,
        )
    if pod.peak_memory_mib <= 0 or capacity <= 0:
        need = "a whole GPU each (no rlix.io/gpu-memory-mib declared)"
        if capacity <= 0 and demand > 0:
            need = "GPUs no other pod holds (node publishes no nvidia.com/gpu.memory)"
        reason = f"only {len(candidates)} of {len(load.gpus)} GPUs are free, pod needs {pod.gpus}"
        return Fit(ok=False, reason=f"{reason} with {need}", candidates=candidates)
    # Name the GPU closest to fitting, so the reason says where memory ran out.
    best = max(load.gpus, key=lambda g: (g.free_mib, -g.index))
    turns = ""
    if rules.parks_at_gate and rules.interference is not None:
        turns = (
            "; beside pods it takes turns with, its peak and a CUDA context each must fit "
            "(the nodes park at the gate)"
            if pod.loads_through_gate
            else "; it takes turns over memory only where its role sets loadsThroughGate "
            "(its first allocation inside rlix.loading()), and so must each partner's"
        )
    return Fit(
        ok=False,
        reason=(
            f"only {len(candidates)} of {len(load.gpus)} GPUs have {_mib(demand)} free, "
            f"pod needs {pod.gpus} (most free on one GPU: {_mib(best.free_mib)} on GPU "
            f"{best.index}, {_mib(best.owed_mib)} of {_mib(capacity)} promised; resident pods "
            f"keep memory for their current and next phase, suspended pods for their return{turns})"
        ),
        candidates=candidates,
    )


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """The filter verdict for a list of nodes, shaped like ExtenderFilterResult."""

    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def filter_nodes(view: PlacementView, pod: Workload, node_names: Iterable[str]) -> FilterOutcome:
    """Split ``node_names`` into nodes that fit ``pod`` and nodes that do not (with reasons)."""
    out = FilterOutcome()
    rules = view.rules
    if pod.gpus <= 0:  # not a GPU pod: not ours to judge
        out.feasible.extend(dict.fromkeys(node_names))
        return out
    # capacity -> (demand, and the key_id of room_for's question on nodes without
    # and with a pod of the pod's job): computed once per GPU size, so the
    # per-node memo lookup hashes an int.
    demands: dict[int, tuple[int, int, int]] = {}
    get_load = view.load_getter()
    selective, gpus, job = bool(pod.node_selector), pod.gpus, pod.job
    peak = pod.peak_memory_mib
    # peak and loads_through_gate: rule 6 (by turns only for pods whose loads
    # wait at the gate)
    sharing = (pod.priority, pair_traits(pod), peak, pod.loads_through_gate, rules)
    for name in dict.fromkeys(node_names):
        load = get_load(name)
        if load is None:
            out.unresolvable[name] = (
                "node is not in the rlix extender's cache yet (no watch event seen)"
            )
            continue
        # Fast path for the common verdict (enough GPUs can hold the pod), asked
        # of every node of every call: the selector and taint check is skipped
        # when neither the pod nor the node has any.
        node = load.node
        if node.schedulable and (not (selective or node.taints) or pod.refused_by(node) is None):
            cap = load.capacity_mib
            found = demands.get(cap)
            if found is None:
                need = fit_demand(pod, cap)
                found = demands[cap] = (
                    need,
                    key_id((need, "", *sharing)),
                    key_id((need, job, *sharing)),
                )
            demand = found[0]
            if cap <= 0 or demand <= cap:
                memo = load.memo
                jobs = memo.jobs if memo.jobs is not None else load.jobs()
                kid = found[2] if job and job in jobs else found[1]
                room = memo.room.get(kid)
                if room is None:
                    room = memo.remember(memo.room, kid, load.room_for(demand, pod, rules))
                if room >= gpus:
                    out.feasible.append(name)
                    continue
                if not (selective or node.taints):
                    # The sentence for a node that cannot take the pod depends on
                    # the load and on what the room question asked, plus the
                    # pod's width and peak: kept, since the sharing rules refuse
                    # the same nodes call after call.
                    known = memo.verdicts.get((kid, gpus, peak))
                    if known is None:
                        v = fit(load, pod, rules)
                        known = memo.remember(
                            memo.verdicts, (kid, gpus, peak), (v.ok, v.reason, v.resolvable)
                        )
                    _file(out, name, *known)
                    continue
        verdict = fit(load, pod, rules)
        _file(out, name, verdict.ok, verdict.reason, verdict.resolvable)
    return out


def _file(out: FilterOutcome, name: str, ok: bool, reason: str, resolvable: bool) -> None:
    if ok:
        out.feasible.append(name)
    elif resolvable:
        out.failed[name] = reason
    else:
        out.unresolvable[name] = reason
