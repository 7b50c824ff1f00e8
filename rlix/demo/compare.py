"""``rlix demo --compare``'s results: the side-by-side table, the records, the PNG.

Everything here is computed from the two runs' records (``rlix.demo.record``),
so a reader can recompute each number from ``demo_compare.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlix.demo import metrics, record, timeline
from rlix.demo.record import RunRecord

Numbers = dict[str, float | int | None]


@dataclass
class Results:
    exclusive: Numbers
    rlix: Numbers
    table: str
    png: Path | None
    png_skipped: str | None  # why no PNG was drawn


def results(runs: list[RunRecord], out: Path | None, sharing: str = "") -> Results:
    """The numbers and table; with ``out``, also write the records, table and PNG
    there. ``sharing``: the rules RLix decided with (its components' start-up line)."""
    by_mode = {r.mode: r for r in runs}
    exclusive, rlix = metrics.compute(by_mode["exclusive"]), metrics.compute(by_mode["rlix"])
    table = metrics.format_table(exclusive, rlix)
    png: Path | None = None
    skipped: str | None = "no --out directory given"
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        record.save(runs, out / "demo_compare.json")
        skipped = timeline.missing_reason()
        if skipped is None:
            png = out / "demo_compare.png"
            timeline.draw(runs, png)
        (out / "demo_compare.md").write_text(_markdown(runs, table, png, skipped, sharing))
    return Results(exclusive, rlix, table, png, skipped)


def _markdown(
    runs: list[RunRecord], table: str, png: Path | None, skipped: str | None, sharing: str
) -> str:
    first = runs[0]
    nodes, gpus = len(first.gpus_per_node), sum(first.gpus_per_node.values())
    lines = [
        "# RLix demo: exclusive default scheduling vs RLix",
        "",
        f"Written by `rlix demo --compare --out DIR`: the same {len(first.jobs)} jobs run",
        f"twice on one local cluster ({nodes} kwok nodes, {gpus} simulated GPUs), first",
        "as plain pods on whole GPUs through kube-scheduler's default profile, then as",
        "RLJobs through RLix. One run of each, not a benchmark. The baseline and every",
        "metric are defined in docs/demo.md; the records every number is computed from",
        "are in `demo_compare.json` beside this file.",
        "",
        *([f"RLix's extender and operator decided with {sharing}.", ""] if sharing else []),
        "```",
        table.strip("\n"),
        "```",
        "",
    ]
    if png is not None:
        lines += [f"![phase timeline per GPU]({png.name})", ""]
    else:
        lines += [f"(No timeline PNG: {skipped}.)", ""]
    return "\n".join(lines)
