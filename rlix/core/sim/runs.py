"""The simulator's mutable per-job state and where a job stands in its timeline.

Progress is measured in *seconds of running alone*: a job alone on its GPUs
advances one per wall second; a job sharing GPUs advances at its interference
rate. Between events the rate is constant, so a job that runs alone needs one
event (its completion), not one per phase: that is what lets baselines with
exclusive GPUs simulate thousands of jobs in seconds.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field

from rlix.core.phases import Phase
from rlix.core.policy.ordering import reported_left
from rlix.core.sim.workload import (
    ITERATION_PHASES,
    ROLE_ACTIVE,
    SEGMENTS_PER_ITERATION,
    JobProfile,
    JobSpec,
    Timeline,
)
from rlix.core.snapshot import Workload


class State(enum.Enum):
    QUEUED = "queued"
    LOADING = "loading"  # placed; loading a checkpoint or restoring parked memory
    RUNNING = "running"
    SUSPENDED = "suspended"  # memory parked in host RAM, off the GPUs
    DONE = "done"


@dataclass(slots=True)
class Run:
    """One job as the simulator tracks it."""

    spec: JobSpec
    profile: JobProfile
    id: int
    state: State = State.QUEUED
    timeline: Timeline | None = None
    progress: float = 0.0  # alone-seconds done, as of ``t_ref``
    rate: float = 0.0
    t_ref: float = 0.0
    version: int = 0  # bumps invalidate stale events in the heap
    seg: int = 0  # current segment while stepping (shared) jobs
    stepping: bool = False  # has co-runners: one event per segment
    placements: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    delay: float = 0.0  # load/restore time owed at the next start
    parked_bytes: float = 0.0
    suspended_at: float = 0.0
    suspended_s: float = 0.0
    resumed_at: float | None = None  # last resume (the conductor spares a fresh one)
    preempted: int = 0
    lost_s: float = 0.0  # alone-seconds of work lost to evictions
    # Expected GPU-seconds of the whole job from its declared shape (0: the
    # scheduler does not order by size), and whether, as of the last
    # scheduling pass, it would set the finish if started later
    # (``rlix.core.policy.ordering``).
    work_gpu_s: float = 0.0
    critical: bool = False
    # The class a queued job's place in the queue comes from while its grace
    # lasts (None: its own; ``ordering.precedence``); cleared when it starts.
    # Its pods keep their own class: the sharing rules judge them by it.
    waiting_as: int | None = None
    # Waited ``Grace.aging`` of its length while queued: it goes first in its
    # class, and once running its class never parks it (``reported_left``).
    aged: bool = False
    # (phase, state, placements) -> the pods as Workloads (see cluster.pods_of)
    pod_cache: tuple[tuple[object, ...], tuple[Workload, ...]] | None = None

    @property
    def priority(self) -> int:
        """The class the job's place in the queue comes from (``waiting_as``
        while its grace lasts, else its own)."""
        return self.spec.priority if self.waiting_as is None else self.waiting_as

    def position(self, t: float) -> float:
        return self.progress + self.rate * (t - self.t_ref)

    def work_left(self) -> float:
        """Expected GPU-seconds left as of the last event (0: unknown)."""
        if not self.work_gpu_s:
            return 0.0
        return max(self.work_gpu_s - self.progress * self.spec.gpus, 1.0)

    def reported_left(self) -> float:
        """What the job's pods report as work left: withheld (0) while a
        critical or aged job holds GPUs, so its own class never parks it."""
        held = self.state is not State.QUEUED
        return reported_left(self.work_left(), (self.critical or self.aged) and held)

    def advance(self, t: float) -> None:
        self.progress = self.position(t)
        self.t_ref = t

    def segment_at(self, t: float) -> int:
        assert self.timeline is not None
        if self.stepping:  # somewhere in the group that starts at ``seg``
            hi = self.timeline.group_end[self.seg]
            if hi == self.seg:
                return self.seg
            i = bisect.bisect_right(self.timeline.ends, self.position(t), self.seg, hi)
            return min(i, hi)
        i = bisect.bisect_right(self.timeline.ends, self.position(t))
        return min(i, len(self.timeline.ends) - 1)

    def phase_of(self, seg: int) -> Phase:
        return ITERATION_PHASES[seg % SEGMENTS_PER_ITERATION]

    def phase_at(self, t: float) -> Phase:
        return self.phase_of(self.segment_at(t)) if self.timeline else Phase.ROLLOUT

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    def pods_on(self, node: int, gpu: int) -> tuple[int, ...]:
        """Indices of this job's pods that sit on GPU ``gpu`` of ``node``."""
        return tuple(k for k, (n, gs) in enumerate(self.placements) if n == node and gpu in gs)

    def pod_active(self, pod: int, seg: int) -> bool:
        """Whether pod ``pod`` works in segment ``seg`` (a colocated pod always does)."""
        if not self.spec.disaggregated:
            return True
        return ROLE_ACTIVE[self.spec.pod_roles[pod]][seg % SEGMENTS_PER_ITERATION]

    def pod_phase(self, pod: int, phase: Phase) -> Phase:
        """The phase pod ``pod`` is in while the job is in ``phase`` (idle or the job's)."""
        if not self.spec.disaggregated:
            return phase
        role = self.spec.pod_roles[pod]
        on = ROLE_ACTIVE[role][ITERATION_PHASES.index(phase)]
        return phase if on else Phase.IDLE
