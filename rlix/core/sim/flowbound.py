"""Lower bounds on mean JCT and mean stretch that see gangs' widths and queueing.

The counting bound in ``metrics.queueing_jct_s`` replays a schedule on *one*
machine as fast as the whole cluster, so a 16-GPU job may use all 128 GPUs
and finish in an eighth of its length: queueing behind wide jobs, which is
most of what a real cluster's mean JCT is made of, costs almost nothing
there. This module keeps each job to its own width and its own speed.

**The relaxation.** Job j arrives at r_j, needs P_j units of capacity-time
(GPU-seconds held, say), and may use at most c_j units per second (its GPUs:
it cannot run faster than alone); it also cannot finish sooner than L_j
after it arrives (its alone length). The cluster gives at most C units per
second. Any real schedule -- gangs, preemption or not, on any nodes -- gives
each job some rate z_j(t) within those limits, so it is a feasible *fluid*
schedule, and a bound on every fluid schedule bounds it.

**Why C_j >= M_j + P_j / (2 c_j).** Let M_j be the mean time at which job j
received its units (the integral of t z_j(t) over P_j). At rate at most c_j
the units can be no later-concentrated than all at full rate in the last
P_j / c_j seconds before C_j, whose mean is C_j - P_j / (2 c_j). So the
weighted sum of completion times is at least that of the M's plus a
constant, and the M's are linear in z: a linear programme (the "mean busy
time" relaxation of Goemans, Queyranne, Schulz, Skutella and Wang, SIAM J.
Discrete Math. 2002, here with a rate limit per job). It is also at least
the weighted sum of r_j + L_j; the bound is the larger of the two sums
(taking the larger per job inside the programme was 0.3% tighter on
small-lab and 5-30 times slower to solve).

**Time slots.** [0, H] is cut into ``slots`` equal slots; z_jk is job j's
units in slot k, at most c_j x (the part of the slot after r_j), all slots
together at most C x the slot's length. A unit in slot k is charged the
slot's start (or r_j, if later): never later than it really ran, so the
programme's optimum is a lower bound, at most about half a slot below the
continuous one. The last slot is open-ended (no capacity limit, charged its
start), so the horizon H limits nothing; it only sets where slots are fine.

The programme is solved with HiGHS through SciPy (``scipy.optimize.linprog``),
imported only when a bound is asked for: SciPy comes with the ``bench`` and
``dev`` extras, never with the client's base install.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_SLOTS = 2400


@dataclass(frozen=True, slots=True)
class FlowJob:
    """One job as the relaxation sees it (units: whatever ``capacity`` counts)."""

    arrival_s: float
    work: float  # units of capacity-time it needs (e.g. GPU-seconds)
    rate: float  # most units per second it can use (e.g. its GPUs)
    length_s: float  # the least time from arrival to finish (e.g. alone duration)
    weight: float = 1.0  # its weight in the objective (1: JCT; 1 / length: stretch)

    def __post_init__(self) -> None:
        if not (self.work > 0 and self.rate > 0 and self.length_s >= self.work / self.rate - 1e-9):
            raise ValueError(f"FlowJob needs work > 0, rate > 0 and length >= work / rate: {self}")


def min_weighted_flow_s(
    jobs: Sequence[FlowJob], capacity: float, slots: int = DEFAULT_SLOTS
) -> float:
    """A lower bound on sum_j weight_j x (finish_j - arrival_j) over every
    schedule of ``jobs`` that gives them at most ``capacity`` units per second.

    Divide by the number of jobs for the mean (JCT with weight 1, stretch
    with weight 1 / the length the stretch is measured against).
    """
    if not jobs:
        return 0.0
    if capacity <= 0:
        raise ValueError("capacity must be positive")
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    n = len(jobs)
    arrival = np.array([j.arrival_s for j in jobs])
    work = np.array([j.work for j in jobs])
    rate = np.minimum(np.array([j.rate for j in jobs]), capacity)
    length = np.array([j.length_s for j in jobs])
    weight = np.array([j.weight for j in jobs])
    scale = float(weight.max())
    if scale <= 0:
        return 0.0
    w = weight / scale  # weights near 1 keep the simplex well conditioned
    # Fine where schedules live: every job could be done by then, one after another
    # at the cluster's speed after the last arrival (the last slot is open-ended).
    horizon = float(arrival.max() + work.sum() / capacity + length.max())
    edges = np.linspace(0.0, horizon, slots + 1)
    first = np.clip(np.searchsorted(edges, arrival, side="right") - 1, 0, slots - 1)
    count = slots - first
    job = np.repeat(np.arange(n), count)
    offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    slot = first[job] + offset
    start = np.maximum(edges[slot], arrival[job])
    # z_jk: job j's units in slot k, at most its rate x the part of the slot
    # after its arrival (the open-ended last slot: no limit), charged w_j x the
    # slot's start / P_j (its share of M_j).
    span = np.where(slot == slots - 1, np.inf, edges[np.minimum(slot + 1, slots)] - start)
    m = len(job)
    cols = np.arange(m)
    finite = slot < slots - 1
    shared = coo_matrix(
        (np.ones(finite.sum()), (slot[finite], cols[finite])), shape=(slots - 1, m)
    ).tocsr()
    solved = linprog(
        w[job] * start / work[job],
        A_ub=shared,
        b_ub=capacity * np.diff(edges)[:-1],
        A_eq=coo_matrix((np.ones(m), (job, cols)), shape=(n, m)).tocsr(),
        b_eq=work,
        bounds=np.column_stack([np.zeros(m), rate[job] * span]),
        method="highs-ds",
    )
    if solved.status != 0:
        raise RuntimeError(f"flow-time bound: the linear programme failed: {solved.message}")
    busy = float(solved.fun + (w * (work / (2.0 * rate) - arrival)).sum())
    # Each job also takes its whole length: the larger of the two sums bounds it.
    return scale * max(busy, float((w * length).sum()))
