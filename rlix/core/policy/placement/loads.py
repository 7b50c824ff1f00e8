"""What each GPU of a node already owes to the pods bound there.

A GPU is shared by memory, not handed out whole: RLix overlaps complementary
phases of different jobs on one GPU, so the question "does this pod fit" is
"do enough GPUs keep enough memory free for it". What a resident pod *owes* is
more than what it uses this second:

* a running pod keeps the larger of its current and its *next* phase, because
  it will enter that phase without asking (rollout -> scoring -> training);
* a suspended pod keeps the memory of the phase it was parked in, because it
  must be able to come back (nothing a preempted job holds may be lost);
* a pod that declares no memory owes the whole GPU: plain Kubernetes semantics
  for GPU pods RLix knows nothing about;
* what a node agent measured (``GPU.used_mib``) is a floor: memory used outside
  any pod we know of is still taken.

On a node whose GPUs RLix publishes with memory overcommit (a gpu-claims node,
``Node.memory_overcommit`` > 1) parked memory is held apart: it must fit in the
published memory (physical x the factor), which is what kube-scheduler's DRA
allocator counts for the pods' claims, while what is resident must fit in
physical memory. A waiting job can so be admitted into memory that lower-
priority pods parked for it, and nothing resident ever exceeds the GPU
(docs/conductor.md, "What parking frees"). With a factor of 1 parked memory is
owed like any other, as everywhere else.

On a gpu-claims node each resident also holds a claim: its pinned
ResourceClaim asks its peak-phase memory on each of its GPUs (the whole
published memory when it declares none), for as long as the pod exists,
parked or not. kube-scheduler's DRA allocator lets a GPU's claims sum to its
published memory and no more, so a new pod must fit beside the residents'
claims too; what they owe now (a parked pod its parked phase, a running one
its current and next phase) can be less (chaos run, bench/results/chaos.md).

Pods whose GPU indices are unknown are spread onto the emptiest GPUs, the
choice a device plugin would most likely make; the policy stays deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rlix.core.dra import claim_memory_mib
from rlix.core.phases import ITERATION_ORDER, Phase
from rlix.core.policy.placement.memo import LoadMemo
from rlix.core.policy.placement.sharing import SharingRules, joinable, needed_mib, pair_traits
from rlix.core.snapshot import Node, Workload


def next_phase(phase: Phase | None) -> Phase | None:
    """The phase after ``phase`` in a synchronous RL loop; None when unknowable."""
    if phase is None or phase not in ITERATION_ORDER:
        return None
    return ITERATION_ORDER[(ITERATION_ORDER.index(phase) + 1) % len(ITERATION_ORDER)]


def running_jobs(residents: Iterable[Workload]) -> frozenset[str]:
    """The jobs (a pod without one: the pod) running on a GPU, parked pods left out:
    who a pod placed there would share with."""
    return frozenset(r.job or r.name for r in residents if not r.suspended)


def owed_mib(workload: Workload, capacity_mib: int) -> int:
    """Per-GPU memory ``workload`` must be able to hold on a GPU of ``capacity_mib``."""
    if workload.peak_memory_mib <= 0:
        return capacity_mib  # undeclared: the whole GPU
    if workload.suspended or workload.phase is None:
        return workload.memory_in(workload.phase)
    coming = next_phase(workload.phase)
    if coming is None:  # idle: it may resume into any phase
        return workload.peak_memory_mib
    return max(workload.memory_in(workload.phase), workload.memory_in(coming))


@dataclass(frozen=True, slots=True)
class GPULoad:
    """One GPU: its size, what residents owe on it, and who they are."""

    index: int
    capacity_mib: int  # 0 when the node publishes no memory size
    owed_mib: int
    residents: tuple[Workload, ...] = ()
    measured_mib: int = 0  # what the node agent saw in use (a floor for owed_mib)
    debts: tuple[int, ...] = ()  # what each resident owes here (parallel to residents)
    # Published memory above physical (overcommit); 0: parked memory is owed.
    headroom_mib: int = 0
    parked_mib: int = 0  # parked residents' debts, apart from owed_mib when headroom_mib > 0
    # On a gpu-claims node: what the residents' claims hold (their peaks); None
    # elsewhere (nothing but memory limits what a GPU takes).
    claimed_mib: int | None = None
    # Whether each resident's debt is parked memory held apart (see the module
    # doc; parallel to residents): derived once here, since the extender's
    # preemption trials ask it for every resident of every node they try.
    apart: tuple[bool, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        held_apart = self.headroom_mib > 0
        object.__setattr__(self, "apart", tuple(held_apart and r.suspended for r in self.residents))

    @property
    def free_mib(self) -> int:
        return max(self.capacity_mib - self.owed_mib, 0)

    @property
    def is_empty(self) -> bool:
        return not self.residents and self.owed_mib == 0

    def can_hold(self, demand_mib: int) -> bool:
        """Whether ``demand_mib`` (0 = the whole GPU) fits next to the residents."""
        return _holds(
            self.capacity_mib,
            self.owed_mib,
            bool(self.residents),
            demand_mib,
            headroom_mib=self.headroom_mib,
            parked_mib=self.parked_mib,
            claimed_mib=self.claimed_mib,
        )

    def holds_by_turns(self, pod: Workload, rules: SharingRules) -> bool:
        """Whether ``pod`` fits here beside the running residents by turns
        (``sharing.needed_mib``): where the nodes park at the gate, a pod
        that takes turns with the residents needs room for the larger peak
        and the others' contexts, not for what each resident owes now, plus
        what stays put: suspended residents' debts, memory no known pod
        explains, and (on a gpu-claims node) the claims, which still ask every
        peak of the published memory. False where they do not all take turns
        (``can_hold`` is the test then)."""
        running = [r for r in self.residents if not r.suspended]
        if not (rules.parks_at_gate and running and self.capacity_mib > 0):
            return False
        need = needed_mib(rules, [pod, *running])
        if need >= pod.peak_memory_mib + sum(r.peak_memory_mib for r in running):
            return False  # not by turns: every peak (``can_hold`` judges debts)
        stays = sum(
            d
            for r, d, apart in zip(self.residents, self.debts, self.apart, strict=True)
            if r.suspended and not apart
        )
        if self.capacity_mib - stays - self._unexplained() < need:
            return False
        published = self.capacity_mib + self.headroom_mib
        claims = self.claimed_mib or 0
        demand = claim_memory_mib(pod.peak_memory_mib, published)
        return published - max(claims, stays + self.parked_mib) >= demand

    def claimed_without(self, names: set[str]) -> int | None:
        """What the claims hold if the named residents left (None: not a claims GPU)."""
        if self.claimed_mib is None:
            return None
        published = self.capacity_mib + self.headroom_mib
        return self.claimed_mib - sum(
            claim_memory_mib(r.peak_memory_mib, published)
            for r in self.residents
            if r.name in names
        )

    def parked_without(self, names: set[str]) -> int:
        """Parked memory held apart if the named residents left."""
        return sum(
            d
            for r, d, apart in zip(self.residents, self.debts, self.apart, strict=True)
            if apart and r.name not in names
        )

    def _on_device(self) -> int:
        """What the residents that are not parked-apart owe (what the agent can measure)."""
        return sum(d for d, apart in zip(self.debts, self.apart, strict=True) if not apart)

    def _unexplained(self) -> int:
        """Memory the agent measured beyond what the known residents owe on the
        device: something else uses it, and it stays taken."""
        return max(self.measured_mib - self._on_device(), 0) if self.measured_mib else 0

    def owed_without(self, names: set[str]) -> tuple[int, bool]:
        """(owed MiB, still has residents) if the named residents left; memory
        no known resident explains stays (``_unexplained``)."""
        kept = 0
        any_kept = False
        for r, debt, apart in zip(self.residents, self.debts, self.apart, strict=True):
            if r.name not in names:
                kept += 0 if apart else debt
                any_kept = True
        return kept + self._unexplained(), any_kept


def _holds(
    capacity_mib: int,
    owed: int,
    has_residents: bool,
    demand_mib: int,
    *,
    headroom_mib: int = 0,
    parked_mib: int = 0,
    claimed_mib: int | None = None,
) -> bool:
    """The one rule for "fits on this GPU"; see ``GPULoad.can_hold``."""
    if capacity_mib <= 0 or demand_mib <= 0:
        # Unknown size, or a whole-GPU demand: only an untouched GPU will do.
        return not has_residents and owed == 0
    if capacity_mib - owed < demand_mib:
        return False  # what is resident stays within physical memory
    # Parked memory counts against the published memory, and so do the
    # residents' claims. A new pod's demand (no phase yet) is its peak: its claim.
    taken = max(owed + parked_mib, claimed_mib or 0)
    return capacity_mib + headroom_mib - taken >= demand_mib


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """A node with its per-GPU debts; built once per change and reused.

    ``memo`` keeps answers derived from this (immutable) load, such as "which
    GPUs hold 30 GiB"; the extender asks the same questions for thousands of
    nodes per call, and only nodes touched by a watch event get a new load.
    """

    node: Node
    gpus: tuple[GPULoad, ...]
    residents: tuple[Workload, ...]
    capacity_mib: int = 0  # the largest GPU's memory (a node's GPUs are normally identical)
    empty_gpus: int = 0  # GPUs nobody holds
    memo: LoadMemo = field(default_factory=LoadMemo, compare=False, repr=False)

    def holdable(self, demand_mib: int) -> tuple[int, ...]:
        """Positions (into ``gpus``) of GPUs that can take ``demand_mib`` (0 = whole GPU)."""
        found = self.memo.holdable.get(demand_mib)
        if found is None:
            found = tuple(p for p, g in enumerate(self.gpus) if g.can_hold(demand_mib))
            self.memo.remember(self.memo.holdable, demand_mib, found)
        return found

    def jobs(self) -> frozenset[str]:
        """Jobs with a pod on this node (memoised: asked for every node, every call)."""
        found = self.memo.jobs
        if found is None:
            found = self.memo.jobs = frozenset(r.job for r in self.residents)
        return found

    def holdable_for(self, demand_mib: int, job: str) -> tuple[int, ...]:
        """Like ``holdable``, without GPUs that already hold a pod of ``job``.

        A gang's pods run at the same time and in the same phase, so two of them
        on one GPU only slow each other down (and overlap nothing): a job never
        shares a GPU with itself.
        """
        found = self.holdable(demand_mib)
        if not job or job not in self.jobs():
            return found
        key = (demand_mib, job)
        own = self.memo.holdable_for_job.get(key)
        if own is None:
            own = tuple(p for p in found if all(r.job != job for r in self.gpus[p].residents))
            self.memo.remember(self.memo.holdable_for_job, key, own)
        return own

    def groups_for(
        self, demand_mib: int, pod: Workload, rules: SharingRules
    ) -> tuple[tuple[int, ...], ...]:
        """The GPU sets ``pod`` may take its GPUs from (``sharing``, rules 1-6).

        Each set holds the GPUs (positions into ``gpus``) whose running
        residents are the same jobs, among those that can hold ``demand_mib`` and that the
        rules let the pod join; the set of empty GPUs comes first. A pod's GPUs
        all come from one set: all empty, or all shared with the same partner
        (with a matrix, also ``partial_groups_for``).
        """
        # The pod's job matters only where the node holds a pod of it (a job
        # never shares a GPU with itself); elsewhere pods of every job with the
        # same demand, priority and shapes share one answer.
        job = pod.job if pod.job and pod.job in self.jobs() else ""
        key = (
            demand_mib,
            job,
            pod.priority,
            pair_traits(pod),
            pod.peak_memory_mib,
            pod.loads_through_gate,
            rules,
        )
        found = self.memo.groups.get(key)
        if found is None:
            sets: dict[frozenset[str], list[int]] = {}
            for p in self._takeable(demand_mib, pod, rules):
                residents = self.gpus[p].residents
                if residents and not joinable(rules, pod, residents, self.gpus[p].capacity_mib):
                    continue
                jobs = running_jobs(residents)
                sets.setdefault(jobs, []).append(p)
            ordered = sorted(sets.items(), key=lambda kv: (bool(kv[0]), sorted(kv[0])))
            found = tuple(tuple(ps) for _, ps in ordered)
            self.memo.remember(self.memo.groups, key, found)
        return found

    def _takeable(self, demand_mib: int, pod: Workload, rules: SharingRules) -> tuple[int, ...]:
        """The GPUs with memory for ``pod`` (``holdable_for``), and, where the
        nodes park at the gate, those it can hold by turns
        (``GPULoad.holds_by_turns``); in GPU order."""
        found = self.holdable_for(demand_mib, pod.job)
        if not rules.parks_at_gate or demand_mib <= 0 or pod.peak_memory_mib <= 0:
            return found
        have = set(found)
        more = [
            p
            for p, g in enumerate(self.gpus)
            if p not in have
            and all(r.job != pod.job or not pod.job for r in g.residents)
            and g.holds_by_turns(pod, rules)
        ]
        return tuple(sorted((*found, *more))) if more else found

    def partial_groups_for(
        self, demand_mib: int, pod: Workload, rules: SharingRules
    ) -> tuple[tuple[int, ...], ...]:
        """With an interference matrix, each partner's GPUs and the empty ones
        together (a *partial* set), for a pod wider than every set of
        ``groups_for``; none without one.

        Rule 2 asks one partner per pod because a gang moves at its slowest GPU
        and different partners add up their worst moments; a partner on some of
        the pod's GPUs and nobody on the rest is still one partner. Without this
        a pod as wide as a node waited for a whole node to empty
        (docs/simulator.md, "Partial sets"). Only with a matrix: rule 5 vouches
        for the pair there, and the cluster's default rules stay as they were.
        """
        if rules.interference is None:
            return ()
        groups = self.groups_for(demand_mib, pod, rules)
        if not groups or running_jobs(self.gpus[groups[0][0]].residents):
            return ()  # no empty GPU (the empty set, when there is one, comes first)
        return tuple(g + groups[0] for g in groups[1:])

    def sets_for(
        self, demand_mib: int, pod: Workload, rules: SharingRules
    ) -> tuple[tuple[int, ...], ...]:
        """Every GPU set the rules let ``pod`` take here: ``groups_for``'s, then
        ``partial_groups_for``'s."""
        return (
            *self.groups_for(demand_mib, pod, rules),
            *self.partial_groups_for(demand_mib, pod, rules),
        )

    def room_for(self, demand_mib: int, pod: Workload, rules: SharingRules) -> int:
        """The most GPUs ``pod`` could take here under the rules (its largest set)."""
        return max((len(g) for g in self.sets_for(demand_mib, pod, rules)), default=0)


