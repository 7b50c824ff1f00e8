"""The discrete-event loop: arrivals, phase ends, loads, and scheduling passes.

Events sit in a heap keyed by time; a job's pending event carries its version
so that re-planning (a co-runner changed phase, the job was preempted) just
bumps the version instead of searching the heap. After all events of one
instant are handled, one scheduling pass runs if anything freed or arrived.

Every decision goes through ``rlix.core.policy.admission`` and the scheduler's
``PlacementPolicy``; ``trace`` receives each decision with the exact snapshot
it was made on, so a test can replay it through the extender's code path.
"""

from __future__ import annotations

import functools
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rlix.core.phases import Phase, Shape, shape_of
from rlix.core.policy.admission import Admission, GangRequest, place_gang
from rlix.core.policy.ordering import Partners, aging_s, class_key, critical_jobs, grace_s
from rlix.core.policy.placement.gate_room import parks_working_for, worth_stopping
from rlix.core.policy.placement.gating import Busy, gains_by_entering
from rlix.core.policy.placement.sharing import (
    CONTEXT_MIB,
    SharingRules,
    kinds_may_pair,
    pair_kind,
    pair_rates,
    pair_traits,
    takes_turns,
)
from rlix.core.policy.rebalance import PairSplit, split_pair_gain
from rlix.core.sim import hardware as hw
from rlix.core.sim.cluster import Cluster, pods_of
from rlix.core.sim.metrics import Recorder, SimResult
from rlix.core.sim.mixes import Mix, expected_gpu_s
from rlix.core.sim.overflow import keep_within_hbm, needed
from rlix.core.sim.preempting import try_preempt, try_resume
from rlix.core.sim.records import RESUME_RETRY_S, DecisionRecord, SimConfig
from rlix.core.sim.runs import Run, State
from rlix.core.sim.schedulers import Preemption, QueueOrder, Scheduler
from rlix.core.sim.workload import TRAINER_ROLE, profile_for
from rlix.core.snapshot import PhaseLoad

__all__ = ["DecisionRecord", "SimConfig", "Simulation", "simulate"]

SEGMENT, READY, ARRIVE, SAMPLE, GRACE_ENDS, AGED, RETRY, LOADED = 0, 1, 2, 3, 4, 5, 6, 7


# (each pod's GPUs, largest first; peak per-GPU MiB)
GangShape = tuple[tuple[int, ...], int]


def _dominates(a: GangShape, b: GangShape) -> bool:
    """``b`` needs at least what ``a`` does: as many pods or more, its largest
    pods each at least as large as ``a``'s, and at least ``a``'s memory. For
    equal pods (every colocated job) that is GPUs per pod, pods and memory
    each at least as large."""
    (pa, ma), (pb, mb) = a, b
    return (
        ma <= mb
        and len(pa) <= len(pb)
        and all(x <= y for x, y in zip(pa, pb[: len(pa)], strict=True))
    )


@dataclass(slots=True)
class _Load:
    """A job's load (a checkpoint, or parked memory restored) where the gate
    parks: each pod's goes in once its peak fits beside the pods that work
    (``rlix.loading()`` and a conductor's resume, on a cluster), and the job
    runs once the last has ended."""

    seconds: float
    started: dict[int, float] = field(default_factory=dict)  # pod -> when it went in


