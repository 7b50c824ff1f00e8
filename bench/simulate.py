"""`make bench`: every workload mix under every scheduler, over several seeds -> tables.

For each mix and seed it runs every scheduler twice: on the mix as it arrives
(open: JCT, stretch, GPU time by category) and on the same jobs all submitted
at t=0 (closed batch: throughput = jobs / makespan, and capacity). Every cell
is the median over seeds with the min-max spread; the bound columns are the
provable limits of rlix.core.sim.metrics.bounds. Writes bench/results/<mix>.md
and <mix>.json, <mix>-utilization.png and <mix>-jct-cdf.png (first seed, open),
and interference.md: the same runs under the assumed and the measured matrix.
Matplotlib (Agg) is used here only, never in rlix.core. Definitions:
docs/simulator.md.

    .venv/bin/python bench/simulate.py                        # default mixes, seeds 0 1 2
    .venv/bin/python bench/simulate.py --mix small-lab --seeds 0
    .venv/bin/python bench/simulate.py --interference bench/results/gpu_interference.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from rlix.core.policy.ordering import CLASS_GRACE, DEFAULT_GRACE, TOP_GRACE, Grace, parse_share
from rlix.core.sim import hardware as hw
from rlix.core.sim.engine import SimConfig, simulate
from rlix.core.sim.interference import ASSUMED, DEFAULT, Interference, from_json
from rlix.core.sim.metrics import Bounds, SimResult, bounds, pair_ceiling
from rlix.core.sim.mixes import MIXES as KNOWN
from rlix.core.sim.mixes import closed_batch, expected_gpu_s, make_mix
from rlix.core.sim.pairing import pairing_factor
from rlix.core.sim.schedulers import SCHEDULERS, scheduler

RESULTS = Path(__file__).resolve().parent / "results"
# "scale" (1,000 nodes, 5,000 jobs) takes ~5 min per RLix run on the shared
# 2-core machine, x 2 (open and closed) x 3 seeds: run it on request only.
DEFAULT_MIXES = ("small-lab", "mixed-tenants", "agentic", "trace")
SUBJECT = "rlix"
SUSPEND = {
    "link": (hw.PCIE_D2H_BYTES_PER_S, hw.PCIE_H2D_BYTES_PER_S),
    "cuda-checkpoint": (hw.CUDA_CHECKPOINT_BYTES_PER_S, hw.CUDA_CHECKPOINT_BYTES_PER_S),
    "vllm-sleep": (hw.VLLM_SLEEP_BYTES_PER_S, hw.VLLM_SLEEP_BYTES_PER_S),
}


@dataclass
class Runs:
    """Per scheduler, one open and one closed result per seed; bounds per seed."""

    open: dict[str, list[SimResult]] = field(default_factory=dict)
    closed: dict[str, list[SimResult]] = field(default_factory=dict)
    bounds: list[Bounds] = field(default_factory=list)
    wall_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    label: str
    better: str  # "higher" | "lower"
    value: Callable[[Runs, str], list[float]]  # per seed, for one scheduler
    bound: Callable[[Sequence[Bounds]], str] | None = None  # from every seed's bounds
    fmt: str = "{:.2f}"


def _med(bs: Sequence[Bounds], f: Callable[[Bounds], float]) -> float:
    return statistics.median(f(b) for b in bs)


def _open(f: Callable[[SimResult], float]) -> Callable[[Runs, str], list[float]]:
    return lambda runs, name: [f(r) for r in runs.open[name]]


def _closed(f: Callable[[SimResult], float]) -> Callable[[Runs, str], list[float]]:
    return lambda runs, name: [f(r) for r in runs.closed[name]]


def _category_pct(category: str, r: SimResult) -> float:
    return 100 * r.categories()[category]


def _class_row(priority: int, index: int, label: str) -> Row:
    def value(runs: Runs, name: str) -> list[float]:
        return [r.by_class()[priority][index] / 60 for r in runs.open[name]]

    return Row(label, "lower", value, None, "{:.0f}")


def rows_for(runs: Runs) -> list[Row]:
    first = next(iter(runs.open.values()))[0]
    classes = sorted(set(first.priorities), reverse=True)
    rows = [
        Row(
            "capacity, closed batch (progress / held GPU-s)",
            "higher",
            _closed(lambda r: r.capacity),
            lambda bs: (
                f"excl {_med(bs, lambda b: b.exclusive_capacity):.2f} / "
                f"pairs {_med(bs, lambda b: b.pair_capacity):.2f} / "
                f"lend {_med(bs, lambda b: b.lend_capacity):.2f} / "
                f"share {_med(bs, lambda b: b.sharing_capacity):.2f}"
            ),
        ),
        Row("capacity, open arrivals", "higher", _open(lambda r: r.capacity)),
        Row(
            "closed-batch throughput (jobs/h)",
            "higher",
            _closed(lambda r: r.closed_per_h),
            lambda bs: (
                f"excl {_med(bs, lambda b: b.exclusive_closed_per_h):.2f} / "
                f"pairs {_med(bs, lambda b: b.pair_closed_per_h):.2f} / "
                f"lend {_med(bs, lambda b: b.lend_closed_per_h):.2f} / "
                f"share {_med(bs, lambda b: b.sharing_closed_per_h):.2f}"
            ),
        ),
        Row(
            "mean JCT, open (min)",
            "lower",
            _open(lambda r: r.jct_mean_s / 60),
            lambda bs: (
                f"excl {_med(bs, lambda b: b.exclusive_jct_mean_s) / 60:.0f} / "
                f"pairs {_med(bs, lambda b: b.pair_jct_mean_s) / 60:.0f} / "
                f"lend {_med(bs, lambda b: b.lend_jct_mean_s) / 60:.0f} / "
                f"share {_med(bs, lambda b: b.sharing_jct_mean_s) / 60:.0f}"
            ),
            "{:.0f}",
        ),
        Row("p95 JCT, open (min)", "lower", _open(lambda r: r.jct_p95_s / 60), None, "{:.0f}"),
    ]
    if len(classes) > 1:
        for p in classes:
            rows.append(_class_row(p, 0, f"mean JCT, priority {p} (min)"))
            rows.append(_class_row(p, 1, f"p95 JCT, priority {p} (min)"))
    rows.append(
        Row(
            f"stretch, top priority ({classes[0]}), open",
            "lower",
            _open(lambda r: r.top_stretch),
            lambda bs: (
                f"excl {_med(bs, lambda b: b.exclusive_top_stretch):.2f} / "
                f"pairs {_med(bs, lambda b: b.pair_top_stretch):.2f} / "
                f"lend {_med(bs, lambda b: b.lend_top_stretch):.2f} / "
                f"share {_med(bs, lambda b: b.sharing_top_stretch):.2f}"
            ),
        )
    )
    for category in first.categories():
        rows.append(
            Row(
                f"GPU time: {category} %, open",
                "lower" if category != "useful" else "higher",
                _open(partial(_category_pct, category)),
                None,
                "{:.1f}",
            )
        )
    rows += [
        Row(
            "GPU idle % (old measure), open",
            "lower",
            _open(lambda r: 100 * r.gpu_idle),
            None,
            "{:.1f}",
        ),
        Row(
            "memory fragmentation % (old measure), open",
            "lower",
            _open(lambda r: 100 * r.fragmentation),
            None,
            "{:.1f}",
        ),
        Row(
            "held GPU time over physical memory %, open",
            "lower",
            _open(lambda r: 100 * r.over_memory),
            None,
            "{:.2f}",
        ),
        Row(
            "held GPU time over physical memory %, closed",
            "lower",
            _closed(lambda r: 100 * r.over_memory),
            None,
            "{:.2f}",
        ),
        Row(
            "host memory parked, most on one node (GiB), open",
            "lower",
            _open(lambda r: r.host_parked_peak_mib / 1024),
            None,
            "{:.0f}",
        ),
        Row(
            "host memory parked, most on one node (GiB), closed",
            "lower",
            _closed(lambda r: r.host_parked_peak_mib / 1024),
            None,
            "{:.0f}",
        ),
        Row("preemptions, open", "lower", _open(lambda r: float(r.preemptions)), None, "{:.0f}"),
        Row("rebalances, open", "lower", _open(lambda r: float(r.rebalances)), None, "{:.0f}"),
        Row(
            "work lost to eviction (GPU-h), open",
            "lower",
            _open(lambda r: r.lost_work_gpu_h),
            None,
            "{:.1f}",
        ),
    ]
    return rows


def spread(values: Sequence[float], fmt: str) -> str:
    """Median with the min-max range over seeds."""
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(runs: Runs) -> str:
    names = list(runs.open)
    baselines = [n for n in names if n != SUBJECT]
    header = ["metric", "better", *names, "bound", f"{SUBJECT} / best baseline"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows_for(runs):
        per = {n: row.value(runs, n) for n in names}
        cells = [row.label, row.better, *(spread(per[n], row.fmt) for n in names)]
        cells.append(row.bound(runs.bounds) if row.bound else "-")
        medians = {n: statistics.median(per[n]) for n in baselines}
        pick = max if row.better == "higher" else min
        best = pick(medians, key=lambda n: medians[n]) if medians else None
        mine = statistics.median(per[SUBJECT]) if SUBJECT in per else None
        cells.append(_versus(mine, best, medians[best] if best else None, row.fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _versus(mine: float | None, best: str | None, theirs: float | None, fmt: str) -> str:
    """RLix's median against the best baseline's (``theirs``, named ``best``):
    their ratio, or their difference where either is negative. Held, not
    progress goes negative where sharing gains, and a ratio across a change
    of sign reads backwards (-38x, as if RLix had lost)."""
    if best is None or mine is None or theirs is None:
        return "-"
    if mine < 0 or theirs < 0:
        signed = fmt.replace("{:", "{:+", 1)  # "{:.1f}" -> "{:+.1f}"
        return f"{signed.format(mine - theirs)} vs {best} (difference)"
    if theirs == 0:
        return "-"
    return f"{mine / theirs:.2f}x ({best})"


@dataclass(frozen=True)
class Target:
    """One of issue 16's targets: RLix's median against a goal and the bounds on it."""

    label: str
    better: str  # "higher" | "lower"
    value: Callable[[Runs], float]  # RLix's median
    goal: Callable[[Runs], float]  # the number to reach
    pairs: Callable[[Bounds], float]  # the estimate under the sharing rules
    lend: Callable[[Bounds], float]  # the estimate for exclusive GPUs lending tails
    proved: Callable[[Bounds], float]  # holds for every scheduler
    fmt: str = "{:.2f}"


def _median_of(name: str, f: Callable[[Runs, str], list[float]]) -> Callable[[Runs], float]:
    return lambda runs: statistics.median(f(runs, name))


def _best(
    f: Callable[[Runs, str], list[float]], pick: Callable[..., float]
) -> Callable[[Runs], float]:
    return lambda runs: pick(statistics.median(f(runs, n)) for n in runs.open if n != SUBJECT)


_CLOSED_PER_H = _closed(lambda r: r.closed_per_h)
_JCT = _open(lambda r: r.jct_mean_s / 60)
TARGETS = (
    Target(
        "capacity >= 1.4",
        "higher",
        _median_of(SUBJECT, _closed(lambda r: r.capacity)),
        lambda runs: 1.4,
        lambda b: b.pair_capacity,
        lambda b: b.lend_capacity,
        lambda b: b.sharing_capacity,
    ),
    Target(
        "closed-batch throughput >= 1.3x the best baseline (jobs/h)",
        "higher",
        _median_of(SUBJECT, _CLOSED_PER_H),
        lambda runs: 1.3 * _best(_CLOSED_PER_H, max)(runs),
        lambda b: b.pair_closed_per_h,
        lambda b: b.lend_closed_per_h,
        lambda b: b.sharing_closed_per_h,
    ),
    Target(
        "mean JCT <= 0.7x gang-binpack's (min)",
        "lower",
        _median_of(SUBJECT, _JCT),
        lambda runs: 0.7 * statistics.median(_JCT(runs, "gang-binpack")),
        lambda b: b.pair_jct_mean_s / 60,
        lambda b: b.lend_jct_mean_s / 60,
        lambda b: b.sharing_jct_mean_s / 60,
        "{:.0f}",
    ),
    Target(
        "top-priority stretch <= 1.2",
        "lower",
        _median_of(SUBJECT, _open(lambda r: r.top_stretch)),
        lambda runs: 1.2,
        lambda b: b.pair_top_stretch,
        lambda b: b.lend_top_stretch,
        lambda b: b.sharing_top_stretch,
    ),
)


def target_status(
    reached: bool, pairs_beyond: bool, proved_beyond: bool, lend_beyond: bool = True
) -> str:
    """Which holds for one target. The two estimates are for two mechanisms
    (pairs: two jobs per GPU under the sharing rules; lend: exclusive GPUs
    lending their rollout tails, which the simulator does not run); a target
    beyond both is out of reach for either alone, not for the two together,
    which nothing here estimates."""
    if reached:
        return "met"
    if proved_beyond:
        return "out of reach for every scheduler (proved bound)"
    if pairs_beyond and lend_beyond:
        return "out of reach under the model (pairs and lend estimates, each alone)"
    if pairs_beyond:
        return "not met; only tail lending (not simulated) could reach it (lend estimate)"
    return "not met; no bound rules it out"


def targets(runs: Runs) -> str:
    """Issue 16's targets for this mix: RLix, the goal, the bounds, and which holds.

    A target is out of reach where the bound's median is beyond it: RLix's
    median is at least the median of its per-seed lower bounds (at most, for
    the higher-is-better ones), so no run of the same kind meets it.
    """
    if SUBJECT not in runs.open or "gang-binpack" not in runs.open:
        return ""
    lines = [
        "| target (issue 16) | goal | rlix | pairs | lend | proved | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in TARGETS:
        goal, mine = t.goal(runs), t.value(runs)
        pairs = statistics.median(t.pairs(b) for b in runs.bounds)
        lend = statistics.median(t.lend(b) for b in runs.bounds)
        proved = statistics.median(t.proved(b) for b in runs.bounds)
        if t.better == "higher":
            status = target_status(mine >= goal, pairs < goal, proved < goal, lend < goal)
        else:
            status = target_status(mine <= goal, pairs > goal, proved > goal, lend > goal)
        values = (goal, mine, pairs, lend, proved)
        cells = [t.label, *(t.fmt.format(v) for v in values), status]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_mix(
    mix_name: str,
    seeds: Sequence[int],
    config: SimConfig,
    schedulers: Sequence[str],
    gpu_memory_utilization: float,
) -> Runs:
    runs = Runs()
    for seed in seeds:
        cfg = replace(config, seed=seed)
        mix = make_mix(mix_name, seed=seed, gpu_memory_utilization=gpu_memory_utilization)
        for name in schedulers:
            for kind, m in (("open", mix), ("closed", closed_batch(mix))):
                started = time.perf_counter()
                result = simulate(m, scheduler(name, cfg.interference), cfg)
                wall = time.perf_counter() - started
                runs.wall_s[name] = runs.wall_s.get(name, 0.0) + wall
                getattr(runs, kind).setdefault(name, []).append(result)
                print(f"  {mix_name} seed {seed} {kind:6} {name}: {wall:.1f} s", file=sys.stderr)
        ceiling = pair_ceiling(mix.jobs, cfg.interference, cfg.memory_mib)
        alone = [(j, expected_gpu_s(j) / j.gpus) for j in mix.jobs]
        pair = pairing_factor(alone, cfg.interference, cfg.memory_mib)
        closed, arrived = runs.closed[schedulers[0]][-1], runs.open[schedulers[0]][-1]
        runs.bounds.append(
            bounds(closed, cfg.interference, pair, arrivals=arrived, ceiling=ceiling)
        )
    return runs


def _bound_spread(runs: Runs, f: Callable[[Bounds], float]) -> str:
    return spread([f(b) for b in runs.bounds], "{:.2f}")


def write_mix(
    mix: str,
    runs: Runs,
    seeds: Sequence[int],
    *,
    command: str,
    config: SimConfig,
    out: Path,
    tag: str = "",
) -> str:
    text = table(runs)
    first = next(iter(runs.open.values()))[0]
    speed = "\n".join(f"- {n}: {w:.1f} s" for n, w in runs.wall_s.items())
    doc = (
        f"# {mix}{tag}\n\n{KNOWN[mix][0]}\n\n"
        f"{first.jobs} jobs, {first.gpus} GPUs, seeds {', '.join(map(str, seeds))}; interference "
        f"matrix: {config.interference.name} ({config.interference.source}).\n\n"
        f"Produced by:\n\n    {command}\n\n"
        "Each cell: median over seeds (min-max). Capacity and throughput come from the\n"
        "closed batch (the same jobs all submitted at t=0); JCT, stretch and GPU time\n"
        "from the mix's own arrivals. The ratio column divides RLix's median by the best\n"
        "baseline's median in the metric's direction. Bounds: median over seeds (spread:\n"
        f"exclusive capacity {_bound_spread(runs, lambda b: b.exclusive_capacity)}, sharing "
        f"capacity {_bound_spread(runs, lambda b: b.sharing_capacity)}, kappa "
        f"{_bound_spread(runs, lambda b: b.kappa)}) are proved in docs/simulator.md; "
        f'"pairs" (pairing factor {_bound_spread(runs, lambda b: b.pair_factor)}: the best '
        "pairing of the mix's pods as a whole, a linear programme over rule 5's pair rates;\n"
        f"its best single pair: {_bound_spread(runs, lambda b: b.pair_ceiling)}) is the "
        "estimate for two jobs per GPU under the sharing rules (drifting, or taking turns\n"
        'under the phase gate), defined there. "lend" is the estimate for exclusive GPUs\n'
        "whose rollout tails lend every replica their active sequences do not need, free\n"
        '(docs/simulator.md, "Tail lending"; the simulator does not run it). The mean-JCT\n'
        "and stretch bounds come from\n"
        "the width-aware flow-time relaxation (each job no faster and no wider than alone;\n"
        'docs/simulator.md, "Mean JCT and stretch with widths"): "excl" holds for every\n'
        'scheduler that gives a GPU to one job at a time, "share" for every scheduler,\n'
        '"pairs" and "lend" are estimates; a target beyond its bound is out of reach.\n\n'
        f"{text}\n\n{_targets_section(runs)}"
        "Wall time, all seeds, open + closed (this machine, shared 2 cores):\n\n"
        f"{speed}\n\nDefinitions and caveats: docs/simulator.md.\n"
    )
    (out / f"{mix}{tag}.md").write_text(doc, encoding="utf-8")
    payload: dict[str, Any] = {
        "command": command,
        "interference": config.interference.name,
        "seeds": list(seeds),
        "bounds": [b.__dict__ for b in runs.bounds],
        "results": {
            kind: {n: [_summary(r) for r in rs] for n, rs in getattr(runs, kind).items()}
            for kind in ("open", "closed")
        },
    }
    (out / f"{mix}{tag}.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    if tag:
        return f"## {mix}{tag}\n\n{text}\n"  # a sensitivity run: the plots stay the default's
    try:
        plot(mix, [rs[0] for rs in runs.open.values()], out)
    except ImportError:  # matplotlib comes with the [bench] extra only
        print(f"  {mix}: matplotlib missing, plots not redrawn", file=sys.stderr)
    return f"## {mix}\n\n{text}\n\n{targets(runs)}\n"


def _targets_section(runs: Runs) -> str:
    found = targets(runs)
    if not found:
        return ""
    return (
        "Issue 16's targets (medians over seeds; pairs: the estimate under the sharing\n"
        "rules and the run's matrix; lend: the estimate for exclusive GPUs lending their\n"
        "rollout tails; proved: holds for every scheduler):\n\n"
        f"{found}\n\n"
    )


def _summary(r: SimResult) -> dict[str, Any]:
    return {
        "jobs": r.jobs, "makespan_s": r.makespan_s, "capacity": r.capacity,
        "closed_per_h": r.closed_per_h, "jct_mean_s": r.jct_mean_s, "jct_p95_s": r.jct_p95_s,
        "by_class": {str(p): v for p, v in r.by_class().items()},
        "top_stretch": r.top_stretch, "categories": r.categories(), "gpu_idle": r.gpu_idle,
        "preemptions": r.preemptions, "rebalances": r.rebalances, "over_memory": r.over_memory,
        "lost_work_gpu_h": r.lost_work_gpu_h, "events": r.events,
        "host_parked_peak_mib": r.host_parked_peak_mib,
    }  # fmt: skip


Limit = Callable[[Bounds], float] | None
COMPARED: tuple[tuple[str, Callable[[Runs, str], list[float]], str, Limit], ...] = (
    ("capacity (closed)", _closed(lambda r: r.capacity), "{:.2f}", lambda b: b.sharing_capacity),
    (
        "closed-batch jobs/h",
        _closed(lambda r: r.closed_per_h),
        "{:.2f}",
        lambda b: b.sharing_closed_per_h,
    ),
    (
        "mean JCT, open (min)",
        _open(lambda r: r.jct_mean_s / 60),
        "{:.0f}",
        lambda b: b.sharing_jct_mean_s / 60,
    ),
    (
        "top-priority stretch",
        _open(lambda r: r.top_stretch),
        "{:.2f}",
        lambda b: b.sharing_top_stretch,
    ),
)


def compare_interference(
    done: dict[str, Runs],
    seeds: Sequence[int],
    others: Sequence[Interference],
    *,
    base: SimConfig,
    gpu_memory_utilization: float,
    command: str,
    out: Path,
) -> str:
    """One table: each mix under each matrix, RLix beside gang-binpack.

    ``done`` holds the main runs (under ``base.interference``); only RLix is
    rerun under the ``others``: exclusive schedulers never share a GPU, so the
    matrix cannot change their numbers.
    """
    matrices = [*others, base.interference]
    header = ["mix", "metric", "gang-binpack", *(f"rlix, {m.name}" for m in matrices),
              *(f"sharing bound, {m.name}" for m in matrices)]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for mix, main_runs in done.items():
        per = [
            run_mix(mix, seeds, replace(base, interference=m), [SUBJECT], gpu_memory_utilization)
            for m in others
        ]
        per.append(main_runs)
        for label, value, fmt, limit in COMPARED:
            cells = [mix, label, spread(value(main_runs, "gang-binpack"), fmt)]
            cells += [spread(value(r, SUBJECT), fmt) for r in per]
            cells += [spread([limit(b) for b in r.bounds], fmt) if limit else "-" for r in per]
            lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    sources = "\n".join(f"- {m.name}: {m.source}" for m in matrices)
    doc = (
        "# RLix under the assumed and the measured interference matrix\n\n"
        f"Produced by:\n\n    {command}\n\nMatrices:\n\n{sources}\n\n"
        f"Seeds {', '.join(map(str, seeds))}; each cell median (min-max). gang-binpack never "
        "shares a GPU, so the matrix does not change it.\n\n"
        f"{text}\n\nDefinitions: docs/simulator.md.\n"
    )
    (out / "interference.md").write_text(doc, encoding="utf-8")
    return f"## interference\n\n{text}\n"


def smooth(values: list[float], window: int = 12) -> list[float]:
    """Trailing moving average (12 samples of 300 s = 1 hour) so trends are readable."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot(mix: str, results: list[Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for r in results:
        ts = [s[0] / 3600 for s in r.series]
        busy = smooth([100 * s[1] for s in r.series])
        (line,) = ax.plot(ts, busy, label=f"{r.scheduler} busy")
        ax.plot(ts, smooth([100 * s[2] for s in r.series]), ls=":", color=line.get_color(),
                label=f"{r.scheduler} allocated")  # fmt: skip
    ax.set(xlabel="simulated hours", ylabel="% of cluster GPUs",
           title=f"{mix}: GPU use, 1-hour mean (busy = delivered demand)")  # fmt: skip
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, ncol=3)
    util = out / f"{mix}-utilization.png"
    fig.tight_layout()
    fig.savefig(util, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        jct = sorted(x / 60 for x in r.jct_s)
        ax.step(jct, [(i + 1) / len(jct) for i in range(len(jct))], where="post",
                label=r.scheduler)  # fmt: skip
    ax.set(xlabel="job completion time (min)", ylabel="fraction of jobs", title=f"{mix}: JCT CDF")
    ax.set_xscale("log")
    ax.legend()
    cdf = out / f"{mix}-jct-cdf.png"
    fig.tight_layout()
    fig.savefig(cdf, dpi=110)
    plt.close(fig)
    return [util, cdf]


def load_interference(path: Path, mode: str) -> Interference:
    try:
        return from_json(path.read_text(encoding="utf-8"), mode, name=f"{path.stem}-{mode}")
    except (OSError, ValueError) as e:
        raise SystemExit(f"--interference {path}: {e}") from e


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", action="append", choices=sorted(KNOWN),
                        help=f"default: {', '.join(DEFAULT_MIXES)}")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--suspend", default="link", choices=sorted(SUSPEND))
    parser.add_argument("--interference", type=Path,
                        help="a hack/gpu-interference.py JSON file (default: the measured H200 "
                             "matrix built into rlix.core.sim.interference)")  # fmt: skip
    parser.add_argument("--interference-mode", default="time_slicing",
                        choices=("time_slicing", "mps"))  # fmt: skip
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.0,
                        help="vLLM preallocation, every job (0: KV sized to batch)")  # fmt: skip
    parser.add_argument("--top-grace", type=parse_share, default=TOP_GRACE, metavar="SHARE",
                        help="as rlix-operator's (default %(default)s)")  # fmt: skip
    parser.add_argument("--class-grace", type=parse_share, default=CLASS_GRACE, metavar="SHARE",
                        help="as rlix-operator's (default %(default)s; both 0: strict "
                             "classes)")  # fmt: skip
    parser.add_argument("--aging", type=parse_share, default=0.0, metavar="SHARE",
                        help="as rlix-operator's (default %(default)s: never)")  # fmt: skip
    parser.add_argument("--no-compare", action="store_true",
                        help="skip interference.md (the assumed-vs-measured table)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if len(args.seeds) < 3:
        print("note: fewer than 3 seeds; the spread is not meaningful", file=sys.stderr)
    matrix = (
        load_interference(args.interference, args.interference_mode)
        if args.interference
        else DEFAULT
    )
    out_bps, in_bps = SUSPEND[args.suspend]
    grace = Grace(args.top_grace, args.class_grace, args.aging)
    config = SimConfig(
        suspend_bytes_per_s=out_bps, restore_bytes_per_s=in_bps, interference=matrix, grace=grace
    )
    args.out.mkdir(parents=True, exist_ok=True)
    command = shlex.join([".venv/bin/python", "bench/simulate.py", *(argv or sys.argv[1:])])
    print(f"$ {command}")
    # A non-default matrix, preallocation, grace or aging writes <mix>-<tag>.md beside
    # the default tables instead of replacing them.
    tag = "".join(
        [f"-{matrix.name}" if args.interference else "",
         f"-gmu{args.gpu_memory_utilization:g}" if args.gpu_memory_utilization else "",
         f"-grace{grace.top:g}-{grace.between:g}"
         if (grace.top, grace.between) != (DEFAULT_GRACE.top, DEFAULT_GRACE.between) else "",
         f"-aging{grace.aging:g}" if grace.aging else ""]
    )  # fmt: skip
    done: dict[str, Runs] = {}
    for mix in args.mix or DEFAULT_MIXES:
        runs = run_mix(mix, args.seeds, config, list(SCHEDULERS), args.gpu_memory_utilization)
        done[mix] = runs
        text = write_mix(mix, runs, args.seeds, command=command, config=config, out=args.out,
                         tag=tag)  # fmt: skip
        print(text, flush=True)
    if not args.no_compare and not tag:
        others = [m for m in (ASSUMED, DEFAULT) if m.cells != matrix.cells]
        print(
            compare_interference(done, args.seeds, others, base=config, out=args.out,
                                 gpu_memory_utilization=args.gpu_memory_utilization,
                                 command=command),
            flush=True,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
