"""The results table, shaped like the headline claim: metric rows, one column per
scheduler, the lower bound, and RLix's ratio to each baseline.

Pure text: the CLI prints it and the benchmark writes it next to the command
that produced it. A ratio is RLix divided by the baseline, whatever the
metric's direction, so "0.5x" on idle time and "2.0x" on throughput both read
as RLix's value relative to the baseline's; the "better" column says which way
is good.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlix.core.sim.metrics import Bound, SimResult


@dataclass(frozen=True)
class Row:
    label: str
    better: str  # "lower" | "higher"
    value: Callable[[SimResult], float]
    ideal: Callable[[Bound], float] | None
    fmt: str = "{:.1f}"


ROWS: tuple[Row, ...] = (
    Row("GPU idle %", "lower", lambda r: 100 * r.gpu_idle, lambda b: 100 * b.gpu_idle),
    Row(
        "throughput (jobs/h)",
        "higher",
        lambda r: r.throughput_per_h,
        lambda b: b.throughput_per_h,
        "{:.2f}",
    ),
    Row("memory fragmentation %", "lower", lambda r: 100 * r.fragmentation, lambda b: 0.0),
    Row("mean JCT (min)", "lower", lambda r: r.jct_mean_s / 60, lambda b: b.jct_mean_s / 60),
    Row("p95 JCT (min)", "lower", lambda r: r.jct_p95_s / 60, None),
    Row(
        "makespan (h)",
        "lower",
        lambda r: r.makespan_s / 3600,
        lambda b: b.makespan_s / 3600,
        "{:.2f}",
    ),
    Row(
        "held GPU time over physical memory %",
        "lower",
        lambda r: 100 * r.over_memory,
        lambda b: 0.0,
        "{:.2f}",
    ),
    Row("preemptions", "lower", lambda r: float(r.preemptions), lambda b: 0.0, "{:.0f}"),
    Row(
        "parks for memory (conductor rule 3)",
        "lower",
        lambda r: float(r.overflow_parks),
        lambda b: 0.0,
        "{:.0f}",
    ),
    Row("rebalances", "lower", lambda r: float(r.rebalances), lambda b: 0.0, "{:.0f}"),
    Row("bytes moved (GB)", "lower", lambda r: r.bytes_moved / 1e9, lambda b: 0.0, "{:.0f}"),
    Row("suspended (job-h)", "lower", lambda r: r.suspended_h, lambda b: 0.0),
    Row("work lost to eviction (GPU-h)", "lower", lambda r: r.lost_work_gpu_h, lambda b: 0.0),
)


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "-" if a == 0 else "n/a"
    return f"{a / b:.2f}x"


def table(results: Sequence[SimResult], ideal: Bound, subject: str = "rlix") -> str:
    """A Markdown table; ratio columns appear when ``subject`` ran with baselines."""
    names = [r.scheduler for r in results]
    mine = next((r for r in results if r.scheduler == subject), None)
    others = [r for r in results if r.scheduler != subject] if mine else []
    header = ["metric", "better", *names, "bound", *(f"{subject}/{o.scheduler}" for o in others)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in ROWS:
        cells = [row.label, row.better, *(row.fmt.format(row.value(r)) for r in results)]
        cells.append(row.fmt.format(row.ideal(ideal)) if row.ideal else "-")
        if mine is not None:
            cells.extend(_ratio(row.value(mine), row.value(o)) for o in others)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
