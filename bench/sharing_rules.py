"""`make bench`: what RLix decides with where no matrix was measured -> sharing_rules.md.

The same jobs, run as the H200 measured (``interference.DEFAULT``), under
gang-binpack and under RLix deciding with four rule sets: the cluster
components' rules without ``--interference`` (rules 1-3, with the conductor's
parking played out), the built-in time-slicing bound (``--interference
time-slicing``, what the chart passes by default) with the nodes' phase gate
and without it (``--no-phase-gate``: rule 5 judges pods that idle part of
their cycle as they drift, and no phase waits), the measured matrix
itself (what bench/results/<mix>.md uses), and the measured matrix where the
node agents park at the gate (``--park-at-gate``: rule 6 by turns, the room
test at the gate and each turn's copies played out). Open arrivals for JCT,
stretch and memory; the same jobs at t=0 for throughput and capacity. Every
cell: the median over seeds (min-max). docs/simulator.md, "Deciding without
a measured matrix" and "Parking at the gate, played out", says what the
table is for.

    .venv/bin/python bench/sharing_rules.py                       # five mixes, seeds 0 1 2
    .venv/bin/python bench/sharing_rules.py --mix disaggregated --seeds 0
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rlix.core.sim.engine import SimConfig, simulate
from rlix.core.sim.interference import DEFAULT, TIME_SLICING_BOUND
from rlix.core.sim.metrics import SimResult
from rlix.core.sim.mixes import closed_batch, make_mix
from rlix.core.sim.schedulers import Scheduler, gang_binpack, rlix

RESULTS = Path(__file__).resolve().parent / "results"
MIXES = ("small-lab", "mixed-tenants", "agentic", "trace", "disaggregated")
# Column -> the scheduler that runs it; the jobs always run as DEFAULT measured.
RULES: dict[str, Callable[[], Scheduler]] = {
    "gang-binpack": gang_binpack,
    "rlix, no matrix": lambda: rlix(None),
    "rlix, time-slicing bound": lambda: rlix(TIME_SLICING_BOUND),
    "rlix, time-slicing bound, no gate": lambda: rlix(TIME_SLICING_BOUND, phase_gate=False),
    "rlix, measured matrix": lambda: rlix(DEFAULT),
    "rlix, measured matrix, parks at the gate": lambda: rlix(DEFAULT, parks_at_gate=True),
}
PARKS = "rlix, measured matrix, parks at the gate"
SUBJECT = "rlix, time-slicing bound"
NO_GATE = "rlix, time-slicing bound, no gate"
# (label, better, open or closed run, value, format)
METRICS: tuple[tuple[str, str, str, Callable[[SimResult], float], str], ...] = (
    ("mean JCT, open (min)", "lower", "open", lambda r: r.jct_mean_s / 60, "{:.0f}"),
    ("p95 JCT, open (min)", "lower", "open", lambda r: r.jct_p95_s / 60, "{:.0f}"),
    ("stretch, top priority, open", "lower", "open", lambda r: r.top_stretch, "{:.2f}"),
    ("closed-batch throughput (jobs/h)", "higher", "closed", lambda r: r.closed_per_h, "{:.2f}"),
    ("capacity, closed batch", "higher", "closed", lambda r: r.capacity, "{:.2f}"),
    (
        "held GPU time over physical memory %, open",
        "lower",
        "open",
        lambda r: 100 * r.over_memory,
        "{:.2f}",
    ),
    ("parks for memory, open", "lower", "open", lambda r: r.overflow_parks, "{:.0f}"),
    ("held GPU time by turns %, open", "-", "open", lambda r: 100 * r.by_turns, "{:.1f}"),
    ("held GPU time by turns %, closed", "-", "closed", lambda r: 100 * r.by_turns, "{:.1f}"),
    (
        "host memory parked, most on one node (GiB), open",
        "lower",
        "open",
        lambda r: r.host_parked_peak_mib / 1024,
        "{:.0f}",
    ),
    (
        "host memory parked, most on one node (GiB), closed",
        "lower",
        "closed",
        lambda r: r.host_parked_peak_mib / 1024,
        "{:.0f}",
    ),
)


def run_one(task: tuple[str, int, str]) -> tuple[str, int, str, dict[str, float], float]:
    """One mix, seed and column: its open and closed runs' metrics, and wall seconds."""
    mix_name, seed, column = task
    started = time.perf_counter()
    mix = make_mix(mix_name, seed)
    config = SimConfig(seed=seed)
    runs = {
        "open": simulate(mix, RULES[column](), config),
        "closed": simulate(closed_batch(mix), RULES[column](), config),
    }
    values = {label: f(runs[kind]) for label, _, kind, f, _ in METRICS}
    return mix_name, seed, column, values, time.perf_counter() - started


