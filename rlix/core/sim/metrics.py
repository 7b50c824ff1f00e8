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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlix.core.sim.cluster import Cluster
from rlix.core.sim.runs import Run, State
from rlix.core.sim.workload import ITERATION_PHASES, SEGMENTS_PER_ITERATION


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
    series: tuple[tuple[float, float, float], ...] = ()  # (t, busy share, allocated share)
    work_gpu_s: float = 0.0
    critical_s: float = 0.0  # latest arrival + alone duration over all jobs
    mean_alone_s: float = 0.0


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
    bytes_moved: float = 0.0
    preemptions: int = 0
    samples: list[tuple[float, float, float, float]] = field(default_factory=list)
    work_gpu_s: float = 0.0
    critical_s: float = 0.0
    alone_s: list[float] = field(default_factory=list)

    def completed(self, run: Run) -> None:
        assert run.timeline is not None
        self.work_gpu_s += run.timeline.busy_gpu_s() * run.spec.gpus
        alone = run.timeline.total_s
        self.alone_s.append(alone)
        self.critical_s = max(self.critical_s, run.spec.arrival_s + alone)

    def _job_state(self, run: Run, t: float) -> tuple[float, int]:
        """(delivered demand, owed MiB per GPU) of a resident job at ``t``.

        Demand is scaled by the job's progress rate: a job slowed to half speed by
        a co-runner delivers half its work, and counting its full demand would
        call a GPU busy that is really spent on contention.
        """
        mem = run.profile.memory_mib
        if run.state is not State.RUNNING or run.timeline is None:
            return 0.0, max(mem.values())
        seg = run.segment_at(t)
        phase = ITERATION_PHASES[seg % SEGMENTS_PER_ITERATION]
        coming = ITERATION_PHASES[(seg + 1) % SEGMENTS_PER_ITERATION]
        rate = run.rate if run.stepping else 1.0
        return run.timeline.demands[seg] * rate, max(mem[phase], mem[coming])

    def sample(self, t: float) -> None:
        cluster, cap = self.cluster, self.memory_mib
        cache: dict[int, tuple[float, int]] = {}
        busy = allocated = stranded = 0.0
        for node in cluster.occupied:
            for holders in cluster.res[node]:
                if not holders:
                    continue
                allocated += 1
                demand = owed = 0.0
                for j in holders:
                    if j not in cache:
                        cache[j] = self._job_state(self.runs[j], t)
                    d, o = cache[j]
                    demand += d
                    owed += o
                busy += min(1.0, demand)
                free = max(0.0, cap - owed)
                if not cluster.shares or free < self.smallest_pod_mib:
                    stranded += free
        total = cluster.total_gpus
        self.samples.append((t, busy / total, allocated / total, stranded / (total * cap)))

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
            bytes_moved=self.bytes_moved,
            suspended_h=sum(r.suspended_s for r in runs) / 3600,
            lost_work_gpu_h=sum(r.lost_s * r.spec.gpus for r in runs) / 3600,
            events=events,
            jct_s=tuple(jct),
            series=tuple((s[0], s[1], s[2]) for s in inside),
            work_gpu_s=self.work_gpu_s,
            critical_s=self.critical_s,
            mean_alone_s=sum(self.alone_s) / len(self.alone_s) if self.alone_s else 0.0,
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
