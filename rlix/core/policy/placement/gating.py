"""The phase gate: at the start of a busy phase, a pod waits for its co-runner's
phase to end rather than run beside it where that would deliver less (issue 16).

Under the measured H200 matrix two busy phases on one GPU make 0.90-0.95 GPUs
of progress together, while running them one after the other makes 1.0. So
a pod about to enter a phase on a GPU where another pod is working enters only
if that adds progress on the GPU (``gains_by_entering``), and otherwise waits,
holding its memory, until the other's phase ends. Copies beside kernels
(weight sync) and a rollout waiting on tools beside anything still co-run:
there both make progress.

For jobs busy the whole cycle the gate only turns contention into turns.
Its gain is for pods that idle part of their cycle -- a disaggregated job's
rollout pool while its trainer pool works, and the other way round. Two such
pods on one GPU, gated, fall into step so that each works while the other
idles (the co-execution that RollMux builds its groups around), instead of
meeting in their busy phases at random. ``gated_rates`` estimates what such
a pair makes by playing their declared cycles out under the gate; the sharing
rules use it for pairs whose pods both idle part of their cycle.

The simulator's engine applies the same ``gains_by_entering`` at every phase
start, between pods that take turns (``sharing.takes_turns``). In a cluster
the node agent applies it (``--phase-gate``) where a trainer already waits at
its safe points, the client library's phase boundaries; ``turns`` keeps who
works and who waits on a node, and which pairs take turns by the cycles pods
declare (docs/node-agent.md, "The phase gate").
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from rlix.core.phases import Shape, shape_of
from rlix.core.snapshot import PhaseLoad

if TYPE_CHECKING:
    from rlix.core.policy.placement.sharing import SharingRules

# (shape, pressure) of a pod working on a GPU now.
Busy = tuple[Shape, float]

# ``gated_rates`` plays the two cycles out from these offsets of the second
# one (shares of its cycle) and averages: where the pair settles depends on
# how it starts. It warms up for two of the longer cycles and measures eight.
_OFFSETS: Final = (0.0, 0.25, 0.5, 0.75)
_WARM_CYCLES: Final = 2.0
_MEASURED_CYCLES: Final = 8.0


def rates(rules: SharingRules, residents: Sequence[Busy]) -> list[float]:
    """Each working pod's rate on one GPU: 1 / (1 + sum of the others' pressure x I)."""
    out = []
    for i, (shape, _) in enumerate(residents):
        load = sum(
            pressure * rules.slowdown(shape, other)
            for j, (other, pressure) in enumerate(residents)
            if j != i
        )
        out.append(1.0 / (1.0 + load))
    return out


def gains_by_entering(rules: SharingRules, entering: Busy, holders: Sequence[Busy]) -> bool:
    """Whether a pod entering a phase beside ``holders`` (working pods on the same
    GPU) makes the GPU deliver more progress than the holders alone."""
    if not holders:
        return True
    return sum(rates(rules, [*holders, entering])) > sum(rates(rules, holders))


def idles(profile: tuple[PhaseLoad, ...]) -> bool:
    """Whether a load profile has idle segments (a pod that waits for its other pool)."""
    return any(shape_of(s.phase) is Shape.NONE and s.share > 0 for s in profile)


class _Cycle:
    """One pod's declared cycle as the gate plays it: segments of alone seconds."""

    __slots__ = ("done", "entered", "i", "left", "segments", "since")

    def __init__(self, profile: tuple[PhaseLoad, ...], seconds: float, offset: float) -> None:
        self.segments = [
            (shape_of(s.phase), s.share * seconds, s.pressure) for s in profile if s.share > 0
        ]
        total = sum(d for _, d, _ in self.segments)
        at, self.i = offset * total, 0
        while at >= self.segments[self.i][1]:
            at -= self.segments[self.i][1]
            self.i = (self.i + 1) % len(self.segments)
        self.left = self.segments[self.i][1] - at
        self.entered = offset > 0 or self.shape is Shape.NONE  # mid-segment: it holds
        self.since = 0.0
        self.done = 0.0

    @property
    def shape(self) -> Shape:
        return self.segments[self.i][0]

    @property
    def working(self) -> bool:
        return self.entered and self.shape is not Shape.NONE

    def busy(self) -> Busy:
        return self.shape, self.segments[self.i][2]

    def next_segment(self, t: float) -> None:
        self.i = (self.i + 1) % len(self.segments)
        self.left = self.segments[self.i][1]
        self.entered = self.shape is Shape.NONE
        self.since = t


def _play(
    rules: SharingRules, a: _Cycle, b: _Cycle, warm: float, end: float
) -> tuple[float, float]:
    t = 0.0
    pair = (a, b)
    while t < end:
        for c in sorted(pair, key=lambda c: c.since):  # the longer wait decides first
            if not c.entered:
                other = b if c is a else a
                holders = [other.busy()] if other.working else []
                c.entered = gains_by_entering(rules, c.busy(), holders)
        speed = {}
        working = [c for c in pair if c.working]
        for c in pair:
            if not c.entered:
                speed[id(c)] = 0.0
            elif c.shape is Shape.NONE:
                speed[id(c)] = 1.0
            else:
                others = [o.busy() for o in working if o is not c]
                speed[id(c)] = rates(rules, [c.busy(), *others])[0]
        step = min(c.left / speed[id(c)] for c in pair if speed[id(c)] > 0)
        step = min(step, end - t) if t >= warm else min(step, warm - t)
        for c in pair:
            moved = speed[id(c)] * step
            c.left -= moved
            if t >= warm:
                c.done += moved
        t += step
        for c in pair:
            if c.left <= 1e-9 * max(1.0, c.segments[c.i][1]):
                c.next_segment(t)
    return a.done / (end - warm), b.done / (end - warm)


@functools.cache
def gated_rates(
    rules: SharingRules,
    mine: tuple[PhaseLoad, ...],
    theirs: tuple[PhaseLoad, ...],
    my_s: float,
    their_s: float,
) -> tuple[float, float]:
    """Each pod's mean rate (alone-seconds per second) when the two share a GPU
    under the gate: their declared cycles (``my_s``, ``their_s`` alone seconds
    per iteration; each segment its share of that) played out against each
    other, idle segments free, a busy one entered only where
    ``gains_by_entering`` says so and otherwise waited for. Averaged over a few
    starting offsets. Needs ``rules.interference``, two profiles with a busy
    segment each, and positive iteration lengths.
    """
    if my_s <= 0 or their_s <= 0:
        raise ValueError("gated_rates needs both iteration lengths")
    warm = _WARM_CYCLES * max(my_s, their_s)
    end = warm + _MEASURED_CYCLES * max(my_s, their_s)
    mean_a = mean_b = 0.0
    for offset in _OFFSETS:
        ra, rb = _play(rules, _Cycle(mine, my_s, 0.0), _Cycle(theirs, their_s, offset), warm, end)
        mean_a += ra / len(_OFFSETS)
        mean_b += rb / len(_OFFSETS)
    return mean_a, mean_b
