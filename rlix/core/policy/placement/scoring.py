"""Prioritize: the phase-complementarity score of a node for a pod (0..10).

Why these four terms, and why these weights
-------------------------------------------
RL post-training cycles every job through phases with very different shapes
(``rlix.core.phases``): rollout decoding is bound by HBM bandwidth and KV-cache
size and leaves the SMs mostly idle; scoring and training are compute bound;
weight sync is network/NVLink bound. RLix time-shares GPUs between jobs, so the
best node for a pod is the one whose GPUs the pod can *share without a fight*:

1. **Complementary shape (weight 3).** A memory-bound pod next to a
   compute-bound resident uses the half of the GPU the resident leaves idle;
   two memory-bound (or two compute-bound) phases on one GPU slow each other
   down. Per GPU the pod would share: 1.0 for compute-vs-memory, 0.0 for the
   same shape, 0.5 when either side is idle/unknown or network bound. An empty
   GPU scores 0.5: no partner, no gain and no conflict.
2. **Interleaving of phase cycles (weight 2).** Even same-shaped jobs can share
   if their cycles are offset: a resident in training while the pod starts in
   rollout will each reach its peak while the other is in a trough. The score is
   the cyclic distance between the two positions in ``ITERATION_ORDER``,
   normalised so that half a cycle apart is 1.0 and in lock-step is 0.0.
3. **Gang locality and topology (weight 3).** Pods of one job exchange weights
   every iteration (weight sync) and gangs all-reduce gradients: the same node
   (NVLink) beats the same NVLink domain (e.g. one NVL72 rack), which beats
   crossing the network. Score = share of the job's placed pods on this node
   + 0.6 x share in the node's NVLink domain elsewhere. A job with no placed
   pods yet scores 0.5 everywhere: locality then does not steer.
4. **Fragmentation (weight 2).** Keep whole GPUs (and whole nodes) free for the
   large training gangs that need them: prefer nodes where the pod leaves fewer
   untouched GPUs behind (0.7) and, on shared GPUs, the tightest memory fit (0.3).

The pod's phase comes from ``rlix.io/phase``; a pod that has not reported one
yet is placed by its role's name (a "rollout" role starts in rollout), since
that is the phase it will enter first. Each term lies in 0..1, the weights sum
to 10, and the total is rounded to the integer HostPriority the scheduler wants.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from rlix.core.phases import ITERATION_ORDER, Phase, Shape, shape_of
from rlix.core.policy.placement.fit import pod_demand_mib
from rlix.core.policy.placement.loads import GPULoad, NodeLoad, running_jobs
from rlix.core.policy.placement.memo import ShapeKey, SharedTerms, key_id
from rlix.core.policy.placement.sharing import SharingRules, pair_progress, pair_traits
from rlix.core.policy.placement.view import PlacementView
from rlix.core.snapshot import Workload

WEIGHT_COMPLEMENT = 3.0
WEIGHT_INTERLEAVE = 2.0
WEIGHT_LOCALITY = 3.0
WEIGHT_PACKING = 2.0
MAX_SCORE = 10
DOMAIN_CREDIT = 0.6
NEUTRAL = 0.5

# Role names people give RL roles, and the phase such a pod enters first.
_ROLE_HINTS: tuple[tuple[str, Phase], ...] = (
    ("rollout", Phase.ROLLOUT),
    ("generat", Phase.ROLLOUT),
    ("sampler", Phase.ROLLOUT),
    ("infer", Phase.ROLLOUT),
    ("vllm", Phase.ROLLOUT),
    ("sglang", Phase.ROLLOUT),
    ("reward", Phase.SCORING),
    ("ref", Phase.SCORING),
    ("scor", Phase.SCORING),
    ("train", Phase.TRAINING),
    ("learner", Phase.TRAINING),
    ("policy", Phase.TRAINING),
    ("actor", Phase.TRAINING),
    ("critic", Phase.TRAINING),
)
_POSITION = {phase: i for i, phase in enumerate(ITERATION_ORDER)}


def likely_phase(workload: Workload) -> Phase | None:
    """The reported phase, else the phase the role's name suggests, else None."""
    if workload.phase is not None:
        return workload.phase
    role = workload.role.lower()
    for hint, phase in _ROLE_HINTS:
        if hint in role:
            return phase
    return None