def _capacities(node: Node) -> list[tuple[int, int, int]]:
    """(index, capacity, measured use) per GPU, live agent state first."""
    if node.gpus:
        return [(g.index, g.memory_mib or node.gpu_memory_mib, g.used_mib) for g in node.gpus]
    return [(i, node.gpu_memory_mib, 0) for i in range(max(node.gpu_count, 0))]


def _headroom(capacity_mib: int, overcommit: float) -> int:
    return int(capacity_mib * (overcommit - 1)) if overcommit > 1 and capacity_mib > 0 else 0


def node_load(node: Node, residents: Iterable[Workload]) -> NodeLoad:
    """Assign every resident's debt to GPUs of ``node``."""
    caps = _capacities(node)
    position = {index: pos for pos, (index, _, _) in enumerate(caps)}
    overcommit = node.memory_overcommit if node.claims else 1.0
    owed = [0] * len(caps)
    parked = [0] * len(caps)
    claimed = [0] * len(caps)
    holders: list[list[Workload]] = [[] for _ in caps]
    debts: list[list[int]] = [[] for _ in caps]
    ordered = sorted(residents, key=lambda w: (not w.gpu_indices, w.name))
    for w in ordered:
        slots = [position[i] for i in dict.fromkeys(w.gpu_indices) if i in position]
        wanted = min(w.gpus, len(caps)) if w.gpus > 0 else len(slots)
        if len(slots) < wanted:
            spare = sorted(
                (p for p in range(len(caps)) if p not in slots),
                key=lambda p: (owed[p] - caps[p][1], p),
            )
            slots.extend(spare[: wanted - len(slots)])
        for p in slots:
            debt = owed_mib(w, caps[p][1])
            if w.suspended and overcommit > 1:
                parked[p] += debt  # held apart: it takes published headroom only
            else:
                owed[p] += debt
            published = caps[p][1] + _headroom(caps[p][1], overcommit)
            claimed[p] += claim_memory_mib(w.peak_memory_mib, published)
            holders[p].append(w)
            debts[p].append(debt)
    gpus = tuple(
        GPULoad(
            index=index,
            capacity_mib=cap,
            owed_mib=max(owed[p], used),
            residents=tuple(holders[p]),
            measured_mib=used,
            debts=tuple(debts[p]),
            headroom_mib=_headroom(cap, overcommit),
            parked_mib=parked[p],
            claimed_mib=claimed[p] if node.claims else None,
        )
        for p, (index, cap, used) in enumerate(caps)
    )
    return NodeLoad(
        node=node,
        gpus=gpus,
        residents=tuple(ordered),
        capacity_mib=max((g.capacity_mib for g in gpus), default=0),
        empty_gpus=sum(1 for g in gpus if g.is_empty),
    )


