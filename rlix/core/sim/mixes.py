"""Named workload mixes. Written, documented and frozen BEFORE any policy was tuned.

Each mix fixes the cluster size, the job population and an *offered load*: the
arrival window is set so that the jobs' total exclusive GPU-time is ``load``
times the cluster's GPU-time over that window. A load above 1 keeps a queue,
so throughput measures how much work a scheduler fits, not the arrival rate.
Changing a mix after looking at results would be tuning the workload to the
policy; docs/simulator.md records why each number was chosen.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from rlix.core.sim.workload import JobSpec, profile_for


@dataclass(frozen=True, slots=True)
class Mix:
    name: str
    description: str
    nodes: int
    gpus_per_node: int
    jobs: tuple[JobSpec, ...]
    load: float


@dataclass(frozen=True, slots=True)
class _Kind:
    """One kind of job in a mix, drawn with ``weight``."""

    weight: float
    tenant: str
    models: tuple[tuple[str, int], ...]  # (model, gpus) choices
    iterations: tuple[int, int]
    priority: int = 0
    preemptible: bool = True
    response_median: int = 2000
    response_sigma: float = 1.0
    max_response: int = 16384
    env_wait: float = 0.0
    prompts: int = 128
    # 0: colocated; else disaggregated with this share of the GPUs decoding
    # (JobSpec.rollout_gpus = gpus x share), the rest training.
    rollout_share: float = 0.0


def _draw(kinds: tuple[_Kind, ...], count: int, rng: random.Random) -> list[JobSpec]:
    weights = [k.weight for k in kinds]
    jobs = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        model, gpus = rng.choice(kind.models)
        jobs.append(
            JobSpec(
                name=f"{kind.tenant}/job-{i:05d}",
                model=model,
                gpus=gpus,
                iterations=rng.randint(*kind.iterations),
                arrival_s=0.0,
                priority=kind.priority,
                preemptible=kind.preemptible,
                tenant=kind.tenant,
                prompts=kind.prompts,
                response_median=kind.response_median,
                response_sigma=kind.response_sigma,
                max_response=kind.max_response,
                env_wait=kind.env_wait,
                index=i,
                rollout_gpus=int(gpus * kind.rollout_share),
            )
        )
    return jobs


def expected_gpu_s(spec: JobSpec) -> float:
    """Exclusive GPU-seconds of a job with its *median* rollout (no randomness)."""
    p = profile_for(spec)
    longest = p.length_quantile(0.5 ** (1.0 / p.sequences))
    bulk_s, _, tail_s, _ = p.rollout_segments(longest)
    per_iteration = bulk_s + tail_s + p.scoring_s + p.training_s + p.weight_sync_s
    return per_iteration * spec.iterations * spec.gpus


def _with_arrivals(
    jobs: list[JobSpec], capacity_gpus: int, load: float, rng: random.Random
) -> tuple[JobSpec, ...]:
    """Poisson arrivals over the window that makes offered load equal ``load``."""
    window = sum(expected_gpu_s(j) for j in jobs) / (load * capacity_gpus)
    times = sorted(rng.uniform(0.0, window) for _ in jobs)
    return tuple(replace(j, arrival_s=t) for j, t in zip(jobs, times, strict=True))


SMALL_LAB = (
    _Kind(0.25, "lab", (("1.5b", 1), ("1.5b", 2), ("1.5b", 4)), (30, 150)),
    _Kind(0.50, "lab", (("7b", 8),), (30, 150)),
    _Kind(0.15, "lab", (("14b", 8),), (30, 150)),
    _Kind(0.10, "lab", (("32b", 16),), (30, 150)),
)
MIXED_TENANTS = (
    _Kind(0.15, "prod", (("32b", 16), ("72b", 32)), (50, 200), 100, False),
    _Kind(0.45, "research", (("7b", 8), ("14b", 8)), (30, 150), 50, True),
    _Kind(0.40, "sweep", (("1.5b", 1), ("1.5b", 2), ("1.5b", 4), ("7b", 8)), (20, 80), 0, True),
)
AGENTIC = (
    _Kind(0.6, "agent", (("7b", 8), ("14b", 8)), (30, 120), 0, True, 3000, 1.5, 32768, 0.35, 64),
    _Kind(0.4, "agent", (("32b", 16),), (30, 120), 0, True, 3000, 1.5, 32768, 0.35, 64),
)
# Issue 16: synchronous disaggregated GRPO-like jobs (separate rollout and
# trainer pools, as verl's disaggregated mode, AReaL, StreamRL and RollMux run
# them) beside a few colocated ones; small-lab's sizes and iteration counts.
# Half of a disaggregated job's GPUs decode, half train: in this model a
# rollout lasts as long as its longest response whatever the pool size, so a
# larger rollout pool would only slow training (docs/simulator.md).
DISAGGREGATED = (
    _Kind(0.20, "disagg", (("1.5b", 2), ("1.5b", 4)), (30, 150), rollout_share=0.5),
    _Kind(0.35, "disagg", (("7b", 8),), (30, 150), rollout_share=0.5),
    _Kind(0.15, "disagg", (("14b", 8),), (30, 150), rollout_share=0.5),
    _Kind(0.10, "disagg", (("32b", 16),), (30, 150), rollout_share=0.5),
    _Kind(0.20, "coloc", (("7b", 8), ("14b", 8)), (30, 150)),
)


def _build(
    name: str, description: str, kinds: tuple[_Kind, ...], *, nodes: int, jobs: int, seed: int
) -> Mix:
    rng = random.Random(f"{seed}/{name}")
    load = 1.3
    drawn = _with_arrivals(_draw(kinds, jobs, rng), nodes * 8, load, rng)
    return Mix(name, description, nodes, 8, drawn, load)


DAY_S = 86400.0
DIURNAL_SWING = 0.6  # peak rate 1.6x the mean, trough 0.4x
BURST = 4  # sweep jobs submitted together (one hyper-parameter sweep)
ITERATIONS_MEDIAN, ITERATIONS_SIGMA, ITERATIONS_RANGE = 60, 1.0, (5, 1500)


def _diurnal_times(count: int, window: float, rng: random.Random) -> list[float]:
    """``count`` arrival times in [0, window) with rate proportional to
    1 + DIURNAL_SWING * sin(2 pi t / day), by thinning uniform draws."""
    times: list[float] = []
    while len(times) < count:
        t = rng.uniform(0.0, window)
        rate = 1.0 + DIURNAL_SWING * math.sin(2 * math.pi * t / DAY_S)
        if rng.random() * (1.0 + DIURNAL_SWING) < rate:
            times.append(t)
    return sorted(times)


def _build_trace(name: str, description: str, *, nodes: int, jobs: int, seed: int) -> Mix:
    """mixed-tenants' population with trace-like arrivals and heavy-tailed sizes.

    Public GPU-cluster traces (Microsoft Philly: Jeon et al., USENIX ATC 2019;
    SenseTime Helios: Hu et al., SC 2021) show submissions that follow the
    working day, jobs submitted in batches (sweeps), and job durations spread
    over orders of magnitude with a few long jobs holding most GPU-time. So:
    arrivals are a diurnal non-homogeneous Poisson process, sweep jobs come in
    bursts of ``BURST`` at one instant, and iterations are lognormal (median
    60, sigma 1.0, clipped to 5-1,500) instead of uniform.
    """
    rng = random.Random(f"{seed}/{name}")
    lo, hi = ITERATIONS_RANGE
    drawn = [
        replace(
            j,
            iterations=min(
                hi,
                max(lo, round(rng.lognormvariate(math.log(ITERATIONS_MEDIAN), ITERATIONS_SIGMA))),
            ),
        )
        for j in _draw(MIXED_TENANTS, jobs, rng)
    ]
    load = 1.3
    window = sum(expected_gpu_s(j) for j in drawn) / (load * nodes * 8)
    times = iter(_diurnal_times(jobs, window, rng))
    out: list[JobSpec] = []
    t, burst_left = 0.0, 0
    for j in drawn:
        if j.tenant != "sweep" or burst_left == 0:
            t = next(times)
            burst_left = BURST if j.tenant == "sweep" else 0
        if j.tenant == "sweep":
            burst_left -= 1
        out.append(replace(j, arrival_s=t))
    ordered = sorted(out, key=lambda j: (j.arrival_s, j.index))
    return Mix(name, description, nodes, 8, tuple(ordered), load)


MIXES: dict[str, tuple[str, Callable[[int], Mix]]] = {
    "small-lab": (
        "16 nodes x 8 H200, 200 jobs of one lab, equal priority, 1.5B-32B models",
        lambda seed: _build(
            "small-lab", MIXES["small-lab"][0], SMALL_LAB, nodes=16, jobs=200, seed=seed
        ),
    ),
    "mixed-tenants": (
        "64 nodes, 600 jobs: prod (pri 100, not preemptible, 32B/72B), "
        "research (pri 50), sweeps (pri 0)",
        lambda seed: _build(
            "mixed-tenants", MIXES["mixed-tenants"][0], MIXED_TENANTS, nodes=64, jobs=600, seed=seed
        ),
    ),
    "agentic": (
        "32 nodes, 300 agentic jobs: heavier tail (sigma 1.5, 32K cap), 35% tool waits",
        lambda seed: _build("agentic", MIXES["agentic"][0], AGENTIC, nodes=32, jobs=300, seed=seed),
    ),
    "trace": (
        "64 nodes, 600 jobs drawn like mixed-tenants; diurnal, bursty arrivals and "
        "heavy-tailed (lognormal) job sizes, as in the Philly and Helios traces",
        lambda seed: _build_trace("trace", MIXES["trace"][0], nodes=64, jobs=600, seed=seed),
    ),
    "disaggregated": (
        "16 nodes, 200 jobs of one class: 80% disaggregated (rollout pool = half the "
        "GPUs, trainer pool the other half; 1.5B-32B), 20% colocated 7B/14B",
        lambda seed: _build(
            "disaggregated",
            MIXES["disaggregated"][0],
            DISAGGREGATED,
            nodes=16,
            jobs=200,
            seed=seed,
        ),
    ),
    "scale": (
        "1,000 nodes x 8 GPUs, 5,000 jobs drawn like mixed-tenants (the speed test)",
        lambda seed: _build(
            "scale", MIXES["scale"][0], MIXED_TENANTS, nodes=1000, jobs=5000, seed=seed
        ),
    ),
}


def make_mix(
    name: str, seed: int = 0, jobs: int | None = None, gpu_memory_utilization: float = 0.0
) -> Mix:
    """Build the named mix; ``jobs`` truncates it (keeps arrivals) for quick runs;
    ``gpu_memory_utilization`` sets vLLM's preallocation on every job (0: none)."""
    if name not in MIXES:
        raise KeyError(f"unknown mix {name!r}; known: {', '.join(MIXES)}")
    mix = MIXES[name][1](seed)
    if jobs is not None:
        mix = replace(mix, jobs=mix.jobs[:jobs])
    if gpu_memory_utilization:
        specs = tuple(replace(j, gpu_memory_utilization=gpu_memory_utilization) for j in mix.jobs)
        mix = replace(mix, jobs=specs)
    return mix


def closed_batch(mix: Mix) -> Mix:
    """The same jobs, all submitted at t=0: throughput is then jobs / makespan,
    set by how much work a scheduler fits, not by when the last job arrived."""
    jobs = tuple(replace(j, arrival_s=0.0) for j in mix.jobs)
    return replace(mix, name=f"{mix.name}-closed", jobs=jobs)
