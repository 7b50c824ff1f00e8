"""A PNG of each run's phase timeline per GPU (matplotlib, the optional ``demo`` extra).

One panel per run, one row per GPU, time on the x axis from each run's first
submission. A pod's bar on a GPU is coloured by the phase its agent reported;
held-but-inactive time (waiting for gang-mates, idle, suspended) is grey. Two
jobs' pods on one GPU (RLix's sharing) get half rows each, so both show.
"""

from __future__ import annotations

from pathlib import Path

from rlix.demo.metrics import by_gpu, held, phase_spans, window
from rlix.demo.record import RunRecord

COLOURS = {
    "rollout": "#4C72B0",
    "scoring": "#DD8452",
    "training": "#C44E52",
    "weight-sync": "#8172B2",
}
TITLES = {"exclusive": "exclusive default scheduling", "rlix": "RLix"}


def missing_reason() -> str | None:
    """Why the PNG cannot be drawn here (matplotlib absent), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'rlix[demo]')"
    return None


def draw(runs: list[RunRecord], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = max(sum(r.gpus_per_node.values()) for r in runs)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(12, 0.18 * rows * len(runs) + 1.5), sharex=True, squeeze=False
    )
    for ax, run in zip(axes[:, 0], runs, strict=True):
        start, end = window(run)
        gpus = [(n, g) for n in sorted(run.gpus_per_node) for g in range(run.gpus_per_node[n])]
        pods = by_gpu(run)
        for y, gpu in enumerate(gpus):
            residents = sorted(pods.get(gpu, []), key=lambda p: p.bound_at or 0.0)
            lanes: list[float] = []  # end time of the last pod drawn in each lane
            for pod in residents:
                span = held(pod)
                if span is None:
                    continue
                lane = next((i for i, t in enumerate(lanes) if t <= span[0]), None)
                if lane is None:
                    lanes.append(span[1])
                    lane = len(lanes) - 1
                else:
                    lanes[lane] = span[1]
                shared = any(
                    (s := held(o)) is not None
                    and o.job != pod.job
                    and min(s[1], span[1]) > max(s[0], span[0])
                    for o in residents
                )
                height = 0.4 if shared else 0.8
                base = y - 0.4 + (0.4 * (lane % 2) if shared else 0.0)
                ax.broken_barh(
                    [(span[0] - start, span[1] - span[0])], (base, height), color="#DDDDDD"
                )
                for phase_start, phase_end, phase in phase_spans(pod):
                    ax.broken_barh(
                        [(phase_start - start, phase_end - phase_start)],
                        (base, height),
                        color=COLOURS.get(phase, "#55A868"),
                    )
        ax.set_yticks(range(len(gpus)))
        ax.set_yticklabels([f"{n}/{g}" for n, g in gpus], fontsize=5)
        ax.set_ylim(-0.6, len(gpus) - 0.4)
        ax.invert_yaxis()
        ax.set_xlim(0, max((window(r)[1] - window(r)[0]) for r in runs))
        ax.set_title(f"{TITLES.get(run.mode, run.mode)}: {end - start:.0f} s", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the first submission")
    handles = [Patch(color=c, label=p) for p, c in COLOURS.items()]
    handles.append(Patch(color="#DDDDDD", label="held, not active"))
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=len(handles))
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
