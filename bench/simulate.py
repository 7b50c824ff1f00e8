"""`make bench`: every workload mix under every scheduler -> tables, JSON and plots.

Writes bench/results/<mix>.md (the table, the exact command, simulator speed),
<mix>.json (every metric and JCT), <mix>-utilization.png and <mix>-jct-cdf.png.
Matplotlib (Agg) is used here only, never in rlix.core.

    .venv/bin/python bench/simulate.py                 # all mixes
    .venv/bin/python bench/simulate.py --mix small-lab # one mix
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
MIXES = ("small-lab", "mixed-tenants", "agentic", "scale")


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


def bench_mix(mix: str, seed: int, suspend: str, out: Path) -> str:
    from rlix.cli.simulate import run_mix
    from rlix.core.sim.mixes import MIXES as KNOWN
    from rlix.core.sim.report import table

    args = argparse.Namespace(
        mix=mix, scheduler=None, seed=seed, jobs=None, candidates=32, sample_s=300.0,
        suspend=suspend, quiet=False,
    )  # fmt: skip
    results, ideal, speeds = run_mix(args)
    tag = mix if suspend == "link" else f"{mix}-suspend-{suspend}"
    command = " ".join(
        [".venv/bin/python bench/simulate.py", f"--mix {mix}", f"--seed {seed}"]
        + ([f"--suspend {suspend}"] if suspend != "link" else [])
    )
    text = table(results, ideal)
    speed_lines = "\n".join(
        f"- {r.scheduler}: {s['events']:.0f} events in {s['wall_s']:.1f} s "
        f"({s['events_per_s']:,.0f} events/s)"
        for r, s in zip(results, speeds, strict=True)
    )
    first = results[0]
    doc = (
        f"# {tag}\n\n{KNOWN[mix][0]}\n\n"
        f"{first.jobs} jobs, {first.gpus} GPUs, seed {seed}, suspend speed: {suspend}.\n\n"
        f"Produced by:\n\n    {command}\n\n(equivalently `rlix simulate --mix {mix} --seed {seed}"
        f"{' --suspend ' + suspend if suspend != 'link' else ''}`)\n\n{text}\n\n"
        f"Simulator speed (this machine, shared 2 cores):\n\n{speed_lines}\n\n"
        f"Definitions and caveats: docs/simulator.md.\n"
    )
    (out / f"{tag}.md").write_text(doc, encoding="utf-8")
    payload = {
        "command": command,
        "bound": asdict(ideal),
        "results": [
            {**{k: v for k, v in asdict(r).items() if k != "series"}, "speed": s}
            for r, s in zip(results, speeds, strict=True)
        ],
    }
    (out / f"{tag}.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    if suspend == "link":
        plot(mix, results, out)
    return f"## {tag}\n\n{text}\n\n{speed_lines}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", action="append", choices=MIXES, help="default: all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--suspend", default="link", choices=("link", "cuda-checkpoint", "vllm-sleep")
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"$ {shlex.join([sys.executable, *sys.argv])}")
    for mix in args.mix or MIXES:
        print(bench_mix(mix, args.seed, args.suspend, args.out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