def complement(a: Phase | None, b: Phase | None) -> float:
    """How well two phases share one GPU by resource shape (1 best, 0 worst)."""
    sa, sb = shape_of(a), shape_of(b)
    if Shape.NONE in (sa, sb) or Shape.NETWORK in (sa, sb):
        return NEUTRAL
    return 0.0 if sa == sb else 1.0


def interleave(a: Phase | None, b: Phase | None) -> float:
    """How far apart two phase cycles are (1 = half a cycle, 0 = lock-step)."""
    pa, pb = _POSITION.get(a) if a else None, _POSITION.get(b) if b else None
    if pa is None or pb is None:
        return NEUTRAL
    n = len(ITERATION_ORDER)
    d = abs(pa - pb) % n
    return min(d, n - d) / (n // 2)


def _gang_partners(view: PlacementView, pod: Workload) -> frozenset[str]:
    """The jobs running on the GPUs of ``pod``'s placed gang-mates."""
    found: set[str] = set()
    for w in view.job_members(pod.job):
        if w.node is None or w.name == pod.name or w.suspended:
            continue
        mine = set(w.gpu_indices)
        for r in view.snapshot.on_node(w.node):
            if r.job != pod.job and not r.suspended and mine & set(r.gpu_indices):
                found.add(r.job or r.name)
    return frozenset(found)


# Rule 5 on, a pod that must share scores in 0..PAIR_BAND, below every empty
# placement (>= 2.975: neutral pair terms 2.5 plus some packing), so it pairs
# only where it would otherwise wait. Pair progress maps 1.0..1.8 onto 0..1.
PAIR_BAND = 2.0
PAIR_SPAN = (1.0, 1.8)


def _pair_band(pair: tuple[float, frozenset[str]], partners: frozenset[str] | None) -> float:
    """A shared placement's total (rule 5 on): half pair progress, half gang
    alignment (1 when the gang's placed pods share with the same jobs, 0.5 when
    none is placed, 0 otherwise: the gang moves at its slowest GPU)."""
    progress, jobs = pair
    low, high = PAIR_SPAN
    quality = min(1.0, max(0.0, (progress - low) / (high - low)))
    aligned = NEUTRAL if partners is None else (1.0 if jobs <= partners else 0.0)
    return PAIR_BAND * (0.5 * quality + 0.5 * aligned)


class NodeScore(NamedTuple):
    """A node's total and the terms it came from (kept for /debug and replay).

    A NamedTuple, not a frozen dataclass: one is built per node per call, and a
    frozen dataclass's ``__init__`` costs several times more.
    """

    node: str
    score: int
    raw: float = 0.0  # the unrounded total; finer than the 0..10 the wire allows
    complement: float = 0.0
    interleave: float = 0.0
    locality: float = 0.0
    packing: float = 0.0
    gpus: tuple[int, ...] = ()
    feasible: bool = True


def _pair_terms(pod_phase: Phase | None, gpu: GPULoad) -> tuple[float, float]:
    if not gpu.residents:
        return NEUTRAL, NEUTRAL
    c = i = 0.0
    for r in gpu.residents:
        rp = None if r.suspended else likely_phase(r)
        c += complement(pod_phase, rp)
        i += interleave(pod_phase, rp)
    n = len(gpu.residents)
    return c / n, i / n


@dataclass(frozen=True, slots=True)
class _PodContext:
    """Everything about the pod that is the same for every node: computed once per call."""

    pod: Workload
    phase: Phase | None
    peers_here: Mapping[str, int]
    peers_domain: Mapping[str, int]
    peers_total: int
    demands: dict[int, tuple[int, bool]]  # capacity -> (demand, too big for the GPU)
    # Rule 5 on: the jobs running beside the job's placed pods (None: none placed).
    partners: frozenset[str] | None = None

    @classmethod
    def of(cls, view: PlacementView, pod: Workload) -> _PodContext:
        here: Mapping[str, int] = {}
        domain: Mapping[str, int] = {}
        if pod.job:
            here, domain = view.peers(pod.job, exclude=pod.name)
        partners = None
        if view.rules.interference is not None and here:
            partners = _gang_partners(view, pod)
        return cls(pod, likely_phase(pod), here, domain, sum(here.values()), {}, partners)

    def demand(self, capacity: int) -> tuple[int, bool]:
        found = self.demands.get(capacity)
        if found is None:
            pod = self.pod
            need = pod_demand_mib(pod, capacity)
            too_big = capacity > 0 and need > capacity
            whole = pod.peak_memory_mib <= 0
            found = self.demands[capacity] = (0 if whole else need, too_big)
        return found

    def locality(self, load: NodeLoad) -> float:
        if self.peers_total == 0:
            return NEUTRAL
        here = self.peers_here.get(load.node.name, 0)
        domain = load.node.nvlink_domain
        near = self.peers_domain.get(domain, 0) - here if domain else 0
        return min(1.0, (here + DOMAIN_CREDIT * near) / self.peers_total)


def _shared_terms(
    load: NodeLoad,
    pod: Workload,
    phase: Phase | None,
    demand: int,
    job: str,
    *,
    rules: SharingRules,
) -> SharedTerms | None:
    """The terms that depend only on the node's load and the pod's shape.

    Memoised on the (immutable) load: identical pods (a role's replicas, a
    gang's members) and repeated calls reuse them; None when the pod does not fit.
    The pod's GPUs come from one of the sets the sharing rules allow
    (``NodeLoad.groups_for``): the one whose residents complement the pod best.
    Without an interference matrix (``DEFAULT_RULES``, the cluster's) that is
    not "empty GPUs first": a good partner beats an empty GPU; a same-shape one
    does not. With one (rule 5 on: the simulator's RLix) it is: the pod takes
    empty GPUs while the node has enough, and otherwise the shared set with
    the highest expected pair progress (``pair_progress``), see ``_pair_band``.
    """
    gpus = pod.gpus
    memo = load.memo
    key: ShapeKey = (
        phase,
        demand,
        gpus,
        job,
        (pod.priority, pair_traits(pod), pod.peak_memory_mib, pod.loads_through_gate, rules),
    )
    if key in memo.terms:
        return memo.terms[key]
    result: SharedTerms | None = None
    # A partial set (one partner on some GPUs, the rest empty; with a matrix
    # only) only where no aligned set is wide enough.
    groups = [g for g in load.groups_for(demand, pod, rules) if len(g) >= gpus] or [
        g for g in load.partial_groups_for(demand, pod, rules) if len(g) >= gpus
    ]
    if groups:
        pairs = memo.pairs.get(phase)
        if pairs is None:
            pairs = tuple(_pair_terms(phase, g) for g in load.gpus)
            memo.remember(memo.pairs, phase, pairs)

        def order(p: int) -> tuple[float, int, int]:
            return (
                -(WEIGHT_COMPLEMENT * pairs[p][0] + WEIGHT_INTERLEAVE * pairs[p][1]),
                load.gpus[p].free_mib,
                load.gpus[p].index,
            )

        def ranked_in(group: tuple[int, ...]) -> list[int]:
            return sorted(group, key=order)[:gpus]

        def value(chosen: list[int]) -> float:
            return sum(
                WEIGHT_COMPLEMENT * pairs[p][0] + WEIGHT_INTERLEAVE * pairs[p][1] for p in chosen
            )

        # The best set by the pair terms (an empty GPU counts as neutral, so a
        # complementary partner beats it and a same-shape one loses to it);
        # ties go to the tighter memory fit, then the lower GPU index.
        pair: tuple[float, frozenset[str]] | None = None
        if rules.interference is None:
            options = [ranked_in(g) for g in groups]
            ranked = min(
                options,
                key=lambda o: (
                    -value(o),
                    sum(load.gpus[p].free_mib for p in o),
                    load.gpus[o[0]].index,
                ),
            )
        else:
            ranked, pair = _rule5_choice(load, pod, gpus, groups=groups, rules=rules, order=order)
        comp = sum(pairs[p][0] for p in ranked) / gpus
        inter = sum(pairs[p][1] for p in ranked) / gpus
        chosen = [load.gpus[p] for p in ranked]
        empty_after = load.empty_gpus - sum(1 for g in chosen if g.is_empty)
        pack_gpus = 1.0 - empty_after / len(load.gpus)
        shared = [g for g in chosen if not g.is_empty and g.capacity_mib > 0]
        if shared and demand > 0:
            left = sum((g.free_mib - demand) / g.capacity_mib for g in shared) / len(shared)
            tight = 1.0 - left
        else:
            tight = NEUTRAL
        pack = 0.7 * pack_gpus + 0.3 * tight
        result = (comp, inter, pack, tuple(g.index for g in chosen), pair)
    return memo.remember(memo.terms, key, result)


def _rule5_choice(
    load: NodeLoad,
    pod: Workload,
    gpus: int,
    *,
    groups: list[tuple[int, ...]],
    rules: SharingRules,
    order: Callable[[int], tuple[float, int, int]],
) -> tuple[list[int], tuple[float, frozenset[str]] | None]:
    """Rule 5 on: empty GPUs first, else the best-paying pair.

    An empty set big enough wins outright: a pair runs both jobs slower than
    alone (a gang moves at its slowest GPU), so it pays only against waiting.
    Otherwise the shared GPUs with the highest expected pair progress, worst
    GPU of the chosen ones counting (the gang's pace); ties by the pair terms.
    """
    for g in groups:
        if not running_jobs(load.gpus[g[0]].residents):
            return sorted(g, key=order)[:gpus], None
    # An empty GPU of a partial set sets no pace (inf) and is taken last: the
    # pod's pace is its partner's pair, wherever the rest of it sits.
    progress = {
        p: pair_progress(rules, pod, load.gpus[p].residents)
        if running_jobs(load.gpus[p].residents)
        else math.inf
        for g in groups
        for p in g
    }
    options = [
        sorted(g, key=lambda p: (progress[p] == math.inf, -progress[p], *order(p)))[:gpus]
        for g in groups
    ]
    best = min(
        options,
        key=lambda o: (
            -min(progress[p] for p in o),
            sum(load.gpus[p].free_mib for p in o),
            load.gpus[o[0]].index,
        ),
    )
    return best, (min(progress[p] for p in best), running_jobs(load.gpus[best[0]].residents))


def score_load(view: PlacementView, pod: Workload, load: NodeLoad) -> NodeScore:
    """Score ``pod`` on one node; infeasible nodes score 0."""
    return _score(_PodContext.of(view, pod), load, view.rules)


def _score(ctx: _PodContext, load: NodeLoad, rules: SharingRules) -> NodeScore:
    name = load.node.name
    if ctx.pod.gpus <= 0:
        return NodeScore(node=name, score=0)
    demand, too_big = ctx.demand(load.capacity_mib)
    shared = (
        None
        if too_big or not load.node.schedulable
        else _shared_terms(load, ctx.pod, ctx.phase, demand, ctx.pod.job, rules=rules)
    )
    if shared is None:
        return NodeScore(node=name, score=0, feasible=False)
    comp, inter, pack, chosen, pair = shared
    loc = ctx.locality(load)
    # Same order of float operations as score_values, so both round alike.
    total = (
        WEIGHT_COMPLEMENT * comp
        + WEIGHT_INTERLEAVE * inter
        + WEIGHT_PACKING * pack
        + WEIGHT_LOCALITY * loc
    )
    if pair is not None:
        total = _pair_band(pair, ctx.partners)
    return NodeScore(
        node=name,
        score=max(0, min(MAX_SCORE, int(total + 0.5))),  # half up, not banker's
        raw=total,
        complement=comp,
        interleave=inter,
        locality=loc,
        packing=pack,
        gpus=chosen,
    )


def _base(
    load: NodeLoad,
    pod: Workload,
    phase: Phase | None,
    demand: int,
    job: str,
    *,
    kid: int,
    rules: SharingRules,
) -> float | tuple[float, frozenset[str]] | None:
    """The locality-free part of the total, memoised next to the terms under
    ``kid``, the ``key_id`` of the shape (``ShapeKey``); for a shared placement
    under rule 5, its pair (progress, partner jobs) instead, whose band replaces
    the total (``_pair_band``).

    ``job`` is given only on nodes that hold pods of the pod's own job: only
    there can the answer differ (a job never shares a GPU with itself).
    """
    shared = _shared_terms(load, pod, phase, demand, job, rules=rules)
    base: float | tuple[float, frozenset[str]] | None
    if shared is None:
        base = None
    elif shared[4] is not None:
        base = shared[4]
    else:
        base = (
            WEIGHT_COMPLEMENT * shared[0]
            + WEIGHT_INTERLEAVE * shared[1]
            + WEIGHT_PACKING * shared[2]
        )
    return load.memo.remember(load.memo.base, kid, base)


def score_values(view: PlacementView, pod: Workload, node_names: Iterable[str]) -> dict[str, int]:
    """Just the 0..10 scores: the extender's hot path.

    The same numbers as ``score_nodes`` (a test pins that), written for speed:
    no NodeScore per node, memo lookups inlined, and locality precomputed for the
    few nodes and NVLink domains that hold peers of the pod's job.
    """
    if pod.gpus <= 0:
        return dict.fromkeys(node_names, 0)
    ctx = _PodContext.of(view, pod)
    phase, gpus = ctx.phase, pod.gpus
    rules = view.rules
    sharing = (pod.priority, pair_traits(pod), pod.loads_through_gate, rules)
    # Weighted locality per node holding peers, and per domain for the rest.
    near: dict[str, float] = {}
    in_domain: dict[str | None, float] = {}
    if ctx.peers_total:
        for domain, count in ctx.peers_domain.items():
            in_domain[domain] = WEIGHT_LOCALITY * min(1.0, DOMAIN_CREDIT * count / ctx.peers_total)
        for node_name in ctx.peers_here:
            load = view.load(node_name)
            if load is not None:
                near[node_name] = WEIGHT_LOCALITY * ctx.locality(load)
        far = 0.0
    else:
        far = WEIGHT_LOCALITY * NEUTRAL
    # capacity -> (demand, too big, and the key_id of the shape on nodes without
    # and with peers of the pod's job): once per GPU size, not per node.
    demands: dict[int, tuple[int, bool, int, int]] = {}
    out: dict[str, int] = {}
    get_load = view.load_getter()
    peers_here = ctx.peers_here
    for name in node_names:
        load = get_load(name)
        if load is None or not load.node.schedulable:
            out[name] = 0
            continue
        cap = load.capacity_mib
        found = demands.get(cap)
        if found is None:
            need, too_big = ctx.demand(cap)
            found = demands[cap] = (
                need,
                too_big,
                key_id((phase, need, gpus, "", sharing)),
                key_id((phase, need, gpus, pod.job, sharing)),
            )
        if found[1]:
            out[name] = 0
            continue
        own = name in peers_here
        kid = found[3] if own else found[2]
        bases = load.memo.base
        base = (
            bases[kid]
            if kid in bases
            else _base(load, pod, phase, found[0], pod.job if own else "", kid=kid, rules=rules)
        )
        if base is None:
            out[name] = 0
            continue
        if isinstance(base, tuple):  # rule 5: a shared placement scores in its band
            total = _pair_band(base, ctx.partners)
        else:
            loc = near.get(name)
            if loc is None:
                rack = load.node.nvlink_domain
                loc = in_domain.get(rack, far) if rack else far
            total = base + loc
        score = int(total + 0.5)
        out[name] = score if score <= MAX_SCORE else MAX_SCORE
    return out


def best_nodes(view: PlacementView, pod: Workload, node_names: Iterable[str]) -> list[str]:
    """The named nodes with the highest 0..10 score, ties kept, in the order given.

    The extender's filter answers with these, so kube-scheduler ranks only the
    nodes RLix rates best: its own score plugins then break RLix's ties (and
    when one node is left it skips scoring altogether), and no prioritize call
    is needed, since its score would be the same for every node it is sent.
    """
    scores = score_values(view, pod, node_names)
    top = max(scores.values(), default=0)
    return [name for name, score in scores.items() if score == top]


def score_nodes(
    view: PlacementView, pod: Workload, node_names: Iterable[str]
) -> Mapping[str, NodeScore]:
    """Score every named node; unknown nodes score 0 (the filter already said why)."""
    ctx = _PodContext.of(view, pod)
    out: dict[str, NodeScore] = {}
    for name in node_names:
        load = view.load(name)
        out[name] = (
            _score(ctx, load, view.rules)
            if load is not None
            else NodeScore(node=name, score=0, feasible=False)
        )
    return out