class Simulation:
    """One run of a mix under a scheduler; ``preempting`` reaches it as a ``preempting.Engine``."""

    def __init__(
        self,
        mix: Mix,
        scheduler: Scheduler,
        config: SimConfig | None = None,
        trace: Callable[[DecisionRecord], None] | None = None,
        progress: Callable[[float, int, int], None] | None = None,
    ) -> None:
        self.mix, self.scheduler = mix, scheduler
        self.config = config or SimConfig()
        self.policy = scheduler.policy
        self.trace, self.progress = trace, progress
        self.cluster = Cluster(
            mix.nodes, mix.gpus_per_node, self.config.memory_mib, self.policy.shares_gpus
        )
        self.runs = [Run(s, profile_for(s), i) for i, s in enumerate(mix.jobs)]
        self.by_size = scheduler.order is QueueOrder.SHORTEST
        if self.by_size:
            for r in self.runs:
                r.work_gpu_s = expected_gpu_s(r.spec)
        # Sized, a waiting job queues at the lowest class's place for its grace
        # (``ordering.precedence``): the classes the mix holds.
        classes = [r.spec.priority for r in self.runs]
        self.top, self.lowest = max(classes, default=0), min(classes, default=0)
        self.table = self.config.interference.table()
        # (GPUs of each pod, peak per-GPU MiB): a job that does not fit makes
        # every job at least as large in both wait in the same pass. Peak,
        # because the fit test (policy.fit) asks for a pod's peak phase memory:
        # keyed by the smallest phase, a job with a small rollout but a large
        # training phase would block jobs that need less at their peak.
        # A disaggregated job's pods may differ in size, so the shape lists
        # every pod's GPUs (largest first): dominance then compares pod by pod.
        self.shapes: list[GangShape] = [
            (tuple(sorted(r.spec.pod_gpus, reverse=True)), max(r.profile.memory_mib.values()))
            for r in self.runs
        ]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.queue: dict[int, None] = {}
        self.suspended: dict[int, None] = {}
        self.running_priorities: Counter[int] = Counter()
        self.dirty = False
        self.groups: dict[int, list[tuple[int, ...]]] = {}
        self.resume_failed_at: dict[int, tuple[tuple[int, ...], float]] = {}
        self.released = 0  # bumps whenever GPUs or memory are given back
        self.failed_at: dict[GangShape, int] = {}
        # Preemption can newly succeed only after something starts (a new
        # potential victim) or is released.
        self.started = 0
        self.preempt_failed_at: dict[tuple[GangShape, int, int], tuple[int, int]] = {}
        self.done = 0
        self.events = 0
        # Any disaggregated job: rates and loads are read per pod (``_pod_rate``);
        # an all-colocated mix keeps the per-job fast path.
        self.per_pod = any(r.spec.disaggregated for r in self.runs)
        smallest = min(r.profile.min_mib for r in self.runs)
        self.recorder = Recorder(
            self.cluster, self.runs, self.config.memory_mib, smallest, suspended=self.suspended
        )
        # Splitting pairs onto freed GPUs (``_rebalance``): only where the
        # sharing rules carry an interference matrix (the benchmark's RLix).
        rules = getattr(self.policy, "rules", None)
        self.rebalance_rules: SharingRules | None = (
            rules
            if isinstance(rules, SharingRules)
            and rules.interference is not None
            and self.policy.shares_gpus
            else None
        )
        self.rebalanced_at = -1  # ``released`` as of the last look
        # The phase gate (``placement.gating``), with the same rules: a sharing
        # job at the start of a busy phase waits (rate 0, holding its GPUs)
        # while entering would lower its GPUs' progress. Job -> waiting since.
        self.gate_rules = (
            self.rebalance_rules
            if self.rebalance_rules is not None and self.rebalance_rules.phase_gate
            else None
        )
        self.gated: dict[int, float] = {}
        self.entering: set[int] = set()  # placed, not yet through the gate
        # Parking at the gate (``SharingRules.parks_at_gate``): the rules place
        # pairs that take turns where only the larger peak fits, and the gate
        # makes room with memory. A pod then waits at the gate until its peak
        # fits beside the pods that work (the others are parked, a context
        # each), and on a GPU over its memory at both peaks a pod's busy
        # segments pay for the turn's copies (``_turn_charge``).
        self.parks = self.gate_rules is not None and self.gate_rules.parks_at_gate
        self.charges: dict[tuple[int, int], tuple[float, int, float]] = {}
        self.recorder.parks_at_gate = self.parks
        # A weight sync whose peak does not fit beside a working trainer pod
        # parks that pod at its next safe point where its phase has enough
        # left to pay (``gate_room.parks_working_for``, ``worth_stopping``):
        # syncing job -> the jobs its sync stopped, and all stopped jobs,
        # which make no progress (rate 0) until the sync ends.
        self.stops: dict[int, set[int]] = {}
        self.stopped: set[int] = set()
        # A job placed where the gate parks loads pod by pod, each where its
        # peak fits (``_Load``); job -> its load, until it runs.
        self.loads: dict[int, _Load] = {}
        # Rules that do not ask both peaks to fit (no matrix: the cluster's)
        # leave pairs that meet both on a GPU; the conductor's rule 3 parks
        # one (``overflow``). Then a sharing job steps phase by phase (a
        # group of same-shaped segments may change memory: scoring, training)
        # and every phase it enters is checked; the parked come back as
        # parked jobs do, retried every ``RESUME_RETRY_S`` (``RETRY``).
        self.polices_hbm = needed(scheduler)
        self.overflow_parked: dict[int, None] = {}
        self.retry_pending = False
        # Sized and with a matrix, a job that would outlast its partners goes
        # first too (``ordering.short_of_partners``); a job's kind is read off
        # its unplaced pods once (what the rules read does not change).
        self.partners: Partners | None = None
        if self.by_size and self.rebalance_rules is not None:
            self.partners = Partners(
                kind_of={r.id: pair_kind(pods_of(r, 0.0, self.cluster)) for r in self.runs},
                pair=functools.partial(
                    kinds_may_pair, self.rebalance_rules, gpu_mib=self.config.memory_mib
                ),
            )

    # -- event plumbing ------------------------------------------------------
    def _push(self, t: float, kind: int, job: int = -1, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, job, version))

    def run(self) -> SimResult:
        for r in self.runs:
            self._push(r.spec.arrival_s, ARRIVE, r.id)
        self._push(0.0, SAMPLE)
        total = len(self.runs)
        while self.heap and self.done < total:
            t, _, kind, job, version = heapq.heappop(self.heap)
            self.events += 1
            self.recorder.account(t, bool(self.queue or self.suspended))
            if kind == SAMPLE:
                self.recorder.sample(t)
                self._push(t + self.config.sample_s, SAMPLE)
            elif kind == ARRIVE:
                self.queue[job] = None
                self.dirty = True
                self._start_grace(self.runs[job], t)
            elif kind == GRACE_ENDS:
                run = self.runs[job]
                if run.waiting_as is not None and run.state is State.QUEUED:
                    run.waiting_as = None
                    self.dirty = True
            elif kind == AGED:
                run = self.runs[job]
                if run.state is State.QUEUED:
                    run.aged = True
                    self.dirty = True
            elif kind == RETRY:
                self.retry_pending = False
                self.dirty = True
                self._retry_parked(t)
            elif version == self.runs[job].version:
                if kind == SEGMENT:
                    self._segment_end(self.runs[job], t)
                elif kind == LOADED:  # a pod's load ended: its room beyond a context is free
                    self._refresh(self._neighbours(self.runs[job]) | {job}, t)
                else:
                    self._ready(self.runs[job], t)
            if self.dirty and (not self.heap or self.heap[0][0] > t):
                self.dirty = False
                self._schedule(t)
            if self.progress is not None and self.events % 20000 == 0:
                self.progress(t, self.done, total)
        return self.recorder.result(
            mix=self.mix.name, scheduler=self.scheduler.name, events=self.events
        )

    def _start_grace(self, run: Run, t: float) -> None:
        """Sized, an arriving job of a higher class than the lowest waits at
        the lowest class's place until its grace ends (``ordering.grace_s``);
        with aging on, one still waiting when it has aged goes first in its
        class (``ordering.is_aged``)."""
        if not self.by_size:
            return
        alone_s = run.work_gpu_s / run.spec.gpus if run.spec.gpus else 0.0
        grace = grace_s(run.spec.priority, self.top, self.lowest, alone_s, shares=self.config.grace)
        if grace > 0:
            run.waiting_as = self.lowest
            self._push(t + grace, GRACE_ENDS, run.id)
        aging = aging_s(alone_s, shares=self.config.grace)
        if aging > 0:
            self._push(t + aging, AGED, run.id)

    # -- job dynamics ----------------------------------------------------------
    def _ready(self, run: Run, t: float) -> None:
        self.loads.pop(run.id, None)
        run.state = State.RUNNING
        run.t_ref = t
        self.running_priorities[run.spec.priority] += 1
        self._refresh(self._neighbours(run) | {run.id}, t)

    def _segment_end(self, run: Run, t: float) -> None:
        assert run.timeline is not None
        if run.stepping:
            end = self._step_end(run)
            run.progress, run.t_ref = run.timeline.ends[end], t
            run.seg = end + 1
            if run.seg < len(run.timeline.ends):
                self._refresh(self._neighbours(run) | {run.id}, t)
                if self.polices_hbm:
                    self._keep_within_hbm(run, t)
                return
        self._complete(run, t)

    def _step_end(self, run: Run) -> int:
        """The last segment a sharing job runs through before its next event:
        the end of its group, or (``polices_hbm``) the segment itself."""
        assert run.timeline is not None
        return run.seg if self.polices_hbm else run.timeline.group_end[run.seg]

    def _keep_within_hbm(self, run: Run, t: float) -> None:
        """``run`` entered a phase at ``t``: the conductor's rule 3 on its
        shared GPUs (``overflow.keep_within_hbm``)."""
        parked = keep_within_hbm(self, run, t)
        if not parked:
            return
        self.recorder.overflow_parks += len(parked)
        self.overflow_parked.update(dict.fromkeys(r.id for r in parked))
        self.dirty = True
        self._retry_parked(t)

    def _retry_parked(self, t: float) -> None:
        """While a job parked for memory waits, look again every
        ``RESUME_RETRY_S``: its partner's phase changes free memory without
        anything leaving, and a job alone steps no phases."""
        for jid in [j for j in self.overflow_parked if j not in self.suspended]:
            del self.overflow_parked[jid]
        if self.overflow_parked and not self.retry_pending:
            self.retry_pending = True
            self._push(t + RESUME_RETRY_S, RETRY)

    def _complete(self, run: Run, t: float) -> None:
        self.released += 1
        self._ungate(run)
        neighbours = self._neighbours(run)
        self._forget_groups(run)
        self.cluster.detach(run)
        self.running_priorities[run.spec.priority] -= 1
        run.state, run.ended = State.DONE, t
        run.version += 1
        self.recorder.completed(run)
        run.timeline = None
        self.done += 1
        self.dirty = True
        if self.progress is not None and self.done % 250 == 0:
            self.progress(t, self.done, len(self.runs))  # event-light runs report too
        self._refresh(neighbours, t)

    def _forget_groups(self, run: Run) -> None:
        """``run`` moves: it and everyone sharing a GPU with it must re-derive groups."""
        self.groups.pop(run.id, None)
        for k in self._neighbours(run):
            self.groups.pop(k, None)

    def _neighbours(self, run: Run) -> set[int]:
        res = self.cluster.res
        return {k for node, gpus in run.placements for g in gpus for k in res[node][g]} - {run.id}

    def pressure_phase(self, run: Run) -> tuple[float, Phase]:
        assert run.timeline is not None
        seg = run.seg if run.stepping else run.segment_at(run.t_ref)
        return run.timeline.pressures[seg], run.phase_of(seg)

    def _ungate(self, run: Run) -> None:
        self.gated.pop(run.id, None)
        self.entering.discard(run.id)
        self.stopped.discard(run.id)
        self.stops.pop(run.id, None)

    def _refresh(self, ids: set[int], t: float) -> None:
        """Re-plan ``ids`` after something on their GPUs changed at ``t``."""
        res = self.cluster.res
        active = [self.runs[i] for i in sorted(ids) if self.runs[i].state is State.RUNNING]
        for run in active:  # pass 1: positions and segments as of t
            was = run.segment_at(t)
            run.advance(t)
            shared = any(len(res[node][g]) > 1 for node, gpus in run.placements for g in gpus)
            if shared and not run.stepping:
                run.seg = was
            run.stepping = shared
        if self.loads:
            for jid in sorted(ids & self.loads.keys()):
                self._start_loads(self.runs[jid], t)
        if self.gate_rules is not None:
            self._gate(active, t)
        if self.parks:
            self._mark_stopped()
        seen: dict[int, tuple[float, Phase] | None] = {}
        for run in active:  # pass 2: rates and next events
            assert run.timeline is not None
            run.version += 1
            if not run.stepping:
                self._ungate(run)
                run.rate = 1.0
                self._push(t + run.timeline.total_s - run.progress, SEGMENT, run.id, run.version)
                continue
            if run.id in self.gated or run.id in self.stopped:
                # Waits at the gate, or parked for a sync: the holder's phase
                # end refreshes it.
                run.rate = 0.0
                continue
            run.rate = self._rate(run, seen)
            end = self._step_end(run)
            left = max(0.0, run.timeline.ends[end] - run.progress)
            self._push(t + left / run.rate, SEGMENT, run.id, run.version)

    def _gate(self, active: list[Run], t: float) -> None:
        """Which sharing jobs at the start of a phase go in now (``placement.gating``).

        The longest-waiting decides first (so two jobs take turns); one that
        goes in holds its GPUs for the ones deciding after it. A job placed on
        GPUs (``entering``) passes the gate before it runs, wherever it resumes.
        """
        at_start = [
            r
            for r in active
            if r.stepping and (r.id in self.gated or r.id in self.entering or _at_phase_start(r))
        ]
        since = {r.id: self.gated.pop(r.id, t) for r in at_start}
        undecided = set(since)
        for run in sorted(at_start, key=lambda r: (since[r.id], r.id)):
            undecided.discard(run.id)
            if self._must_wait(run, undecided, t):
                self.gated[run.id] = since[run.id]
            else:
                self.entering.discard(run.id)

    def _must_wait(self, run: Run, undecided: set[int], t: float) -> bool:
        """Whether entering ``run``'s phase now would lower the progress of a GPU
        where a pod it takes turns with (``sharing.takes_turns``) is working,
        or (parking) its peak does not fit beside the pods that work. A sync
        that fits once it stops working pods (``_stoppable``) goes in and
        records them (``stops``)."""
        rules, res = self.gate_rules, self.cluster.res
        assert rules is not None and run.timeline is not None
        seg = run.seg
        phase = run.phase_of(seg)
        entering: Busy = (shape_of(phase), run.timeline.pressures[seg])
        syncs = self.parks and parks_working_for(phase)
        victims: set[int] = set()
        for k, (node, gpus) in enumerate(run.placements):
            if not run.pod_active(k, seg):
                continue
            mine = self._pod_cycle(run, k)
            for g in gpus:
                holders: list[Busy] = []
                # The room test (``gate_room``): the entrant and the pods
                # that work at their peaks, every other pod parked to a context.
                need = self._pod_peak(run, k) if self.parks else 0
                freed, here = 0, set()  # what stopping pods would free on this GPU
                for j in dict.fromkeys(res[node][g]):
                    if j == run.id:
                        continue
                    other = self.runs[j]
                    waits = j in undecided or j in self.gated
                    for q in other.pods_on(node, g):
                        state = None if waits else self.pod_pressure_phase(other, q)
                        if self.parks:
                            peak = self._at_peak(other, q, t, working=state is not None)
                            need += self._pod_peak(other, q) if peak else CONTEXT_MIB
                            if syncs and state is not None and self._stoppable(run, other, q, t):
                                freed += self._pod_peak(other, q) - CONTEXT_MIB
                                here.add(j)
                        if state is not None and takes_turns(
                            rules, *mine, *self._pod_cycle(other, q)
                        ):
                            holders.append((shape_of(state[1]), state[0]))
                if self.parks and need > self.config.memory_mib:
                    if need - freed > self.config.memory_mib:
                        return True
                    victims |= here
                if holders and not gains_by_entering(rules, entering, holders):
                    return True
        if victims:
            self.stops[run.id] = victims
        return False

    def _stoppable(self, sync: Run, other: Run, pod: int, t: float) -> bool:
        """Whether ``sync``'s weight sync may park ``other``'s working pod
        ``pod`` (``gate_room.worth_stopping``): a pod that stops at safe
        points, with more of its phase left (alone-seconds, as its declared
        cycle says on a cluster) than the sync and its copies cost it."""
        if not _stops_at_safe_points(other, pod) or other.timeline is None:
            return False
        tl, seg = other.timeline, other.seg
        last, phase = seg, other.phase_of(seg)
        while last + 1 < len(tl.ends) and other.phase_of(last + 1) is phase:
            last += 1
        left = tl.ends[last] - other.position(t)
        assert sync.timeline is not None
        ends, s = sync.timeline.ends, sync.seg
        sync_s = ends[s] - (ends[s - 1] if s else 0.0)
        return worth_stopping(left, sync_s, self._pod_peak(other, pod))

    def _mark_stopped(self) -> None:
        """The jobs stopped now: those of every sync still under way (a stop
        ends with the sync that made it, and the job comes back)."""
        for sid in list(self.stops):
            sync = self.runs[sid]
            going = (
                sync.state is State.RUNNING
                and sync.timeline is not None
                and sid not in self.gated
                and parks_working_for(sync.phase_of(sync.seg))
            )
            if not going:
                del self.stops[sid]
        self.stopped = set().union(*self.stops.values()) if self.stops else set()

    def _stop_charge(self, run: Run) -> float:
        """The share of its rate a syncing job keeps where its sync parked
        working pods: sync / (sync + their memory out + back), as the turn
        charge (PCIe floors; the restore is charged here too, as if nothing
        overlapped it). 1 where it parked nobody."""
        assert run.timeline is not None
        seg, res = run.seg, self.cluster.res
        stopped = self.stops.get(run.id, ())
        moved = 0
        for k, (node, gpus) in enumerate(run.placements):
            if not run.pod_active(k, seg):
                continue
            for g in gpus:
                here = sum(
                    self._pod_peak(other, q)
                    for j in dict.fromkeys(res[node][g])
                    if j in stopped
                    for other in (self.runs[j],)
                    for q in other.pods_on(node, g)
                    if _stops_at_safe_points(other, q)
                )
                moved = max(moved, here)
        if not moved:
            return 1.0
        ends = run.timeline.ends
        span = ends[seg] - (ends[seg - 1] if seg else 0.0)
        copies = moved * hw.MIB / hw.PCIE_D2H_BYTES_PER_S + moved * hw.MIB / hw.PCIE_H2D_BYTES_PER_S
        return span / (span + copies) if span > 0 else 1.0

    def fit_floor(self, run: Run) -> int:
        """The memory a GPU must have left, after its residents' smallest phase,
        to be worth asking the policy about for ``run`` (``Cluster.candidates``):
        its own smallest phase; where the gate parks, for a disaggregated job
        (whose pods idle while the other pool works, so they may take turns),
        a CUDA context, since a pair that takes turns needs the larger peak,
        not the sum. A colocated job never idles: it takes no turns."""
        if self.parks and run.spec.disaggregated:
            return min(run.profile.min_mib, CONTEXT_MIB)
        return run.profile.min_mib

    @staticmethod
    def _pod_peak(run: Run, pod: int) -> int:
        """The per-GPU MiB pod ``pod`` of ``run`` holds at its peak."""
        return run.profile.pod_peak_mib(run.spec.pod_roles[pod])

    def _turn_charge(self, run: Run, pod: int, others_mib: int) -> float:
        """The share of its rate a pod keeps, in its busy segments, on a GPU
        where the other pods' peaks (``others_mib``) and its own exceed the
        GPU: once per iteration its partners' memory goes out and its own comes
        back (PCIe floors, ``hardware``) before its turn, busy / (busy + out +
        in). 1 where both peaks fit (nobody is parked)."""
        key = (run.id, pod)
        found = self.charges.get(key)
        if found is None:
            role = run.spec.pod_roles[pod]
            profile = run.profile.pod_load_profile(role)
            busy = run.profile.iteration_s * sum(
                s.share for s in profile if shape_of(s.phase) is not Shape.NONE
            )
            mib = self._pod_peak(run, pod)
            found = self.charges[key] = (busy, mib, mib * hw.MIB / hw.PCIE_H2D_BYTES_PER_S)
        busy, peak, back = found
        if peak + others_mib <= self.config.memory_mib or busy <= 0:
            return 1.0
        out = others_mib * hw.MIB / hw.PCIE_D2H_BYTES_PER_S
        return busy / (busy + out + back)

    @staticmethod
    def _pod_cycle(run: Run, pod: int) -> tuple[tuple[PhaseLoad, ...], float]:
        """A pod's declared cycle: its load profile and its job's iteration length."""
        return run.profile.pod_load_profile(run.spec.pod_roles[pod]), run.profile.iteration_s

    def _groups(self, run: Run) -> list[tuple[int, ...]]:
        """The distinct sets of co-residents over ``run``'s GPUs (cached until a move)."""
        cached = self.groups.get(run.id)
        if cached is None:
            found: dict[tuple[int, ...], None] = {}
            for node, gpus in run.placements:
                for g in gpus:
                    others = list(self.cluster.res[node][g])
                    others.remove(run.id)  # one occurrence: its own other pods count
                    if others:
                        found[tuple(others)] = None
            cached = self.groups[run.id] = list(found)
        return cached

    def _rate(self, run: Run, seen: dict[int, tuple[float, Phase] | None]) -> float:
        """``seen`` caches co-runners' (pressure, phase) for one instant."""
        if self.per_pod:
            return self._pod_rate(run)
        table = self.table[run.phase_of(run.seg)]
        worst = 0.0
        for group in self._groups(run):
            load = 0.0
            for k in group:
                if k in seen:
                    state = seen[k]
                else:
                    other = self.runs[k]
                    running = other.state is State.RUNNING and k not in self.gated
                    state = seen[k] = self.pressure_phase(other) if running else None
                if state is not None:
                    load += state[0] * table[state[1]]
            worst = max(worst, load)
        return 1.0 / (1.0 + worst)

    def pod_pressure_phase(self, run: Run, pod: int) -> tuple[float, Phase] | None:
        """(pressure, phase) of ``run``'s pod ``pod`` now; None while it idles or
        the job is not running (an idle pool presses on nobody)."""
        if run.state is not State.RUNNING or run.timeline is None:
            return None
        if run.id in self.gated or run.id in self.stopped:
            return None
        seg = run.seg if run.stepping else run.segment_at(run.t_ref)
        if not run.pod_active(pod, seg):
            return None
        return run.timeline.pressures[seg], run.phase_of(seg)

    def _pod_rate(self, run: Run) -> float:
        """A gang moves at its slowest *active* GPU; on each GPU the load is what
        every other pod there (other jobs' and this job's own) presses now."""
        assert run.timeline is not None
        seg = run.seg
        table = self.table[run.phase_of(seg)]
        res = self.cluster.res
        worst = 1.0  # the slowest GPU's seconds per alone-second
        for k, (node, gpus) in enumerate(run.placements):
            if not run.pod_active(k, seg):
                continue
            for g in gpus:
                load, others_mib = 0.0, 0
                for j in dict.fromkeys(res[node][g]):
                    other = self.runs[j]
                    for q in other.pods_on(node, g):
                        if j == run.id and q == k:
                            continue
                        if self.parks:
                            others_mib += self._pod_peak(other, q)
                        state = self.pod_pressure_phase(other, q)
                        if state is not None:
                            load += state[0] * table[state[1]]
                slow = 1.0 + load
                if others_mib:
                    slow /= self._turn_charge(run, k, others_mib)
                worst = max(worst, slow)
        if self.parks and parks_working_for(run.phase_of(seg)):
            return self._stop_charge(run) / worst
        return 1.0 / worst

    # -- starting and stopping jobs --------------------------------------------
    def start(self, run: Run, admission: Admission, t: float) -> None:
        """Put ``run`` on the GPUs ``admission`` chose; it loads, then runs."""
        placements = [(self.cluster.index[p.node], p.gpus) for p in admission.placements]
        if run.timeline is None:
            run.timeline = run.profile.timeline(self.config.seed)
        run.waiting_as = None  # a running job holds its own class
        if run.started is None:
            run.started = t
            run.delay += run.profile.first_load_s
        self.started += 1
        self.queue.pop(run.id, None)
        self._ungate(run)
        if self.gate_rules is not None:
            self.entering.add(run.id)
        run.placements = placements
        run.state, run.rate, run.stepping = State.LOADING, 0.0, False
        run.version += 1
        self.cluster.attach(run)
        self._forget_groups(run)
        if self.parks:
            self.loads[run.id] = _Load(run.delay)
            self._start_loads(run, t)
        else:
            self._push(t + run.delay, READY, run.id, run.version)
        run.delay = 0.0
        self._refresh(self._neighbours(run), t)

    def _start_loads(self, run: Run, t: float) -> None:
        """Where the gate parks: start the load of each of ``run``'s pods whose
        peak fits now beside the pods that work or load on its GPUs (the
        others parked, a context each), as the agent's gate lets a pod's
        ``rlix.loading()`` in; once the last has started, the job runs when
        it ends. A waiting pod holds nothing (its memory is not there yet)."""
        load = self.loads[run.id]
        pending = [k for k in range(len(run.placements)) if k not in load.started]
        if not pending:
            return  # all under way: its READY is pushed
        went = [k for k in pending if self._load_fits(run, k, t)]
        for k in went:
            load.started[k] = t
        if len(load.started) == len(run.placements):
            self._push(max(load.started.values()) + load.seconds, READY, run.id, run.version)
        elif went:  # their loads end before the job's: their room beyond a context frees then
            self._push(t + load.seconds, LOADED, run.id, run.version)

    def _load_fits(self, run: Run, pod: int, t: float) -> bool:
        """Whether ``pod``'s peak fits on each of its GPUs beside the pods there
        the gate counts at theirs (``holds_peak``), every other one a context."""
        node, gpus = run.placements[pod]
        res = self.cluster.res
        for g in gpus:
            need = self._pod_peak(run, pod)
            for j in dict.fromkeys(res[node][g]):
                if j == run.id:
                    continue
                other = self.runs[j]
                for q in other.pods_on(node, g):
                    peak = self.holds_peak(other, q, t)
                    need += self._pod_peak(other, q) if peak else CONTEXT_MIB
            if need > self.config.memory_mib:
                return False
        return True

    def loading(self, run: Run, pod: int, t: float) -> bool:
        """Whether pod ``pod`` of ``run`` is loading at ``t`` (gated loads only)."""
        load = self.loads.get(run.id)
        if load is None or pod not in load.started:
            return False
        return t < load.started[pod] + load.seconds

    def holds_peak(self, run: Run, pod: int, t: float) -> bool:
        """Whether the gate counts pod ``pod`` of ``run`` at its peak at ``t``."""
        return self._at_peak(run, pod, t, working=self.pod_pressure_phase(run, pod) is not None)

    def _at_peak(self, run: Run, pod: int, t: float, *, working: bool) -> bool:
        """The gate's room test (``gate_room``) counts a resident pod at its
        peak where it works (as the caller sees it: a pod waiting at the gate
        does not), loads, or was stopped by a sync (the agent's ``Turns``
        keeps a stopped pod's room for it); every other pod at a CUDA
        context, the rest parked."""
        return working or run.id in self.stopped or self.loading(run, pod, t)

    def stop(self, run: Run, t: float) -> None:
        """Take ``run`` off its GPUs (its progress as of ``t``) and re-plan its neighbours."""
        self.released += 1
        self._ungate(run)
        self.loads.pop(run.id, None)
        neighbours = self._neighbours(run)
        if run.state is State.RUNNING:
            run.advance(t)
            self.running_priorities[run.spec.priority] -= 1
        self._forget_groups(run)
        self.cluster.detach(run)
        run.version += 1
        run.rate, run.stepping = 0.0, False
        run.preempted += 1
        self._refresh(neighbours, t)

    # -- scheduling ----------------------------------------------------------------
    def queue_key(self, run: Run) -> tuple[object, ...]:
        if self.scheduler.order is QueueOrder.FIFO:
            return (0.0, run.spec.arrival_s, run.id)
        if self.by_size:
            left, arrival = run.work_left(), run.spec.arrival_s
            first = run.critical or run.aged
            return (*class_key(run.priority, left, first, arrival), run.id)
        return (-run.spec.priority, run.spec.arrival_s, run.id)

    def _mark_critical(self, t: float) -> None:
        """Which jobs would set the finish if started later (``ordering.is_critical``)."""
        live = [r for r in self.runs if r.state is not State.DONE and r.spec.arrival_s <= t]
        critical = critical_jobs(
            {r.id: (r.work_left(), r.spec.gpus) for r in live},
            self.cluster.total_gpus,
            self.partners,
        )
        for r in live:
            r.critical = r.id in critical

    def _schedule(self, t: float) -> None:
        if self.by_size:
            self._mark_critical(t)
        if self.suspended:
            try_resume(self, t)
        waiting = Counter(self.shapes[i] for i in self.queue)
        # shape -> dominated by a failure in this pass, or failed before and
        # nothing has been released since (an arrival alone frees nothing).
        blocked = {s: self.failed_at.get(s) == self.released for s in waiting}
        preempts = self.scheduler.preemption is not Preemption.NONE
        for jid in sorted(self.queue, key=lambda i: self.queue_key(self.runs[i])):
            run = self.runs[jid]
            shape = self.shapes[jid]
            placed = False
            if not blocked.get(shape, False):
                placed = self._try_place(run, t)
                if not placed:
                    self.failed_at[shape] = self.released
                    for s in waiting:
                        blocked[s] = blocked[s] or _dominates(shape, s)
            can_preempt = preempts and self._victims_exist(run)
            # Sized, a job may park its own class when far smaller: one memo
            # per power of two of work left, so a smaller job still tries.
            memo = (shape, run.priority, int(run.work_left()).bit_length())
            epoch = (self.released, self.started)
            if not placed and can_preempt and self.preempt_failed_at.get(memo) != epoch:
                placed = try_preempt(self, run, t)
                if not placed:
                    self.preempt_failed_at[memo] = epoch
            if placed:
                waiting[shape] -= 1
                if waiting[shape] == 0:
                    del waiting[shape]
            elif not can_preempt and all(blocked.get(s, False) for s in waiting):
                break  # nothing behind this job can fit or preempt in this pass
        if (
            self.rebalance_rules is not None
            and not self.queue
            and not self.suspended
            and self.rebalanced_at != self.released
        ):
            self._rebalance(t)

    # -- splitting pairs onto freed GPUs ----------------------------------------
    def _rebalance(self, t: float) -> None:
        """GPUs were released and nobody waits: move whole gangs out of pairs
        onto empty GPUs where ``split_pair_gain`` says it pays, best first."""
        rules = self.rebalance_rules
        assert rules is not None
        candidates: list[tuple[float, int]] = []
        for run in self.runs:
            partner = self._sole_partner(run)
            if partner is None or partner.state is not State.RUNNING:
                continue
            split = self._split(run, partner, t, rules, self._copy_floor_s(run, t))
            gain = split_pair_gain(split) if split is not None else None
            if gain is not None:
                candidates.append((-gain, run.id))
        moved: set[int] = set()
        for _, jid in sorted(candidates):
            run = self.runs[jid]
            partner = self._sole_partner(run) if jid not in moved else None
            if partner is None or partner.id in moved:
                continue
            planned = self._plan_move(run, t)
            if planned is None:
                continue
            admission, copy_s, nbytes, record = planned
            split = self._split(run, partner, t, rules, copy_s)
            if split is None or split_pair_gain(split) is None:
                continue
            if self.trace is not None:
                self.trace(record)
            moved |= {jid, partner.id}
            self.recorder.rebalances += 1
            self.recorder.bytes_moved += nbytes
            self.stop(run, t)
            run.preempted -= 1  # a move, not a preemption
            run.delay = copy_s
            self.start(run, admission, t)
        self.rebalanced_at = self.released

    def _sole_partner(self, run: Run) -> Run | None:
        """The one other job ``run`` shares GPUs with, if it runs sharing exactly one."""
        if run.state is not State.RUNNING or not run.stepping:
            return None
        partners = {k for group in self._groups(run) for k in group} - {run.id}
        return self.runs[next(iter(partners))] if len(partners) == 1 else None

    def _out_and_back_s(self, per_gpu: float) -> float:
        """One GPU's bytes copied to host memory and back (as suspension and resume)."""
        return per_gpu / self.config.suspend_bytes_per_s + per_gpu / self.config.restore_bytes_per_s

    def _split(
        self, run: Run, partner: Run, t: float, rules: SharingRules, copy_s: float
    ) -> PairSplit | None:
        """The candidate move as numbers: remaining work and expected paired rates
        (``sharing.pair_rates`` over the pods that share a GPU, gated or
        drifting; the slowest counts)."""
        assert run.timeline is not None and partner.timeline is not None
        mine = pods_of(run, t, self.cluster)
        theirs = pods_of(partner, t, self.cluster)
        rate_m = rate_p = 1.0
        for k, (node, gpus) in enumerate(run.placements):
            for q, (pnode, pgpus) in enumerate(partner.placements):
                if pnode == node and set(gpus) & set(pgpus):
                    rates = pair_rates(rules, pair_traits(mine[k]), pair_traits(theirs[q]))
                    if rates is not None:
                        rate_m, rate_p = min(rate_m, rates[0]), min(rate_p, rates[1])
        if rate_m >= 1.0:
            return None
        return PairSplit(
            run.timeline.total_s - run.position(t),
            rate_m,
            partner.timeline.total_s - partner.position(t),
            rate_p,
            copy_s,
            run.spec.gpus,
            self.cluster.total_gpus - self.cluster.held,
        )

    def _pod_bytes_per_gpu(self, run: Run, k: int, t: float) -> float:
        """Resident bytes per GPU of ``run``'s pod ``k`` now (as ``suspend`` parks)."""
        if run.spec.disaggregated:
            return run.profile.role_memory_mib[run.spec.pod_roles[k]] * hw.MIB
        return run.profile.memory_mib[run.phase_at(t)] * hw.MIB

    def _copy_floor_s(self, run: Run, t: float) -> float:
        """The least a move can cost: out and back in on the same node."""
        per_gpu = max(self._pod_bytes_per_gpu(run, k, t) for k in range(len(run.placements)))
        return self._out_and_back_s(per_gpu)

    def _plan_move(
        self, run: Run, t: float
    ) -> tuple[Admission, float, float, DecisionRecord] | None:
        """Where ``run``'s gang would go if it left its GPUs now (the policy's
        choice, as for an admission), if every GPU chosen is empty; with the
        copy time (pods copy in parallel; the gang waits for the slowest) and
        the bytes moved, and the decision to record ("rebalance") if it is taken."""
        saved, released = run.placements, list(self.cluster.released)
        self.cluster.detach(run)
        try:
            nodes = self.cluster.candidates(
                run.spec.gpus_per_pod, self.fit_floor(run), self.config.candidates
            )
            if not nodes:
                return None
            snapshot = self.cluster.snapshot(nodes, self.runs, t)
            request = self.request(run, t)
            admission, _ = place_gang(snapshot, request, self.policy)
        finally:
            run.placements = saved
            self.cluster.attach(run)
            self.cluster.released[:] = released
        if not admission.admitted:
            return None
        res = self.cluster.res
        copy_s = nbytes = 0.0
        for k, p in enumerate(admission.placements):
            node = self.cluster.index[p.node]
            if any(res[node][g] for g in p.gpus):
                return None  # would share (or land on its own GPUs): not a split
            old_node, old_gpus = saved[k]
            per_gpu = self._pod_bytes_per_gpu(run, k, t)
            pod_s = self._out_and_back_s(per_gpu)
            if node != old_node:
                if self.config.relocate_bytes_per_s <= 0:
                    return None
                pod_s += per_gpu * len(old_gpus) / self.config.relocate_bytes_per_s
            copy_s = max(copy_s, pod_s)
            nbytes += 2 * per_gpu * len(old_gpus)
        record = DecisionRecord(t, "rebalance", snapshot, request, admission)
        return admission, copy_s, nbytes, record

    def _victims_exist(self, run: Run) -> bool:
        """Anyone it could take GPUs from: a lower class, or (sized) its own;
        nobody while its grace lasts (it waits or takes free room)."""
        if run.waiting_as is not None:
            return False
        mine = run.priority
        return any(
            n > 0 and (p < mine or (p == mine and run.work_left() > 0))
            for p, n in self.running_priorities.items()
        )

    def request(self, run: Run, t: float) -> GangRequest:
        run.placements = []
        return GangRequest(
            run.spec.name,
            run.priority,
            run.spec.arrival_s,
            tuple(pods_of(run, t, self.cluster)),
            run.work_left(),
            run.critical or run.aged,
        )

    def _try_place(self, run: Run, t: float) -> bool:
        low = self.fit_floor(run)
        nodes = self.cluster.candidates(run.spec.gpus_per_pod, low, self.config.candidates)
        if not nodes or (not self.policy.shares_gpus and len(nodes) < run.spec.min_nodes):
            return False
        snapshot = self.cluster.snapshot(nodes, self.runs, t)
        request = self.request(run, t)
        admission, _ = place_gang(snapshot, request, self.policy)
        if self.trace is not None:
            self.trace(DecisionRecord(t, "admit", snapshot, request, admission))
        if admission.admitted:
            self.start(run, admission, t)
        return admission.admitted


def _at_phase_start(run: Run) -> bool:
    """Whether a sharing job stands at the start of its current segment group."""
    assert run.timeline is not None
    return run.progress == (run.timeline.ends[run.seg - 1] if run.seg > 0 else 0.0)


def simulate(
    mix: Mix,
    scheduler: Scheduler,
    config: SimConfig | None = None,
    trace: Callable[[DecisionRecord], None] | None = None,
    progress: Callable[[float, int, int], None] | None = None,
) -> SimResult:
    """Run ``mix`` under ``scheduler`` to completion of every job."""
    return Simulation(mix, scheduler, config, trace, progress).run()


def _stops_at_safe_points(run: Run, pod: int) -> bool:
    """Whether a pod stops at safe points in its busy phases (the client's
    ``rlix.phase(..., safe_points=True)``): a disaggregated trainer pod, whose
    steps take seconds; a rollout pod generates its batch in one call, with no
    safe point inside it (a sleeping vLLM must have no request in flight)."""
    return run.spec.disaggregated and run.spec.pod_roles[pod] == TRAINER_ROLE
