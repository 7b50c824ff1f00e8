"""``rlix top``: jobs, phases, GPUs, idle share and parked memory, refreshed like top."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rlix.views import rows as views

DESCRIPTION = """\
Show every RLJob with its state, current phase, the phase of each role, GPUs,
iterations and suspended pods, and every GPU node with allocated GPUs, memory
in use and idle GPUs (from the node agents' rlix.io/gpus annotations), and
how its GPUs are handed out: "shared" (RLix's gpu.rlix.io DRA devices, pods
share a GPU by memory) or "whole" (nvidia.com/gpu, one pod per GPU). The
header sums it up: GPU idle %, jobs per state, memory parked off the GPUs.

Refreshes every --interval seconds until Ctrl-C; --once prints one frame
(scripts, CI logs). Also runs as a kubectl plugin: `kubectl rlix top`.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "top",
        help="live view of jobs, phases and GPUs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.set_defaults(run=run)


def render(view: Any) -> Any:
    """A rich renderable for one frame."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = views.now_utc()
    jobs = views.job_rows(view.rljobs, view.pods, now)
    nodes = views.node_rows(view.nodes, view.pods)
    s = views.summary(jobs, nodes)
    idle = f"{s.idle_pct:.1f}%" if s.idle_pct is not None else "n/a (no node agent data)"
    states = ", ".join(f"{k} {v}" for k, v in sorted(s.jobs_by_state.items())) or "no jobs"
    header = Text(
        f"GPUs {s.allocated}/{s.gpus} allocated   GPU idle {idle}   jobs: {states}   "
        f"suspended pods {s.suspended_pods} (parked ~{s.parked_mib / 1024:.1f} GiB)",
        style="bold",
    )
    jt = Table(title="RLJobs", title_justify="left", expand=True)
    for col in ("NAMESPACE", "NAME", "STATE", "PHASE", "ROLES", "GPUS", "ITER", "SUSP", "AGE"):
        jt.add_column(col, justify="right" if col in {"GPUS", "ITER", "SUSP"} else "left")
    for j in jobs:
        jt.add_row(
            j.namespace,
            j.name,
            j.state,
            j.phase,
            j.roles,
            str(j.gpus),
            str(j.iterations),
            str(j.suspended),
            j.age,
        )
    nt = Table(title="GPU nodes", title_justify="left", expand=True)
    for col in ("NODE", "GPUS", "ALLOC", "MEM USED", "UTIL", "IDLE GPUS", "GPU SHARING"):
        nt.add_column(col, justify="left" if col in ("NODE", "GPU SHARING") else "right")
    for n in nodes:
        mem = f"{n.used_mib / 1024:.0f}/{n.memory_mib / 1024:.0f} GiB"
        util = f"{100 * n.utilization:.0f}%" if n.utilization is not None else "-"
        idle_gpus = str(n.idle_gpus) if n.idle_gpus is not None else "-"
        nt.add_row(n.name, str(n.gpus), str(n.allocated), mem, util, idle_gpus, n.sharing)
    return Group(header, jt, nt)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from rlix.views.kube import Kube

    try:
        kube = Kube(args.kubeconfig, args.context)
        frame = render(kube.view(args.namespace))
    except Exception as err:  # any connection problem ends here, readably
        print(f"rlix top: cannot read the cluster: {err}", file=sys.stderr)
        return 1
    console = Console()
    if args.once:
        console.print(frame)
        return 0
    try:
        with Live(frame, console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(kube.view(args.namespace)))
    except KeyboardInterrupt:
        return 0