def _cell(values: list[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _ratio(mine: float, theirs: float) -> str:
    if theirs == 0 or mine == 0:
        return "-"
    return f"{mine / theirs:.2f}x"


def table(mix: str, got: dict[tuple[str, str], list[float]]) -> list[str]:
    columns = list(RULES)
    lines = [
        f"## {mix}",
        "",
        "| metric | better | "
        + " | ".join(columns)
        + " | time-slicing / gang-binpack | time-slicing / no matrix"
        + " | no gate / time-slicing | parks at the gate / measured matrix |",
        "|---|---|" + "---|" * (len(columns) + 4),
    ]
    for label, better, _, _, fmt in METRICS:
        cells = [_cell(got[(label, c)], fmt) for c in columns]
        med = {c: statistics.median(got[(label, c)]) for c in columns}
        lines.append(
            f"| {label} | {better} | "
            + " | ".join(cells)
            + f" | {_ratio(med[SUBJECT], med['gang-binpack'])}"
            + f" | {_ratio(med[SUBJECT], med['rlix, no matrix'])}"
            + f" | {_ratio(med[NO_GATE], med[SUBJECT])}"
            + f" | {_ratio(med[PARKS], med['rlix, measured matrix'])} |"
        )
    lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", action="append", choices=MIXES, help="repeatable (default: all)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=2, help="processes (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    mixes = args.mix or list(MIXES)
    tasks = [(m, s, c) for m in mixes for s in args.seeds for c in RULES]
    results: dict[str, dict[tuple[str, str], list[float]]] = {m: {} for m in mixes}
    wall: dict[str, float] = dict.fromkeys(RULES, 0.0)
    started = time.perf_counter()
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        for done, (mix, _seed, column, values, seconds) in enumerate(
            pool.map(run_one, tasks), start=1
        ):
            for label, value in values.items():
                results[mix].setdefault((label, column), []).append(value)
            wall[column] += seconds
            sys.stderr.write(
                f"\r  {done}/{len(tasks)} runs (open + closed), "
                f"{time.perf_counter() - started:.0f} s"
            )
            sys.stderr.flush()
    sys.stderr.write("\n")
    command = "bench/sharing_rules.py" + (" " + shlex.join(argv) if argv else "")
    lines = [
        "# Sharing rules without a measured matrix",
        "",
        "Produced by:",
        "",
        f"    .venv/bin/python {command}",
        "",
        f"Seeds {', '.join(map(str, args.seeds))}; each cell the median (min-max). Every run's",
        f"jobs go as the interference matrix {DEFAULT.name} says ({DEFAULT.source});",
        "the columns differ only in what RLix decides with: no matrix (the components without",
        "--interference: rules 1-3, pairs that outgrow a GPU parked as the conductor parks",
        "them), the built-in time-slicing bound (--interference time-slicing, the chart's",
        "default: two busy phases split a GPU) where the node agents run the phase gate, the",
        "same bound where they run none (--no-phase-gate, nodeAgent.phaseGate.enabled: false:",
        "rule 5 judges pods that idle part of their cycle as they drift, and no phase waits),",
        "the measured matrix itself (the tables in",
        "<mix>.md), or the measured matrix where the node agents park at the gate",
        "(--park-at-gate, experimental: pods that take turns placed where the larger peak",
        "fits, a pod let into a busy phase (or its load) only where its peak fits beside",
        "the pods that work, each turn's copies charged at the PCIe floors). The ratio",
        "columns divide the bound's median by the others', the bound's without the gate by",
        "the bound's with it, and parking's by the matrix's",
        "(below 1 is better for JCT and stretch, higher for throughput and capacity).",
        "'Held GPU time by turns' is the share of held GPU time on GPUs holding more than",
        "their memory at everyone's peaks, the ones not working parked. What it is for:",
        'docs/simulator.md, "Deciding without a measured matrix" and "Parking at the gate,',
        'played out".',
        "",
    ]
    for mix in mixes:
        lines += table(mix, results[mix])
    lines += ["Wall time, all mixes and seeds, open + closed (shared 2-core machine):", ""]
    lines += [f"- {c}: {wall[c]:.0f} s" for c in RULES]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sharing_rules.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc: dict[str, Any] = {
        "command": command,
        "seeds": args.seeds,
        "matrix": DEFAULT.name,
        "results": {
            m: {f"{label} | {c}": v for (label, c), v in results[m].items()} for m in mixes
        },
    }
    (args.out / "sharing_rules.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
