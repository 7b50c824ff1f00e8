"""What a run measures, with the definitions the report and docs quote.

* **GPU idle %** -- over [0, makespan], sampled every ``sample_s``: one minus
  the mean over all GPUs of ``min(1, sum of residents' demand x rate)``, where demand
  is the share of a GPU's throughput a phase uses (1 for scoring, training and
  weight sync; the active batch fraction in rollout; 0 while loading, parked
  or unallocated). A GPU decoding 3 of 128 sequences counts as mostly idle
  even though nvidia-smi would show a kernel running: this counts capacity.
* **Throughput** -- completed jobs / (makespan - first arrival), per hour.
* **Memory fragmentation %** -- mean over samples of stranded HBM / total HBM.
  Stranded: on a GPU that holds at least one pod, memory that residents neither
  use nor reserve for their next phase, and that no other pod may take (always,
  for exclusive policies; for sharing policies when it is smaller than the
  smallest pod of the mix). Empty GPUs are free, not stranded.
* **JCT** -- completion minus arrival (queueing included), mean and p95.
* **Preemptions** -- jobs evicted or suspended to make room.
* **Bytes moved** -- checkpoint reloads after eviction, plus parked bytes
  out and back for suspension (both directions counted).
* **Suspended time** -- job-hours spent parked, summed over jobs.

The measures that can show a gain (docs/simulator.md, "Measures"):

* **Capacity** -- job progress per held GPU-second: the sum over jobs of
  (alone duration x GPUs) over the GPU-seconds during which a GPU held at
  least one pod. Exclusive GPUs give at most 1.0 (less for load time and
  redone work); above 1.0 is what sharing adds.
* **GPU time by category** -- [0, makespan] x GPUs split exactly into useful
  (demand-weighted progress), rollout gap (progress whose demand was below 1:
  the batch emptying in the tail, tool waits), pool idle (only where a mix has
  disaggregated jobs: a job's pool holding its GPUs while the job's other pool
  works, alone-seconds x that pool's GPUs -- the rollout pool during scoring
  and training, the trainer pool during rollout), held-not-progress (loading,
  contention, redone work; negative when overlap gains), empty while a job
  waits (queued or parked), and empty with nothing waiting (arrival gaps and
  the drain at the end).
* **JCT per priority class** and **stretch** (JCT over the job's alone
  duration including its first load; 1.0 = as if alone on the cluster).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rlix.core.phases import Shape
from rlix.core.policy.placement.sharing import CONTEXT_MIB
from rlix.core.sim import hardware as hw
from rlix.core.sim.cluster import Cluster
from rlix.core.sim.flowbound import FlowJob, min_weighted_flow_s
from rlix.core.sim.interference import Interference
from rlix.core.sim.pairing import paying_pairs, pod_kinds
from rlix.core.sim.runs import Run, State
from rlix.core.sim.workload import (
    ITERATION_PHASES,
    SEGMENTS_PER_ITERATION,
    JobSpec,
)


@dataclass(frozen=True)
class SimResult:
    mix: str
    scheduler: str
    jobs: int
    gpus: int
    makespan_s: float
    gpu_idle: float  # 0..1
    throughput_per_h: float
    fragmentation: float  # 0..1
    jct_mean_s: float
    jct_p95_s: float
    preemptions: int
    bytes_moved: float
    suspended_h: float
    lost_work_gpu_h: float
    events: int
    jct_s: tuple[float, ...] = ()
    rebalances: int = 0  # pairs split onto freed GPUs (simulator's RLix with a matrix)
    # Jobs the conductor's rule 3 parked because a GPU's residents, in their
    # current phases, were over its memory (rules without a matrix only:
    # ``overflow``).
    overflow_parks: int = 0
    series: tuple[tuple[float, float, float], ...] = ()  # (t, busy share, allocated share)
    work_gpu_s: float = 0.0
    critical_s: float = 0.0  # latest arrival + alone duration over all jobs
    mean_alone_s: float = 0.0
    # Per completed job, aligned with jct_s: priority, and alone duration with first load.
    priorities: tuple[int, ...] = ()
    alone_s: tuple[float, ...] = ()
    # Also aligned with jct_s, for the queueing bounds on JCT: arrival, GPUs and
    # demand-weighted work outside weight sync (GPU-seconds) per completed job.
    arrivals_s: tuple[float, ...] = ()
    job_gpus: tuple[int, ...] = ()
    net_work_s: tuple[float, ...] = ()
    progress_gpu_s: float = 0.0  # sum of alone duration x GPUs (each job counted once)
    net_work_gpu_s: float = 0.0  # demand-weighted work outside weight sync (the bound's W)
    load_gpu_s: float = 0.0  # sum of first load x GPUs
    held_gpu_s: float = 0.0  # GPU-seconds with at least one pod on the GPU
    empty_waiting_gpu_s: float = 0.0  # GPU-seconds empty while a job was queued or parked
    empty_idle_gpu_s: float = 0.0  # GPU-seconds empty with nothing waiting
    # Share of the sampled held GPUs whose residents' memory in their current
    # phases (a loading or restoring one: the phase it loads into) exceeded the
    # GPU. Rules with a matrix admit no such pair; under the cluster's rules
    # the engine parks one of the pair as the conductor's rule 3 does
    # (``overflow``), so what remains is a GPU where nobody could be parked.
    over_memory: float = 0.0
    # Where the gate parks (``SharingRules.parks_at_gate``): share of the
    # sampled held GPUs whose residents' memory exceeded the GPU, held by turns
    # (the ones that do not work parked), which only parking makes possible.
    by_turns: float = 0.0
    # The most host memory any one node held parked at a sample (MiB): jobs the
    # conductor parked there (their whole ``parked_bytes``, per pod on its home
    # node) and, where the gate parks, every pod of a GPU held by turns but the
    # largest, less a CUDA context each. Host memory is not a limit in the
    # model; this says how much it would take.
    host_parked_peak_mib: float = 0.0
    max_residents: int = 1  # most jobs one GPU can hold (memory of the smallest phases)
    pool_idle_gpu_s: float = 0.0  # disaggregated pools idle while the other pool works
    # What the rollout tails could lend at best (``Timeline.lendable_gpu_s``):
    # per completed job, aligned with jct_s, and over every job.
    lendable_s: tuple[float, ...] = ()
    lendable_gpu_s: float = 0.0

    @property
    def capacity(self) -> float:
        return self.progress_gpu_s / self.held_gpu_s if self.held_gpu_s > 0 else 0.0

    @property
    def closed_per_h(self) -> float:
        """Completed jobs per hour of makespan (meaningful when all arrive at 0)."""
        return self.jobs / (self.makespan_s / 3600) if self.makespan_s > 0 else 0.0

    def categories(self) -> dict[str, float]:
        """Shares of GPUs x makespan; they sum to 1 (see the module docstring)."""
        total = self.gpus * self.makespan_s
        if total <= 0:
            return {}
        gap = self.progress_gpu_s - self.work_gpu_s - self.pool_idle_gpu_s
        out = {"useful": self.work_gpu_s / total, "rollout gap": gap / total}
        if self.pool_idle_gpu_s > 0:  # only mixes with disaggregated jobs have the row
            out["pool idle"] = self.pool_idle_gpu_s / total
        out.update({
            "held, not progress": (self.held_gpu_s - self.progress_gpu_s) / total,
            "empty, jobs waiting": self.empty_waiting_gpu_s / total,
            "empty, none waiting": self.empty_idle_gpu_s / total,
        })  # fmt: skip
        return out

    def by_class(self) -> dict[int, tuple[float, float, float]]:
        """priority -> (mean JCT, p95 JCT, mean stretch) over that class's jobs."""
        out: dict[int, tuple[float, float, float]] = {}
        for p in sorted(set(self.priorities), reverse=True):
            idx = [i for i, q in enumerate(self.priorities) if q == p]
            jct = [self.jct_s[i] for i in idx]
            stretch = [self.jct_s[i] / self.alone_s[i] for i in idx]
            out[p] = (sum(jct) / len(jct), percentile(jct, 0.95), sum(stretch) / len(stretch))
        return out

    @property
    def top_stretch(self) -> float:
        """Mean stretch of the highest priority class present."""
        classes = self.by_class()
        return classes[max(classes)][2] if classes else 0.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported p95 is a real job)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Recorder:
    """Samples a running simulation and turns the samples into a ``SimResult``.

    It reads the cluster and the runs the engine mutates, never the engine
    itself: the engine owns the recorder, not the other way round.
    """

    cluster: Cluster
    runs: list[Run]
    memory_mib: int  # per GPU
    smallest_pod_mib: int
    # The gate parks the pods that do not work (``SharingRules.parks_at_gate``):
    # a GPU over its memory at everyone's holdings holds the largest and a
    # CUDA context for each other pod (an upper bound: the one resident is
    # the one that works, or worked last). Loads and restores go through the
    # gate too (the engine's ``_start_loads``), so no GPU stays over for them.
    parks_at_gate: bool = False
    # The engine's parked jobs (its ``suspended``, read live): what a sample
    # counts as parked in host memory, without walking every run.
    suspended: Mapping[int, None] = field(default_factory=dict)
    bytes_moved: float = 0.0
    preemptions: int = 0
    overflow_parks: int = 0
    rebalances: int = 0
    # (t, busy, held, stranded, over memory, held by turns): shares of all GPUs
    # at each sample
    samples: list[tuple[float, float, float, float, float, float]] = field(default_factory=list)
    work_gpu_s: float = 0.0
    critical_s: float = 0.0
    alone_s: list[float] = field(default_factory=list)
    progress_gpu_s: float = 0.0
    net_work_gpu_s: float = 0.0
    load_gpu_s: float = 0.0
    held_gpu_s: float = 0.0
    empty_waiting_gpu_s: float = 0.0
    empty_idle_gpu_s: float = 0.0
    pool_idle_gpu_s: float = 0.0
    host_parked_peak_mib: float = 0.0
    last_t: float = 0.0
    alone_by_job: dict[int, float] = field(default_factory=dict)  # with first load
    net_by_job: dict[int, float] = field(default_factory=dict)  # the bound's W, per job
    lend_by_job: dict[int, float] = field(default_factory=dict)  # tail lending, per job

    def account(self, t: float, waiting: bool) -> None:
        """Integrate held and empty GPUs over [last event, t] (constant in between)."""
        dt = t - self.last_t
        if dt <= 0:
            return
        held = self.cluster.held
        empty = (self.cluster.total_gpus - held) * dt
        self.held_gpu_s += held * dt
        if waiting:
            self.empty_waiting_gpu_s += empty
        else:
            self.empty_idle_gpu_s += empty
        self.last_t = t

    def completed(self, run: Run) -> None:
        assert run.timeline is not None
        g = run.spec.gpus
        if run.spec.disaggregated:  # each segment works on its active pool only
            active = run.profile.active_gpus
            self.work_gpu_s += run.timeline.busy_gpus_s(active)
            net = run.timeline.busy_gpus_s(active, skip_network=True)
            self.pool_idle_gpu_s += run.timeline.idle_pool_gpu_s(active, g)
        else:
            self.work_gpu_s += run.timeline.busy_gpu_s() * g
            net = run.timeline.busy_gpu_s(skip_network=True) * g
        self.net_work_gpu_s += net
        self.net_by_job[run.id] = net
        profile = run.profile
        self.lend_by_job[run.id] = run.timeline.lendable_gpu_s(
            profile.rollout_gpus, profile.tail_lend_share
        )
        alone = run.timeline.total_s
        self.progress_gpu_s += alone * g
        self.load_gpu_s += run.profile.first_load_s * g
        self.alone_s.append(alone)
        self.alone_by_job[run.id] = alone + run.profile.first_load_s
        self.critical_s = max(self.critical_s, run.spec.arrival_s + alone)

    def _job_state(self, run: Run, t: float) -> tuple[float, int, int]:
        """(delivered demand, owed MiB per GPU, MiB per GPU held now) of a
        resident job at ``t``.

        Demand is scaled by the job's progress rate: a job slowed to half speed by
        a co-runner delivers half its work, and counting its full demand would
        call a GPU busy that is really spent on contention.
        """
        mem = run.profile.memory_mib
        if run.state is State.LOADING:
            # Loading a checkpoint or restoring parked memory fills the GPU up
            # to the phase it starts (or resumes) in; counted at that from the
            # start of the load, the upper end (progress is frozen meanwhile).
            return 0.0, max(mem.values()), mem[run.phase_at(t)]
        if run.state is not State.RUNNING or run.timeline is None:
            return 0.0, max(mem.values()), 0
        seg = run.segment_at(t)
        phase = ITERATION_PHASES[seg % SEGMENTS_PER_ITERATION]
        coming = ITERATION_PHASES[(seg + 1) % SEGMENTS_PER_ITERATION]
        rate = run.rate if run.stepping else 1.0
        return run.timeline.demands[seg] * rate, max(mem[phase], mem[coming]), mem[phase]

    def _pod_state(self, run: Run, pod: int, t: float) -> tuple[float, int, int]:
        """(delivered demand, owed MiB per GPU, MiB held now) of a disaggregated
        job's pod at ``t``: its constant resident memory, and demand only while
        its pool works."""
        owed = run.profile.role_memory_mib[run.spec.pod_roles[pod]]
        if run.state is not State.RUNNING or run.timeline is None:
            # Loading or restoring it, it holds what it loads (as ``_job_state``).
            return 0.0, owed, owed if run.state is State.LOADING else 0
        seg = run.segment_at(t)
        if not run.pod_active(pod, seg):
            return 0.0, owed, owed
        rate = run.rate if run.stepping else 1.0
        return run.timeline.demands[seg] * rate, owed, owed

    def sample(self, t: float) -> None:
        cluster, cap = self.cluster, self.memory_mib
        cache: dict[int, tuple[float, int, int]] = {}
        pod_cache: dict[tuple[int, int], tuple[float, int, int]] = {}
        busy = allocated = stranded = over = turns = 0.0
        parked = self._parked_mib()  # node -> MiB in its host memory now
        for node in cluster.occupied:
            for g, holders in enumerate(cluster.res[node]):
                if not holders:
                    continue
                allocated += 1
                demand = owed = now = 0.0
                held: list[int] = []
                for i, j in enumerate(holders):
                    run = self.runs[j]
                    if run.spec.disaggregated:  # per pod: the one(s) on this GPU
                        if j in holders[:i]:
                            continue  # two of its pods here: both counted below, once
                        for q in run.pods_on(node, g):
                            key = (j, q)
                            if key not in pod_cache:
                                pod_cache[key] = self._pod_state(run, q, t)
                            d, o, m = pod_cache[key]
                            demand += d
                            owed += o
                            now += m
                            held.append(m)
                        continue
                    if j not in cache:
                        cache[j] = self._job_state(run, t)
                    d, o, m = cache[j]
                    demand += d
                    owed += o
                    now += m
                    held.append(m)
                # Where the gate parks, a GPU over its memory at everyone's
                # peaks holds one by turns: loads too go in only where their
                # peak fits (the engine's ``_start_loads``), the others parked.
                if self.parks_at_gate and now > cap and len(held) > 1:
                    resident = max(held) + CONTEXT_MIB * (len(held) - 1)
                    parked[node] = parked.get(node, 0.0) + now - resident
                    now = resident
                    turns += 1
                busy += min(1.0, demand)
                over += now > cap
                free = max(0.0, cap - owed)
                if not cluster.shares or free < self.smallest_pod_mib:
                    stranded += free
        self.host_parked_peak_mib = max(self.host_parked_peak_mib, *parked.values(), 0.0)
        total = cluster.total_gpus
        self.samples.append(
            (
                t,
                busy / total,
                allocated / total,
                stranded / (total * cap),
                over / total,
                turns / total,
            )
        )

    def _parked_mib(self) -> dict[int, float]:
        """Node -> MiB of the jobs parked in its host memory (each pod's share
        on its home node, as ``preempting.suspend`` counted the bytes)."""
        parked: dict[int, float] = {}
        for jid in self.suspended:
            run = self.runs[jid]
            if run.state is not State.SUSPENDED or not run.placements:
                continue
            shares: list[float] = [1.0] * len(run.placements)
            if run.spec.disaggregated:
                mib = run.profile.role_memory_mib
                pods = zip(run.spec.pod_roles, run.spec.pod_gpus, strict=True)
                shares = [float(mib[r] * n) for r, n in pods]
            whole = sum(shares) or 1.0
            for (node, _), share in zip(run.placements, shares, strict=True):
                parked[node] = parked.get(node, 0.0) + run.parked_bytes / hw.MIB * share / whole
        return parked

    def result(self, *, mix: str, scheduler: str, events: int) -> SimResult:
        runs = self.runs
        ended = [r for r in runs if r.ended is not None]
        makespan = max((r.ended or 0.0) for r in ended) if ended else 0.0
        first = min((r.spec.arrival_s for r in runs), default=0.0)
        inside = [s for s in self.samples if s[0] <= makespan] or self.samples[:1]
        jct = [(r.ended or 0.0) - r.spec.arrival_s for r in ended]
        span_h = max(makespan - first, 1e-9) / 3600
        n = max(len(inside), 1)
        return SimResult(
            mix=mix,
            scheduler=scheduler,
            jobs=len(ended),
            gpus=self.cluster.total_gpus,
            makespan_s=makespan,
            gpu_idle=1.0 - sum(s[1] for s in inside) / n,
            throughput_per_h=len(ended) / span_h,
            fragmentation=sum(s[3] for s in inside) / n,
            jct_mean_s=sum(jct) / len(jct) if jct else 0.0,
            jct_p95_s=percentile(jct, 0.95),
            preemptions=self.preemptions,
            rebalances=self.rebalances,
            overflow_parks=self.overflow_parks,
            bytes_moved=self.bytes_moved,
            suspended_h=sum(r.suspended_s for r in runs) / 3600,
            lost_work_gpu_h=sum(r.lost_s * r.spec.gpus for r in runs) / 3600,
            events=events,
            jct_s=tuple(jct),
            series=tuple((s[0], s[1], s[2]) for s in inside),
            work_gpu_s=self.work_gpu_s,
            critical_s=self.critical_s,
            mean_alone_s=sum(self.alone_s) / len(self.alone_s) if self.alone_s else 0.0,
            priorities=tuple(r.spec.priority for r in ended),
            alone_s=tuple(self.alone_by_job[r.id] for r in ended),
            arrivals_s=tuple(r.spec.arrival_s for r in ended),
            job_gpus=tuple(r.spec.gpus for r in ended),
            net_work_s=tuple(self.net_by_job[r.id] for r in ended),
            progress_gpu_s=self.progress_gpu_s,
            net_work_gpu_s=self.net_work_gpu_s,
            load_gpu_s=self.load_gpu_s,
            held_gpu_s=self.held_gpu_s,
            empty_waiting_gpu_s=self.empty_waiting_gpu_s,
            empty_idle_gpu_s=self.empty_idle_gpu_s,
            over_memory=sum(s[4] for s in inside) / max(sum(s[2] for s in inside), 1e-12),
            by_turns=sum(s[5] for s in inside) / max(sum(s[2] for s in inside), 1e-12),
            max_residents=max(1, self.memory_mib // max(1, self.smallest_pod_mib)),
            pool_idle_gpu_s=self.pool_idle_gpu_s,
            host_parked_peak_mib=self.host_parked_peak_mib,
            lendable_s=tuple(self.lend_by_job[r.id] for r in ended),
            lendable_gpu_s=sum(self.lend_by_job.values()),
        )


@dataclass(frozen=True)
class Bound:
    """What no scheduler can beat: total work over capacity, and each job's own length."""

    makespan_s: float
    gpu_idle: float
    throughput_per_h: float
    jct_mean_s: float


def bound(result: SimResult, first_arrival_s: float = 0.0) -> Bound:
    """Lower bounds from one run's workload (identical for every scheduler).

    Sharing only ever slows a job down (rate <= 1), so a job cannot finish before
    its arrival plus its alone duration, and the cluster cannot finish before
    all demand-weighted work fits into its GPU-time. Idle time is bounded by
    the same work over the smallest possible makespan.
    """
    makespan = max(result.work_gpu_s / result.gpus, result.critical_s)
    span_h = max(makespan - first_arrival_s, 1e-9) / 3600
    idle = 1.0 - result.work_gpu_s / (result.gpus * makespan) if makespan > 0 else 0.0
    return Bound(makespan, max(0.0, idle), result.jobs / span_h, result.mean_alone_s)


@dataclass(frozen=True)
class Bounds:
    """Independent upper bounds for exclusive and for sharing schedulers (docs/simulator.md).

    All come from the workload alone (identical for every scheduler), never
    from a scheduler's run.
    """

    exclusive_capacity: float
    sharing_capacity: float
    exclusive_closed_per_h: float
    sharing_closed_per_h: float
    jct_mean_s: float  # lower bound, any scheduler: mean alone duration with first load
    top_stretch: float  # lower bound, any scheduler (= sharing_top_stretch, at least 1)
    kappa: float  # most useful work one shared GPU can deliver per second
    # Estimates for two jobs per GPU under the sharing rules: ``pair_factor`` is
    # what the estimates use (``pairing.pairing_factor``: the mix's best
    # pairing as a whole), ``pair_ceiling`` its best single pair, for reference.
    pair_factor: float = 1.0
    pair_ceiling: float = 1.0
    pair_capacity: float = 0.0
    pair_closed_per_h: float = 0.0
    # Lower bounds on mean JCT that count queueing: the larger of the counting
    # bound (``queueing_jct_s``) and the width-aware one (``flow_bounds``);
    # pairs: estimate.
    exclusive_jct_mean_s: float = 0.0
    pair_jct_mean_s: float = 0.0
    sharing_jct_mean_s: float = 0.0
    # Lower bounds on the top priority class's mean stretch (``flow_bounds``).
    exclusive_top_stretch: float = 1.0
    pair_top_stretch: float = 1.0
    sharing_top_stretch: float = 1.0
    # Estimates for exclusive GPUs whose rollout tails are lent at best
    # (``Timeline.lendable_gpu_s``; ``bounds`` and ``flow_bounds``).
    lend_capacity: float = 0.0
    lend_closed_per_h: float = 0.0
    lend_jct_mean_s: float = 0.0
    lend_top_stretch: float = 1.0


def sharing_kappa(interference: Interference, max_residents: int) -> float:
    """Most demand-weighted work per second one GPU delivers to compute/memory phases.

    With n residents of pressures p_i <= 1, demands d_i <= p_i, and every
    compute/memory pair slowing each other by at least I, resident i delivers
    d_i r_i <= p_i / (1 + I (P - p_i)) <= p_i / (1 + I (P - 1)) where P = sum p_k
    (network residents only lower r_i, so leaving them out is safe). The sum is
    P / (1 + I (P - 1)) when P >= 1, increasing in P for I <= 1, hence at most
    n / (1 + I (n - 1)); for I > 1 it decreases, so at most 1 (P = 1). When
    P < 1 the sum is at most P < 1 (every r_i <= 1).
    """
    busy = (Shape.COMPUTE, Shape.MEMORY)
    i = min(interference.shapes(a, b) for a in busy for b in busy)
    n = max(1, max_residents)
    return 1.0 if i >= 1.0 else n / (1.0 + i * (n - 1))


def pair_ceiling(
    jobs: Iterable[JobSpec], interference: Interference, memory_mib: int = hw.H200_MEMORY_MIB
) -> float:
    """Best expected progress of two jobs of one priority class on a GPU (>= 1).

    Rule 5's own expectation (``sharing.pair_rates``: two cycles drifting
    independently, or taking turns under the phase gate where both pods idle
    part of their cycle; each pod's declared load profile) over every pair of
    pod kinds in ``jobs`` that fit one GPU's memory together at their peaks
    (both stay resident through every phase); 1 where no pair beats running
    them one after the other. Pods, not jobs, meet on a GPU: a colocated
    job's pods carry the job's profile, a disaggregated job's rollout and
    trainer pods each their own (idle while the other pool works), so the
    pairs judged are the real ones; two pods of one job never pair
    (``pairing.paying_pairs``). An estimate for the policy class "at most two
    jobs per GPU, one class", not a proof (docs/simulator.md).
    """
    work, owners = pod_kinds((s, 1.0) for s in jobs)
    pairs = paying_pairs(sorted(work, key=repr), owners, interference, memory_mib)
    return max((1.0, *(ri + rj for _, _, ri, rj in pairs)))


def srpt_completions(jobs: Sequence[tuple[float, float]], speed: float) -> list[float]:
    """Completion times of (arrival, work) jobs under preemptive SRPT on one
    machine doing ``speed`` units of work per second, in the jobs' order.

    On one preemptive machine with release dates SRPT has the fewest jobs
    unfinished at every instant (Schrage 1968), so no other order does better.
    """
    done = [0.0] * len(jobs)
    order = sorted(range(len(jobs)), key=lambda k: jobs[k])
    waiting: list[tuple[float, int]] = []  # (work left, job)
    t, i = 0.0, 0
    while speed > 0 and (i < len(order) or waiting):
        if not waiting:
            t = max(t, jobs[order[i]][0])
        while i < len(order) and jobs[order[i]][0] <= t:
            heapq.heappush(waiting, (jobs[order[i]][1], order[i]))
            i += 1
        left, k = heapq.heappop(waiting)
        upcoming = jobs[order[i]][0] if i < len(order) else math.inf
        if t + left / speed <= upcoming:
            t = done[k] = t + left / speed
        else:  # the next arrival may be shorter than what is left of this one
            heapq.heappush(waiting, (left - (upcoming - t) * speed, k))
            t = upcoming
    return done


def _mean_unfinished_s(arrivals: Sequence[float], *ends: Sequence[float]) -> float:
    """Mean flow time of the pointwise largest count of unfinished jobs.

    Job j counts as unfinished in [arrival_j, end_j) for each ``ends``; the
    integral over time of the largest of those counts, over the jobs.
    """
    events = sorted(
        (t, which, step)
        for which, end in enumerate(ends)
        for a, e in zip(arrivals, end, strict=True)
        for t, step in ((a, 1), (e, -1))
    )
    counts = [0] * len(ends)
    total, last = 0.0, events[0][0] if events else 0.0
    for t, which, step in events:
        total += max(counts) * (t - last)
        last = t
        counts[which] += step
    return total / len(arrivals) if arrivals else 0.0


def queueing_jct_s(result: SimResult, kappa: float, pair: float) -> tuple[float, float, float]:
    """Lower bounds on mean JCT that count queueing: (exclusive, pairs estimate, sharing).

    Mean JCT is the integral over time of the number of unfinished jobs, over
    the jobs. At any instant that number is at least (1) the jobs still inside
    their own alone duration since arrival, and (2) the jobs unfinished under
    SRPT on one machine of the cluster's speed: any schedule can be replayed on
    that machine, each job getting the GPU-time the schedule gave it, and then
    finishes every job no later (``srpt_completions``). Exclusive: job j needs
    its GPUs x (alone + first load) of held GPU-time, at most all the GPUs per
    second. Sharing: its net work W_j, at most ``kappa`` per held GPU per second
    (``sharing_kappa``). Pairs: the exclusive sizes at ``pair`` x the GPUs, an
    estimate as ``pair_ceiling`` is. The machine lets a job use more GPUs than
    its gang and ignores priority, so these bound every scheduler, and loosely.
    """
    arrivals = result.arrivals_s
    alone_end = [a + s for a, s in zip(arrivals, result.alone_s, strict=True)]
    g = max(result.gpus, 1)
    held = [(a, n * s) for a, n, s in zip(arrivals, result.job_gpus, result.alone_s, strict=True)]
    net = list(zip(arrivals, result.net_work_s, strict=True))
    return (
        _mean_unfinished_s(arrivals, alone_end, srpt_completions(held, g)),
        _mean_unfinished_s(arrivals, alone_end, srpt_completions(held, g * pair)),
        _mean_unfinished_s(arrivals, alone_end, srpt_completions(net, g * kappa)),
    )


@dataclass(frozen=True)
class FlowBounds:
    """Width-aware lower bounds from ``flowbound``: mean JCT over every job and
    mean stretch over the top priority class, each (exclusive, pairs, sharing)."""

    jct_mean_s: tuple[float, float, float]
    top_stretch: tuple[float, float, float]
    # Lend (an estimate): the exclusive version with each job's held GPU-time
    # less what its rollout tails could lend (``lendable_s``).
    lend_jct_mean_s: float = 0.0
    lend_top_stretch: float = 1.0


# (arrival, alone with first load, GPUs, net work, priority, lendable GPU-s) per job.
_FlowRow = tuple[float, float, int, float, int, float]


def flow_bounds(result: SimResult, kappa: float, pair: float) -> FlowBounds:
    """The flow-time relaxation (``flowbound``) of the jobs in ``result``.

    Exclusive: job j needs GPUs x (alone + first load) of held GPU-time, at
    most its GPUs per second (a held GPU advances one job by at most one
    alone-second), and all the GPUs give G per second. Pairs (an estimate, as
    ``pair_ceiling`` is): the same jobs at ``pair`` x G. Sharing: job j needs
    its net work W_j, at most its GPUs of it per second (demand <= 1 per GPU,
    rate <= 1), never sooner than its alone length, and a held GPU delivers at
    most ``kappa`` per second (``sharing_kappa``). Lend (an estimate from
    above for exclusive schedulers that lend rollout tails, not a proof): the
    exclusive version with job j's held GPU-time less ``lendable_s[j]``, as if
    a borrower took every such GPU-second at no cost. Stretch: the top class
    alone (dropping the others only frees capacity), each weighted by 1 / its
    length.
    """
    g = max(result.gpus, 1)
    top = max(result.priorities, default=0)
    lendable = result.lendable_s or (0.0,) * len(result.alone_s)
    rows = list(
        zip(result.arrivals_s, result.alone_s, result.job_gpus, result.net_work_s,
            result.priorities, lendable, strict=True)
    )  # fmt: skip

    def held(weighted: bool, rows_: list[_FlowRow], lent: bool = False) -> list[FlowJob]:
        return [
            FlowJob(a, max(n * s - (f if lent else 0.0), 1e-9), n, s, 1.0 / s if weighted else 1.0)
            for a, s, n, _, _, f in rows_
        ]

    def net(weighted: bool, rows_: list[_FlowRow]) -> list[FlowJob]:
        return [
            FlowJob(a, w, n, s, 1.0 / s if weighted else 1.0) for a, s, n, w, _, _ in rows_ if w > 0
        ]

    def four(weighted: bool) -> tuple[float, float, float, float]:
        chosen = [r for r in rows if r[4] == top] if weighted else rows
        floor = 1.0 if weighted else 0.0
        if not chosen:
            return (floor,) * 4
        exclusive = min_weighted_flow_s(held(weighted, chosen), g)
        paired = min_weighted_flow_s(held(weighted, chosen), g * pair) if pair > 1 else exclusive
        shared = min_weighted_flow_s(net(weighted, chosen), g * kappa)
        lent = min_weighted_flow_s(held(weighted, chosen, lent=True), g)
        n = len(chosen)
        return (
            max(floor, exclusive / n),
            max(floor, paired / n),
            max(floor, shared / n),
            max(floor, lent / n),
        )

    jct, stretch = four(False), four(True)
    return FlowBounds(jct[:3], stretch[:3], jct[3], stretch[3])


def bounds(
    result: SimResult,
    interference: Interference,
    pair: float = 1.0,
    arrivals: SimResult | None = None,
    ceiling: float | None = None,
) -> Bounds:
    """Bounds from one run's workload (the jobs and their timelines, not its schedule).

    Exclusive: a held GPU-second advances one job by at most one alone-second,
    and load seconds advance none, so held >= progress + load: capacity <=
    progress / (progress + load), and all-at-t=0 makespan >= max((progress +
    load) / GPUs, longest job). Sharing: a held GPU delivers at most ``kappa``
    of compute/memory work per second (``sharing_kappa``), so held >= W / kappa
    with W that work: capacity <= kappa x progress / W, makespan >= max(W /
    (kappa x GPUs), longest job). Any scheduler: a job takes at least its alone
    duration plus its first load, so mean JCT >= their mean and stretch >= 1;
    with queueing, the larger of ``queueing_jct_s`` and ``flow_bounds`` on
    ``arrivals`` (the same jobs under their arrivals; default ``result``
    itself), and the top class's stretch from ``flow_bounds``. Pairs: the
    estimates at ``pair`` GPUs of progress per held GPU (``pairing.pairing_factor``);
    ``ceiling`` (default ``pair``) is only reported. Lend: the exclusive
    bounds with held GPU-time less what the rollout tails could lend at best
    (``lendable_gpu_s``; an estimate, ``flow_bounds``'s fourth version).
    """
    kappa = sharing_kappa(interference, result.max_residents)
    timed = arrivals or result
    counted = queueing_jct_s(timed, kappa, pair)
    flow = flow_bounds(timed, kappa, pair)
    jct_excl, jct_pair, jct_share = (
        max(a, b) for a, b in zip(counted, flow.jct_mean_s, strict=True)
    )
    longest = max(result.alone_s, default=0.0)
    g = max(result.gpus, 1)
    exclusive_held = result.progress_gpu_s + result.load_gpu_s
    shared_held = result.net_work_gpu_s / kappa
    lent_held = exclusive_held - result.lendable_gpu_s
    jct_any = sum(timed.alone_s) / len(timed.alone_s) if timed.alone_s else 0.0

    def per_h(makespan: float) -> float:
        return result.jobs * 3600 / makespan if makespan > 0 else 0.0

    return Bounds(
        exclusive_capacity=result.progress_gpu_s / exclusive_held if exclusive_held else 0.0,
        sharing_capacity=result.progress_gpu_s / shared_held if shared_held else 0.0,
        exclusive_closed_per_h=per_h(max(exclusive_held / g, longest)),
        sharing_closed_per_h=per_h(max(shared_held / g, longest)),
        jct_mean_s=sum(result.alone_s) / len(result.alone_s) if result.alone_s else 0.0,
        top_stretch=flow.top_stretch[2],
        kappa=kappa,
        pair_factor=pair,
        pair_ceiling=pair if ceiling is None else ceiling,
        pair_capacity=(pair * result.progress_gpu_s / exclusive_held if exclusive_held else 0.0),
        pair_closed_per_h=per_h(max(exclusive_held / (g * pair), longest)),
        exclusive_jct_mean_s=jct_excl,
        pair_jct_mean_s=jct_pair,
        sharing_jct_mean_s=jct_share,
        exclusive_top_stretch=flow.top_stretch[0],
        pair_top_stretch=flow.top_stretch[1],
        sharing_top_stretch=flow.top_stretch[2],
        lend_capacity=result.progress_gpu_s / lent_held if lent_held > 0 else 0.0,
        lend_closed_per_h=per_h(max(lent_held / g, longest)),
        lend_jct_mean_s=max(flow.lend_jct_mean_s, jct_any),
        lend_top_stretch=flow.lend_top_stretch,
    )
