"""Who may share a GPU with whom: RLix's co-execution rules (issue 16).

Memory fit alone (``loads``) lets any pod onto any GPU with room. The
simulator showed what that costs: admission piled 2-5 jobs on a GPU; a gang
moves at its slowest GPU, so a job sharing each of its GPUs with a different
partner runs at the pace of the worst one; high-priority jobs ran at half speed
beside low-priority ones; and under the interference measured on an H200 two
saturating phases on one GPU deliver *less* than one GPU's progress (0.90-0.95),
so every such co-location lowers the cluster's capacity. The rules:

1. **A bounded number of jobs per GPU** (``max_jobs_per_gpu``, default 2).
   Progress per co-runner falls with each one added (the model's rate is
   ``1 / (1 + sum of co-runners' slowdowns)``), while the gain of overlap comes
   from filling *one* partner's idle half.
2. **Gang-aligned pairs.** A pod takes GPUs that all hold the same set of jobs
   (all empty, or all shared with the same partner): a gang moves at its
   slowest GPU, so one partner over all of them costs no more than one, and
   different partners per GPU add up their worst moments. ``groups`` returns
   the candidate GPU sets; a pod's GPUs come from one of them.
3. **Only within a priority class.** A job never shares a GPU with a job of
   another priority: a high-priority job is never slowed by a lower one, and a
   low-priority job never sits where a high one would have to share.
4. **A protected class is never slowed beyond a bound.** Jobs of priority >=
   ``protected_priority`` share only where the interference model's worst case
   keeps their stretch <= ``max_protected_stretch`` (1.2), else they get
   whole GPUs (or wait, or preempt, as before).
5. **Share only where the pair pays** (``interference`` given): two jobs may
   share only when, whatever phases they are in, the model says the pair
   delivers at least ``min_pair_progress`` (``PAYING_PAIR``, 4/3) of one GPU's
   progress. Below 1, running them one after the other is faster for both.
   Below 4/3 the pair still costs its own jobs time on average: two jobs of
   lengths a <= b, one after the other, finish at a and a + b; sharing at a
   rate r each, they finish at a / r and a / r + b - a, sooner in sum only
   when r > 2/3, a pair delivering more than 4/3 (docs/simulator.md, rule 5,
   has what the threshold moved under both matrices). The cycle of a job is
   every phase it declares memory for, so the worst case is over all of its
   busy shapes. Where both jobs declare a load profile
   (``Workload.load_profile``: each segment's share of the iteration and the
   pressure it puts on a co-runner), the pair is judged by its *expected*
   progress over the two cycles instead (``expected_rates``): the worst
   moment holds only while both sit in their heaviest phases, and a rollout
   waiting on tools presses far less than a GEMM. Rule 4 then also needs the
   expected stretch within the bound, on top of the worst case as before.
6. **Both peaks on one GPU** (``interference`` given, ``joinable``): a pair
   judged by what it makes beside each other must be able to run beside each
   other; the filter's reservation (a resident's current and next phase)
   alone would let a pod in that meets the resident's peak one phase later.
   Where the node agent parks at the gate (``parks_at_gate``, the agent's
   ``--park-at-gate``), pods that take turns (``takes_turns``) never work
   at once: the one that does not work is parked, so such a GPU needs the
   larger peak and a CUDA context for each other pod (``needed_mib``), not
   every peak.

Rule 5 decides how much RLix shares at all: under the measured H200 matrix
(``MEASURED_H200``) no pair of compute/memory-bound phases passes it (a GEMM
beside a GEMV: 0.95 GPUs of progress), so RLix places gangs on whole GPUs and
keeps its in-place suspension; under the literature-based matrix
(``ASSUMED``) a compute/memory pair passes (1.48) and a same-shape pair
(1.0) does not, so jobs that declare both phases share there only where their
load profiles expect 4/3. The numbers are the simulator's
(``rlix.core.sim.interference`` builds its matrices from the cells here), so
the policy decides with the model it is measured under.

``DEFAULT_RULES``, what the extender, the operator and the conductor use, has
no matrix (rules 1-3 only): no matrix has been measured for a cluster's own
GPUs and kernels. ``SharingRules()`` itself defaults to the measured H200
matrix, which is what the benchmark's RLix decides with. Where no matrix was
measured, ``TIME_SLICING_CELLS`` (what time-slicing allows on any GPU, a
bound) turns rules 4-6 on without one (``--interference time-slicing``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from rlix.core.phases import Shape, shape_of
from rlix.core.policy.placement.gating import gated_rates, idles
from rlix.core.snapshot import PhaseLoad, Workload

BUSY_SHAPES: Final = (Shape.COMPUTE, Shape.MEMORY, Shape.NETWORK)

# Rule 5's threshold: the least progress (GPUs' worth) a pair must deliver for
# sharing to finish its two jobs sooner on average than one after the other.
PAYING_PAIR: Final = 4.0 / 3.0

# What a pod parked at the gate still holds on its GPU: its CUDA context (and
# the allocator's bookkeeping), which the agent's in-place park leaves behind.
# 1 GiB covers a context on current GPUs (a few hundred MiB) with margin.
CONTEXT_MIB: Final = 1024

# I[victim][co-runner]: the slowdown one full-pressure co-runner inflicts.
Cells = tuple[tuple[Shape, Shape, float], ...]


def cells_of(rows: Mapping[Shape, Mapping[Shape, float]]) -> Cells:
    return tuple((a, b, float(rows[a][b])) for a in BUSY_SHAPES for b in BUSY_SHAPES)


# Two processes on one H200 under CUDA time-slicing: bench/results/gpu_interference.json
# (hack/gpu-interference.py). The default model of the simulator and of the policy.
MEASURED_H200_CELLS: Final = cells_of(
    {
        Shape.COMPUTE: {Shape.COMPUTE: 1.157, Shape.MEMORY: 0.573, Shape.NETWORK: 0.007},
        Shape.MEMORY: {Shape.COMPUTE: 2.17, Shape.MEMORY: 1.228, Shape.NETWORK: 0.041},
        Shape.NETWORK: {Shape.COMPUTE: 0.0, Shape.MEMORY: 0.003, Shape.NETWORK: 0.885},
    }
)
# Co-location studies (POD-Attention, NanoFlow, MuxServe, RollMux): an assumption.
ASSUMED_CELLS: Final = cells_of(
    {
        Shape.COMPUTE: {Shape.COMPUTE: 1.0, Shape.MEMORY: 0.3, Shape.NETWORK: 0.1},
        Shape.MEMORY: {Shape.COMPUTE: 0.4, Shape.MEMORY: 1.0, Shape.NETWORK: 0.1},
        Shape.NETWORK: {Shape.COMPUTE: 0.1, Shape.MEMORY: 0.1, Shape.NETWORK: 0.1},
    }
)
# What CUDA time-slicing allows on any GPU, measured on none: the contexts of
# two processes take turns on the SMs, so two busy phases split the GPU (each
# at half speed, one GPU's progress together, the most that time slices can
# give; the H200 above made 0.90-0.95 of it), while weight sync's copies run
# on the copy engines beside any kernel and two of them split the link. A
# bound, not a measurement: no two busy phases reach rule 5's 4/3 under it, so
# a pair shares only where its load profiles leave one of them idle, which is
# what the measured matrix lets RLix do too. For clusters without a matrix of
# their own (``--interference time-slicing``); it does not hold under MPS,
# where kernels of two processes run side by side.
TIME_SLICING_CELLS: Final = cells_of(
    {
        Shape.COMPUTE: {Shape.COMPUTE: 1.0, Shape.MEMORY: 1.0, Shape.NETWORK: 0.0},
        Shape.MEMORY: {Shape.COMPUTE: 1.0, Shape.MEMORY: 1.0, Shape.NETWORK: 0.0},
        Shape.NETWORK: {Shape.COMPUTE: 0.0, Shape.MEMORY: 0.0, Shape.NETWORK: 1.0},
    }
)


@dataclass(frozen=True)
class SharingRules:
    """The co-execution rules; hashable, so answers are memoised per rules value."""

    interference: Cells | None = MEASURED_H200_CELLS  # None: rules 4-6 are off
    max_jobs_per_gpu: int = 2
    min_pair_progress: float = PAYING_PAIR
    protected_priority: int = 100
    max_protected_stretch: float = 1.2
    # The phase gate (``gating``): pods that both idle part of their cycle and
    # declare it take turns in their busy phases where that pays over the
    # cycle. Only with an interference model; False judges them drifting.
    phase_gate: bool = True
    # Rule 6 where the node agent parks the pod that does not work at the gate
    # (``--park-at-gate``): pods that take turns need the larger peak and a
    # context each, not both peaks (``needed_mib``). Off unless the nodes do it.
    parks_at_gate: bool = False

    def __post_init__(self) -> None:
        if self.max_jobs_per_gpu < 1:
            raise ValueError(f"SharingRules.max_jobs_per_gpu = {self.max_jobs_per_gpu} < 1")
        if self.interference is not None:
            seen = {(a, b) for a, b, _ in self.interference}
            missing = [f"{a}/{b}" for a in BUSY_SHAPES for b in BUSY_SHAPES if (a, b) not in seen]
            if missing:
                raise ValueError(f"SharingRules.interference lacks {', '.join(missing)}")

    def slowdown(self, victim: Shape, other: Shape) -> float:
        assert self.interference is not None
        for a, b, value in self.interference:
            if (a, b) == (victim, other):
                return value
        raise KeyError((victim, other))

    def may_share(self, pod: Workload, resident: Workload) -> bool:
        """Whether ``pod`` may run on a GPU ``resident`` holds (rules 3-5)."""
        if pod.job and pod.job == resident.job:
            return False
        if pod.priority != resident.priority:
            return False
        return _pair_allowed(self, pair_traits(pod), pair_traits(resident), pod.priority)

    def shares_at_all(self, priority: int) -> bool:
        """Whether jobs of ``priority`` may share with anyone (rules 4-5, any phases,
        full pressure: no load profile)."""
        every: Traits = (frozenset(BUSY_SHAPES), (), 0.0)
        return _pair_allowed(self, every, every, priority)


DEFAULT_RULES: Final = SharingRules(interference=None)


def busy_shapes(w: Workload) -> frozenset[Shape]:
    """The shapes of the phases ``w`` cycles through (all busy ones when undeclared)."""
    found = frozenset(shape_of(p) for p in w.memory_mib) - {Shape.NONE}
    return found or frozenset(BUSY_SHAPES)


# What the rules read of a workload: its busy shapes, its load profile and the
# alone seconds of one iteration of it (0: unknown).
Traits = tuple[frozenset[Shape], tuple[PhaseLoad, ...], float]


def pair_traits(w: Workload) -> Traits:
    """What rules 4-5 read of ``w`` (hashable: part of the placement memo keys)."""
    return busy_shapes(w), w.load_profile, w.iteration_s


# Fixed-point steps for the wall-time shares of two drifting cycles. Each step
# is a contraction for slowdowns of the size measured (< 3.2x); 60 steps leave
# the rates converged far below 1e-6 (a test pins the fixed point).
_FIXED_POINT_STEPS: Final = 60


def expected_rates(
    rules: SharingRules, mine: tuple[PhaseLoad, ...], theirs: tuple[PhaseLoad, ...]
) -> tuple[float, float]:
    """Each job's mean rate (alone-seconds per second) when the two share a GPU.

    The two cycles are taken to drift independently: at a random instant job A
    is in segment i with probability v_i, its share of A's wall time. A's
    seconds per alone-second in segment i are 1 + sum_j v_j p_j I[s_i][s_j]
    (the model's rate ``1 / (1 + pressure x I)``, averaged over B's segments),
    so v_i is proportional to share_i times that and A's mean rate is 1 over
    the share-weighted sum; B the same way; the v's are solved together.
    Segments of shape none (idle) press on nobody and are slowed by nobody.
    """
    return _expected_rates(rules, mine, theirs)


@functools.cache
def _expected_rates(
    rules: SharingRules, mine: tuple[PhaseLoad, ...], theirs: tuple[PhaseLoad, ...]
) -> tuple[float, float]:
    def weights(profile: tuple[PhaseLoad, ...]) -> list[float]:
        total = sum(s.share for s in profile)
        return [s.share / total if total > 0 else 0.0 for s in profile]

    def coefficient(victim: PhaseLoad, other: PhaseLoad) -> float:
        a, b = shape_of(victim.phase), shape_of(other.phase)
        if a is Shape.NONE or b is Shape.NONE:
            return 0.0
        return other.pressure * rules.slowdown(a, b)

    share_a, share_b = weights(mine), weights(theirs)
    ka = [[coefficient(x, y) for y in theirs] for x in mine]
    kb = [[coefficient(y, x) for x in mine] for y in theirs]
    wall_a, wall_b = list(share_a), list(share_b)
    rate_a = rate_b = 1.0
    for _ in range(_FIXED_POINT_STEPS):
        slow_a = [1.0 + sum(v * k for v, k in zip(wall_b, row, strict=True)) for row in ka]
        slow_b = [1.0 + sum(v * k for v, k in zip(wall_a, row, strict=True)) for row in kb]
        time_a = [w * f for w, f in zip(share_a, slow_a, strict=True)]
        time_b = [w * f for w, f in zip(share_b, slow_b, strict=True)]
        rate_a, rate_b = 1.0 / (sum(time_a) or 1.0), 1.0 / (sum(time_b) or 1.0)
        wall_a = [t * rate_a for t in time_a]
        wall_b = [t * rate_b for t in time_b]
    return rate_a, rate_b


def _busy(profile: tuple[PhaseLoad, ...]) -> bool:
    return any(shape_of(s.phase) is not Shape.NONE and s.share > 0 for s in profile)


def takes_turns(
    rules: SharingRules,
    mine: tuple[PhaseLoad, ...],
    my_s: float,
    theirs: tuple[PhaseLoad, ...],
    their_s: float,
) -> bool:
    """Whether two pods on one GPU take turns in their busy phases (``gating``),
    given their load profiles and iteration lengths.

    Only where both declare a profile with idle segments and their iteration
    lengths: the gate fills one pod's idle time with the other's work, and a
    pod that never idles leaves nothing to fill (two such pods, gated, make at
    most one GPU's progress, which rule 5 never wanted). And only where playing
    the two cycles out under the gate beats letting them drift side by side
    (``expected_rates``): a long busy phase beside a short cycle can make the
    short one wait so long that co-running pays better.
    """
    return _takes_turns(rules, mine, my_s, theirs, their_s)


@functools.cache
def _takes_turns(
    rules: SharingRules,
    a: tuple[PhaseLoad, ...],
    a_s: float,
    b: tuple[PhaseLoad, ...],
    b_s: float,
) -> bool:
    if not (rules.phase_gate and rules.interference is not None and a_s > 0 and b_s > 0):
        return False
    if not (idles(a) and idles(b) and _busy(a) and _busy(b)):
        return False
    return sum(gated_rates(rules, a, b, a_s, b_s)) > sum(_expected_rates(rules, a, b))


def pair_rates(rules: SharingRules, mine: Traits, theirs: Traits) -> tuple[float, float] | None:
    """Each pod's expected rate when the two share a GPU: under the gate where
    they take turns, else drifting (``expected_rates``); None where a
    profile has no busy segment (the rules then judge the worst moment).
    Under the gate, ``takes_turns``."""
    (_, a, a_s), (_, b, b_s) = mine, theirs
    if _takes_turns(rules, a, a_s, b, b_s):
        return gated_rates(rules, a, b, a_s, b_s)
    if _busy(a) and _busy(b):
        return _expected_rates(rules, a, b)
    return None


@functools.cache
def _pair_allowed(rules: SharingRules, mine: Traits, theirs: Traits, priority: int) -> bool:
    if rules.interference is None:
        return True
    my_shapes, their_shapes = mine[0], theirs[0]
    pairs = list(itertools.product(my_shapes, their_shapes))
    expected = pair_rates(rules, mine, theirs)
    if expected is not None:
        # Phase-load-aware rule 5: the pair pays over the two cycles (gated or drifting).
        if sum(expected) < rules.min_pair_progress:
            return False
    else:
        worst = min(
            1.0 / (1.0 + rules.slowdown(a, b)) + 1.0 / (1.0 + rules.slowdown(b, a))
            for a, b in pairs
        )
        if worst < rules.min_pair_progress:
            return False
    if priority >= rules.protected_priority:
        # Rule 4: the worst case as it stands, and (with profiles) the expectation too.
        stretch = max(1.0 + max(rules.slowdown(a, b), rules.slowdown(b, a)) for a, b in pairs)
        if expected is not None:
            stretch = max(stretch, 1.0 / min(expected))
        if stretch > rules.max_protected_stretch:
            return False
    return True


# A job's pods as the partner test reads them: per distinct pod, its class,
# what rules 4-5 read of it and its peak memory per GPU. Two jobs of one kind
# have the same partners, so the test runs once per pair of kinds.
PairKind = tuple[tuple[int, Traits, int, bool], ...]


def pair_kind(pods: Iterable[Workload]) -> PairKind:
    """The partner test's view of a job's pods (``kinds_may_pair``); hashable."""
    return tuple(
        dict.fromkeys(
            (w.priority, pair_traits(w), w.peak_memory_mib, w.loads_through_gate) for w in pods
        )
    )


@functools.lru_cache(maxsize=4096)
def kinds_may_pair(rules: SharingRules, mine: PairKind, theirs: PairKind, gpu_mib: int) -> bool:
    """Whether some pod of one kind may ever share a GPU of ``gpu_mib`` with
    some pod of the other: both peaks fit together, and rules 3-5 allow the pair.

    Only where the rules carry an interference matrix: without one (the
    cluster's ``DEFAULT_RULES``) memory would call partners that never pair,
    so nobody is anybody's partner and the partner test stays off.
    """
    if rules.interference is None or rules.max_jobs_per_gpu < 2:
        return False
    return any(
        p == q
        and _pair_needs(rules, ((t, a, x), (u, b, y))) <= gpu_mib
        and _pair_allowed(rules, t, u, p)
        for p, t, a, x in mine
        for q, u, b, y in theirs
    )


def needed_mib(rules: SharingRules, pods: Iterable[Workload]) -> int:
    """What one GPU must hold for ``pods`` to run there together, each at its
    peak (rule 6): every peak, or, where the nodes park at the gate
    (``rules.parks_at_gate``) and every two of them take turns and load
    through the gate (``Workload.loads_through_gate``), the largest peak and
    a CUDA context for each of the others (the gate parks the ones that do
    not work)."""
    pods = list(pods)
    if len(pods) < 2 or not rules.parks_at_gate:
        return sum(w.peak_memory_mib for w in pods)
    return _pair_needs(
        rules, tuple((pair_traits(w), w.peak_memory_mib, w.loads_through_gate) for w in pods)
    )


def resident_mib(rules: SharingRules, pods: Iterable[Workload]) -> int:
    """What ``pods``, running on one GPU, hold there now, each in its current
    phase (``Workload.memory_in``): the sum, or, where the nodes park at the
    gate and every two of them take turns (and load through the gate), the
    largest and a CUDA context for each of the others (the gate has parked
    the ones that do not work, and holds a pod back until its memory fits)."""
    pods = list(pods)
    if len(pods) < 2 or not rules.parks_at_gate:
        return sum(w.memory_in(w.phase) for w in pods)
    return _pair_needs(
        rules, tuple((pair_traits(w), w.memory_in(w.phase), w.loads_through_gate) for w in pods)
    )


def _pair_needs(rules: SharingRules, pods: tuple[tuple[Traits, int, bool], ...]) -> int:
    """Each pod: its traits, its memory, whether it loads through the gate
    (``Workload.loads_through_gate``). Only pods that load through the gate
    take turns over memory: the gate cannot hold back a load it is not asked
    about, and one let in beside a working partner's peak would run the GPU
    out of memory."""
    peaks = [peak for _, peak, _ in pods]
    if len(pods) < 2 or not rules.parks_at_gate:
        return sum(peaks)
    turns = all(
        x and y and _takes_turns(rules, t[1], t[2], u[1], u[2])
        for (t, _, x), (u, _, y) in itertools.combinations(pods, 2)
    )
    return max(peaks) + CONTEXT_MIB * (len(pods) - 1) if turns else sum(peaks)


def joinable(
    rules: SharingRules, pod: Workload, residents: Iterable[Workload], gpu_mib: int = 0
) -> bool:
    """Whether ``pod`` may join a GPU with these residents (rules 1 and 3-5),
    and, where the rules carry a matrix and ``gpu_mib`` is known, whether its
    peak and the running residents' peaks fit the GPU together (rule 6,
    ``needed_mib``: by turns where the nodes park at the gate).

    Suspended residents are left out: parked, they slow nobody (their memory
    is still owed, which ``loads`` counts), and the conductor parks victims in
    place precisely so that a preemptor can take their GPUs. When they come
    back, their own placement must pass these rules against whoever runs there.

    Why peaks: memory is reserved for a resident's current and next phase
    (``loads.owed_mib``), but an RL job cycles through every phase each
    iteration, so a partner let in beside a resident's small phase meets its
    peak within one iteration, and then the conductor must park one of them
    (``conduct``, rule 3: physical HBM). The rules that judge pairs by their
    progress (a matrix) choose partners to run *beside*, so they ask what
    ``kinds_may_pair`` asks: both peaks on one GPU. Without a matrix (the
    cluster's ``DEFAULT_RULES``) phase complementarity with parking stays as
    it was.
    """
    jobs: set[str] = set()
    running: list[Workload] = []
    for r in residents:
        if r.suspended:
            continue
        if not rules.may_share(pod, r):
            return False
        running.append(r)
        jobs.add(r.job or r.name)
    # Rule 6 only where it applies: the default rules' filter path sums nothing.
    by_peaks = rules.interference is not None and gpu_mib > 0 and pod.peak_memory_mib > 0
    if by_peaks and jobs and needed_mib(rules, [pod, *running]) > gpu_mib:
        return False
    return len(jobs) < rules.max_jobs_per_gpu


def pair_progress(rules: SharingRules, pod: Workload, residents: Iterable[Workload]) -> float:
    """The GPUs' worth of progress ``pod`` and the running residents of one GPU
    are expected to make together (``pair_rates`` over both load profiles,
    gated or drifting): what the rule-5 scoring ranks partners by. A resident
    without a busy load profile counts as ``min_pair_progress`` (all rule 5
    says of it); with several residents the worst pair counts. Needs
    ``rules.interference``.
    """
    worst: float | None = None
    mine = pair_traits(pod)
    for r in residents:
        if r.suspended:
            continue
        expected = pair_rates(rules, mine, pair_traits(r))
        value = rules.min_pair_progress if expected is None else sum(expected)
        worst = value if worst is None else min(worst, value)
    return 1.0 if worst is None else worst
