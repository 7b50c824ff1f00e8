"""The best pairing of a mix's pods: how much two-per-GPU sharing can add to a whole mix.

The pair ceiling (``metrics.pair_ceiling``) is the best expected progress of
*any* two pod kinds of a mix on one GPU; multiplying all of the mix's work by
it pretends every pod finds that best partner all the time. On a mix whose
pods pair well only with a few kinds (on ``disaggregated``, two 14B or 32B
trainer or rollout pods never fit one GPU together, while the 1.5B and 7B
pods pair with everything), that partner runs out long before the work does.

**The programme.** Pod kinds k (priority, declared load profile, iteration
length, peak memory, as in ``pair_ceiling``) carry work W_k: the
GPU-seconds their pods need alone (pod GPUs x the job's alone seconds). A
GPU-second spent on pair (k, l) advances k by r_k and l by r_l, rule 5's own
expectation (``sharing.pair_rates``), where the two fit one GPU's memory at
their peaks (both stay resident whether they drift or take turns under the
gate, so the GPU must hold both; ``sharing.kinds_may_pair`` asks the same),
are of one class, and deliver more than one GPU (``r_k + r_l > 1``); a
GPU-second alone advances its kind by 1. The least total GPU-time that
covers every kind's work,

    minimise  sum_p x_p + sum_k y_k
    s.t.      sum_{p containing k} r_k(p) x_p + y_k >= W_k   for every kind k,
              x, y >= 0,

gives the factor F = sum_k W_k / optimum: what two-per-GPU sharing can make
of the mix's work *as a whole*, between 1 (no pair pays) and the pair
ceiling (every pod always with its best partner). It ignores time (who is
there when), gangs (a job moves at its slowest GPU) and drift from the
declared cycles, so like the ceiling it is an estimate from above for the
policy class "at most two jobs per GPU, one class", not a proof; it is the
linear programme over co-location rates that issue 16 asks for. Solved with
HiGHS through SciPy, imported only when asked (``bench`` and ``dev`` extras).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rlix.core.phases import Shape
from rlix.core.policy.placement.sharing import SharingRules, pair_rates
from rlix.core.sim import hardware as hw
from rlix.core.sim.interference import Interference
from rlix.core.sim.workload import JobSpec, profile_for
from rlix.core.snapshot import PhaseLoad

# (priority, declared load profile, iteration seconds, peak MiB per GPU)
PodKind = tuple[int, tuple[PhaseLoad, ...], float, int]


def pod_kinds(
    jobs: Iterable[tuple[JobSpec, float]],
) -> tuple[dict[PodKind, float], dict[PodKind, set[int]]]:
    """Work (GPU-seconds alone) per pod kind, and which jobs (by position) have
    each kind, for ``(job, its alone seconds)`` pairs."""
    work: dict[PodKind, float] = defaultdict(float)
    owners: dict[PodKind, set[int]] = defaultdict(set)
    for index, (spec, alone_s) in enumerate(jobs):
        p = profile_for(spec)
        for role, gpus in zip(spec.pod_roles, spec.pod_gpus, strict=True):
            kind = (
                spec.priority,
                p.pod_load_profile(role),
                p.iteration_s,
                max(p.pod_memory_mib(role).values()),
            )
            work[kind] += gpus * alone_s
            owners[kind].add(index)
    return dict(work), dict(owners)


def paying_pairs(
    kinds: list[PodKind],
    owners: dict[PodKind, set[int]],
    interference: Interference,
    memory_mib: int,
) -> list[tuple[int, int, float, float]]:
    """(i, j, r_i, r_j) for every pair of kinds that may share a GPU and delivers more than one."""
    rules = SharingRules(interference.cells)
    shapes = frozenset[Shape]()
    out = []
    for i, (priority, mine, my_s, my_mib) in enumerate(kinds):
        for j in range(i, len(kinds)):
            other, theirs, their_s, their_mib = kinds[j]
            # Two pods of one job never count as a pair (a kind pairs with
            # itself only when two jobs have it).
            if other != priority or len(owners[kinds[i]] | owners[kinds[j]]) < 2:
                continue
            if my_mib + their_mib > memory_mib:
                continue
            rates = pair_rates(rules, (shapes, mine, my_s), (shapes, theirs, their_s))
            if rates is not None and sum(rates) > 1.0:
                out.append((i, j, rates[0], rates[1]))
    return out


def pairing_factor(
    jobs: Iterable[tuple[JobSpec, float]],
    interference: Interference,
    memory_mib: int = hw.H200_MEMORY_MIB,
) -> float:
    """Progress per GPU-second of the best pairing of the jobs' pods (>= 1; module docstring).

    ``jobs``: each job with its alone seconds (what its work is measured in).
    """
    work, owners = pod_kinds(jobs)
    kinds = sorted(work, key=repr)
    total = sum(work.values())
    pairs = paying_pairs(kinds, owners, interference, memory_mib)
    if not pairs or total <= 0:
        return 1.0
    from scipy.optimize import linprog  # the bench/dev extras only
    from scipy.sparse import coo_matrix

    n = len(kinds)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for col, (i, j, ri, rj) in enumerate(pairs):
        # A kind paired with itself gets both rates in its own row.
        entries = [(i, ri + rj)] if i == j else [(i, ri), (j, rj)]
        for row, rate in entries:
            rows.append(row)
            cols.append(col)
            vals.append(-rate)
    for k in range(n):  # alone: one GPU-second is one second of its own work
        rows.append(k)
        cols.append(len(pairs) + k)
        vals.append(-1.0)
    a_ub = coo_matrix((vals, (rows, cols)), shape=(n, len(pairs) + n)).tocsr()
    # Work in GPU-hours keeps the programme's numbers near 1.
    b_ub = [-work[k] / 3600.0 for k in kinds]
    solved = linprog(
        [1.0] * (len(pairs) + n), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs"
    )
    if solved.status != 0:
        raise RuntimeError(f"pairing programme failed: {solved.message}")
    return max(1.0, (total / 3600.0) / float(solved.fun))
