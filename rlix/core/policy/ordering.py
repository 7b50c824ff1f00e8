"""Who goes first inside a priority class: the least work left, except a job that sets the finish.

Priority classes are the user's word and stay strict. Inside one class, FIFO
makes every short job wait behind whatever arrived before it, and mean job
completion time is set by that wait, not by running time. Shortest remaining
work first (SRPT, the order that minimises mean completion time on one machine)
removes most of it; Tiresias (NSDI '19) makes the same argument for training
jobs. RLix can afford the preemptive half of it because parking a job in place
costs a host copy, not lost work.

Three guards keep the order honest:

* **Starting the longest job late sets the finish of the batch.** A job whose
  own remaining length is at least the time the cluster needs to drain its
  whole backlog (``is_critical``) goes first in its class: it would set the
  makespan if started later (LPT's reason), and nothing that short jobs gain is
  worth more than that. A critical job is never parked for a job of its class.
* **A job that would outlast its partners runs alone.** Where the sharing
  rules carry an interference matrix, a job is also critical when its length
  left reaches the time the cluster needs to drain the work of the jobs it may
  share GPUs with (``short_of_partners``): least work first would pair the
  small jobs among themselves and leave it to run alone at the end.
* **Parking churns.** A waiting job parks a running job of its own class only
  when that job has more than ``DISPLACE_RATIO`` times its work left
  (``displaces``), so each park at least halves the remaining work in front.

Classes are strict once a job has waited its **grace** (``precedence``). Until
then a waiting job queues at the lowest class's place, by its size like any
job there: for the top class a tenth of its own expected length
(``TOP_GRACE``), for the classes between twice its length (``CLASS_GRACE``).
Strict classes from the first second make every short low-priority job wait
behind every long high-priority one: on the simulator's mixed-tenants mix the
sweeps (priority 0) waited a mean of 24 times their length, and the mean JCT
of all jobs was 3.2 times the priority-blind default scheduler's. With the
grace a top-class job still finishes within about 1.1 times its length (it
parks lower classes when its grace ends; a running job always holds its own
class), and short jobs of every class pass through first
(docs/simulator.md, "Grace before precedence"). A job of unknown size has no
grace: its class applies at once. The shares are settings (``Grace``: the
operator's ``--top-grace`` and ``--class-grace``, ``SimConfig.grace``);
``STRICT`` has no grace at all.

**Aging** (off by default, ``Grace.aging``: the operator's ``--aging``) is the
other end of the wait. Least work first starves the longest jobs while shorter
ones keep arriving: on the simulator's agentic mix RLix's p95 JCT is twice
gang-binpack's. A sized waiting job that has waited ``aging`` times its
expected length alone (``is_aged``) goes first in its class as a critical job
does, and once it runs its class does not park it (``reported_left``). It
parks nobody for it: a form that let it park its class (a one-off) churned,
cost agentic 21% of its mean JCT for the same p95, and lost on small-lab. It
buys the tail back with some of the mean (docs/simulator.md, "Aging"),
which is a team's choice, hence a setting.

Work is measured in expected GPU-seconds left (the job's GPUs x its expected
alone seconds left, from what it declares, never from how a run will go: in
the simulator its shape, on a cluster its RLJob's ``spec.iterations`` and
phase profile, see ``planned_work_left``). Zero
means unknown: such a job keeps arrival order, goes ahead of jobs whose size is
known (a job that declares nothing is never delayed by those that do), and is
never parked for, nor parks, a job of its own class. A cluster whose RLJobs declare no size
therefore keeps its FIFO order exactly.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# A same-class park must at least halve the work in front of the waiting job.
DISPLACE_RATIO = 2.0
# How long a waiting job queues at the lowest class's place before its own
# class applies, as a share of its expected length alone: the top class's
# (issue 16's stretch target is 1.2, and loading, restoring and sharing take
# some of it), and every other class's above the lowest.
TOP_GRACE = 0.1
CLASS_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class Grace:
    """A waiting job's place over time, as shares of its expected length alone.

    The grace: ``top`` for the highest class present, ``between`` for every
    class between it and the lowest. ``Grace(0, 0)`` (``STRICT``) makes classes
    strict from a job's first second (the operator's ``--top-grace 0
    --class-grace 0``). ``aging``: after waiting this share a job goes first in
    its class (0, the default: never)."""

    top: float = TOP_GRACE
    between: float = CLASS_GRACE
    aging: float = 0.0

    def __post_init__(self) -> None:
        for name, share in (("top", self.top), ("between", self.between), ("aging", self.aging)):
            if not (math.isfinite(share) and share >= 0):
                raise ValueError(f"the grace's {name} share must be a number >= 0, got {share}")


DEFAULT_GRACE = Grace()
STRICT = Grace(0.0, 0.0)


class ShareError(argparse.ArgumentTypeError, ValueError):
    """A grace share that is not a number >= 0; argparse prints its message as is."""


def parse_share(text: str) -> float:
    """A grace share as a command line gives it (``--top-grace``, ``--class-grace``:
    ``type=parse_share``)."""
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not (math.isfinite(share) and share >= 0):
        raise ShareError(
            f"{text!r} is not a share: give a number >= 0 (0: no grace), e.g. 0.1 or 2"
        )
    return share


def class_key(
    priority: int, work_left: float, critical: bool, arrival: float
) -> tuple[object, ...]:
    """Sort key: priority (high first), then critical, then unknown size by arrival,
    then least work left, then arrival."""
    known = work_left > 0
    return (-priority, not critical, known, work_left if known else 0.0, arrival)


def grace_s(
    priority: int, top: int, lowest: int, alone_s: float, *, shares: Grace = DEFAULT_GRACE
) -> float:
    """Seconds a waiting job of ``priority`` queues at the ``lowest`` class's
    place before its own class applies; ``top`` is the highest class present.
    Zero for the lowest class (it is there already) and for an unknown length (0)."""
    if priority <= lowest or alone_s <= 0:
        return 0.0
    return (shares.top if priority >= top else shares.between) * alone_s


def aging_s(alone_s: float, *, shares: Grace = DEFAULT_GRACE) -> float:
    """Seconds a waiting job waits before it has aged (``Grace.aging`` of its
    expected length alone); 0: never (aging off, or an unknown length)."""
    return shares.aging * alone_s if shares.aging > 0 and alone_s > 0 else 0.0


def is_aged(waited_s: float, alone_s: float, *, shares: Grace = DEFAULT_GRACE) -> bool:
    """Whether a job that waited ``waited_s`` has aged (``aging_s``)."""
    span = aging_s(alone_s, shares=shares)
    return span > 0 and waited_s >= span


def precedence(
    priority: int,
    top: int,
    lowest: int,
    waited_s: float,
    alone_s: float,
    *,
    shares: Grace = DEFAULT_GRACE,
) -> int:
    """The class a waiting job queues and parks in: ``lowest`` within its grace
    (``grace_s``), its own after. Only for ordering a queue: a running job
    holds its own class, so a job admitted within its grace is never parked
    for being in it."""
    return lowest if waited_s < grace_s(priority, top, lowest, alone_s, shares=shares) else priority


def displaces(priority: int, work_left: float, their_priority: int, their_left: float) -> bool:
    """Whether a job (``priority``, ``work_left``) may take GPUs from a running one.

    Always from a lower class; inside its class only when both sizes are known
    and the other has more than ``DISPLACE_RATIO`` times its work left (a
    critical or aged job reports 0, unknown, so it is never displaced by its
    class).
    """
    if their_priority != priority:
        return their_priority < priority
    return work_left > 0 and DISPLACE_RATIO * work_left < their_left


def is_critical(alone_left_s: float, backlog_gpu_s: float, gpus: int) -> bool:
    """Whether a job's own remaining length reaches the backlog's drain time.

    ``backlog_gpu_s`` is the expected GPU-seconds left of every job that has
    arrived and is not done; the cluster cannot drain it in less than that over
    its ``gpus``. A job at least that long sets the finish unless it runs now.
    """
    return gpus > 0 and alone_left_s > 0 and alone_left_s >= backlog_gpu_s / gpus


def reported_left(work_left: float, critical: bool) -> float:
    """The work left a running job's pods show its class: none while it would
    set the finish, or once it has aged (pass ``critical or aged``), so that no
    job of its class parks it (``displaces``)."""
    return 0.0 if critical else work_left


@dataclass(frozen=True, slots=True)
class Partners:
    """Who may share GPUs with whom, for ``critical_jobs``: each job's kind
    (jobs of one kind have the same partners) and whether two kinds may pair
    (``placement.sharing.kinds_may_pair`` under the policy's rules)."""

    kind_of: Mapping[Hashable, Hashable]
    pair: Callable[[Hashable, Hashable], bool]


def critical_jobs(
    work: Mapping[K, tuple[float, int]], gpus: int, partners: Partners | None = None
) -> frozenset[K]:
    """The jobs (key -> (expected GPU-seconds left, GPUs)) that would set the finish.

    Each is judged by ``is_critical`` against the backlog of all of them. A job
    of unknown size (0) is never critical and adds nothing to the backlog, so
    where such jobs run, more jobs look critical than are: they go first and
    are not parked for their class, which is arrival order's side.

    With ``partners``, a job is also critical when it would outlast its
    partners (``short_of_partners``).
    """
    backlog = sum(left for left, _ in work.values())
    found = frozenset(
        k for k, (left, g) in work.items() if g > 0 and is_critical(left / g, backlog, gpus)
    )
    if partners is None:
        return found
    return found | short_of_partners(work, gpus, partners)


def short_of_partners(
    work: Mapping[K, tuple[float, int]], gpus: int, partners: Partners
) -> frozenset[K]:
    """The jobs that would run alone if started later: ``is_critical`` against
    the backlog of the jobs they may share GPUs with, not of all jobs.

    Sharing pays only beside a partner. Least work first runs the small jobs,
    which pair with anything, first and among themselves, and leaves the long
    jobs that pair only with them to run alone at the end: a job whose own
    length left reaches the time the cluster needs to drain its partners' work
    goes first while they are still there. A job with no partner left gains
    nothing by going first (it runs alone whenever it runs) and is left to
    the order.
    """
    kind_of, pair = partners.kind_of, partners.pair
    by_kind: dict[Hashable, float] = {}
    for k, (left, _) in work.items():
        h = kind_of[k]
        by_kind[h] = by_kind.get(h, 0.0) + left
    supply = {h: sum(w for o, w in by_kind.items() if pair(h, o)) for h in by_kind}
    out = []
    for k, (left, g) in work.items():
        h = kind_of[k]
        theirs = supply[h] - (left if pair(h, h) else 0.0)  # not its own work
        if g > 0 and theirs > 0 and is_critical(left / g, theirs, gpus):
            out.append(k)
    return frozenset(out)


def planned_work_left(
    gpus: int, planned: int, done: int, spent_s: float, declared_s: float
) -> float:
    """Expected GPU-seconds left of a job that plans ``planned`` iterations (0: unknown).

    Seconds per iteration come from the job itself once it has finished one
    (``spent_s`` over ``done``: the time its trainer reported working),
    before that from ``declared_s`` (0: none declared, so unknown). A job at or
    past its plan still has its current iteration to run, so it counts one.
    """
    per_iteration = spent_s / done if done > 0 and spent_s > 0 else declared_s
    if gpus <= 0 or planned <= 0 or per_iteration <= 0:
        return 0.0
    return gpus * max(planned - done, 1) * per_iteration