def _gpu_without(g: GPULoad, names: set[str]) -> GPULoad:
    if not any(r.name in names for r in g.residents):
        return g
    owed, _ = g.owed_without(names)
    kept = [(r, d) for r, d in zip(g.residents, g.debts, strict=True) if r.name not in names]
    return GPULoad(
        index=g.index,
        capacity_mib=g.capacity_mib,
        owed_mib=owed,
        residents=tuple(r for r, _ in kept),
        measured_mib=max(g.measured_mib - g._on_device(), 0) if g.measured_mib else 0,
        debts=tuple(d for _, d in kept),
        headroom_mib=g.headroom_mib,
        parked_mib=g.parked_without(names),
        claimed_mib=g.claimed_without(names),
    )


def without(load: NodeLoad, names: set[str]) -> NodeLoad:
    """``load`` with the named residents gone, GPUs otherwise as they were.

    Preemption trials ask "would the pod fit if these went?" many times per
    node; this answers without re-running the GPU assignment of ``node_load``
    (victims leave, nobody else moves).
    """
    if not names:
        return load
    gpus = tuple(_gpu_without(g, names) for g in load.gpus)
    return NodeLoad(
        node=load.node,
        gpus=gpus,
        residents=tuple(r for r in load.residents if r.name not in names),
        capacity_mib=load.capacity_mib,
        empty_gpus=sum(1 for g in gpus if g.is_empty),
    )


def holdable_without(load: NodeLoad, names: set[str], demand_mib: int) -> int:
    """How many GPUs could take ``demand_mib`` once ``names`` left (same rules as
    ``GPULoad.can_hold``); the cheap form of ``without`` for preemption trials."""
    count = 0
    for g in load.gpus:
        owed, occupied = g.owed_without(names)
        parked = g.parked_without(names)
        count += _holds(
            g.capacity_mib,
            owed,
            occupied,
            demand_mib,
            headroom_mib=g.headroom_mib,
            parked_mib=parked,
            claimed_mib=g.claimed_without(names),
        )
    return count
