"""``rlix top``: jobs, phases, GPUs, idle share and parked memory, refreshed like top."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from rlix.cli import output, scope
from rlix.views import rows as views

DESCRIPTION = """\
Show every RLJob with its state, current phase, the phase of each role, GPUs,
iterations and suspended pods, and every GPU node with allocated GPUs, memory
in use and idle GPUs (from the node agents' rlix.io/gpus annotations), and
how its GPUs are handed out: "shared" (RLix's gpu.rlix.io DRA devices, pods
share a GPU by memory) or "whole" (nvidia.com/gpu, one pod per GPU). The
header sums it up: GPU idle %, jobs per state, memory parked off the GPUs.

A role whose pods wait their turn at their node's phase gate (a GPU they
share is busy with a partner's phase) reads "trainer:idle (1 waiting)"; -o
json gives the job's count as "waiting".

The SUSPENSION column is the job's Suspended condition (why its pods are
parked, or why a suspension was refused); the Suspensions table lists, per
job, the pods the conductor parked in place: parking / parked / resuming,
the reason (Manual, Priority, Lend, PhaseOverflow, Aged), for whom, since when
and the bytes the node agent parked (rlix.io/desired- and
observed-suspension, docs/conductor.md).

Namespaces as kubectl: -n NAME, -A for all, else the kubeconfig context's
namespace. -o json|yaml prints one frame as data; -o wide adds columns.

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
    scope.add_cluster_flags(p, all_namespaces=True)
    output.add_output_flag(p)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.set_defaults(run=run)


def frame_data(view: Any) -> dict[str, Any]:
    """One frame as plain data (``-o json|yaml``): summary, jobs and GPU nodes."""
    now = views.now_utc()
    jobs = views.job_rows(view.rljobs, view.pods, now)
    nodes = views.node_rows(view.nodes, view.pods)
    summary = views.summary(jobs, nodes)
    suspensions = views.suspension_rows(view.pods, now)
    data: dict[str, Any] = output.camel_keys(
        {
            "summary": dataclasses.asdict(summary),
            "rljobs": [dataclasses.asdict(j) for j in jobs],
            "nodes": [dataclasses.asdict(n) for n in nodes],
            "suspensions": [dataclasses.asdict(r) for r in suspensions],
        }
    )
    return data


def render(view: Any, *, wide: bool = False) -> Any:
    """A rich renderable for one frame; ``wide`` adds parked memory and free HBM."""
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
    numeric = {"GPUS", "ITER", "SUSP", "PARKED"}
    job_cols = ["NAMESPACE", "NAME", "STATE", "PHASE", "ROLES", "GPUS", "ITER", "SUSP"]
    job_cols += ["SUSPENSION", "AGE"]
    for col in job_cols + (["PARKED"] if wide else []):
        jt.add_column(col, justify="right" if col in numeric else "left")
    for j in jobs:
        cells = [j.namespace, j.name, j.state, j.phase, j.roles, str(j.gpus)]
        cells += [str(j.iterations), str(j.suspended), j.suspension, j.age]
        if wide:
            cells.append(f"{j.parked_mib / 1024:.1f} GiB")
        jt.add_row(*cells)
    nt = Table(title="GPU nodes", title_justify="left", expand=True)
    node_cols = ["NODE", "GPUS", "ALLOC", "MEM USED", "UTIL", "IDLE GPUS", "GPU SHARING"]
    for col in node_cols + (["MEM FREE"] if wide else []):
        nt.add_column(col, justify="left" if col in ("NODE", "GPU SHARING") else "right")
    for n in nodes:
        mem = f"{n.used_mib / 1024:.0f}/{n.memory_mib / 1024:.0f} GiB"
        util = f"{100 * n.utilization:.0f}%" if n.utilization is not None else "-"
        idle_gpus = str(n.idle_gpus) if n.idle_gpus is not None else "-"
        cells = [n.name, str(n.gpus), str(n.allocated), mem, util, idle_gpus, n.sharing]
        if wide:
            cells.append(f"{(n.memory_mib - n.used_mib) / 1024:.0f} GiB")
        nt.add_row(*cells)
    suspensions = views.suspension_rows(view.pods, now)
    if not suspensions:
        return Group(header, jt, nt)
    st = Table(title="Suspensions", title_justify="left", expand=True)
    for col in ["NAMESPACE", "JOB", "PODS", "STATE", "REASON", "FOR", "SINCE", "PARKED"]:
        st.add_column(col, justify="right" if col == "PARKED" else "left")
    for r in suspensions:
        parked = f"{r.parked_bytes / 2**30:.1f} GiB" if r.parked_bytes else "-"
        since = f"{r.since} ({r.age})" if r.since != "-" else "-"
        st.add_row(
            r.namespace, r.job, ", ".join(r.pods), r.state, r.reason, r.requester, since, parked
        )
    return Group(header, jt, st, nt)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from rlix.views.kube import Kube

    wide = args.output == "wide"
    try:
        namespace = scope.namespace_of(args)
        kube = Kube(args.kubeconfig, args.context)
        view = kube.view(namespace)
    except ModuleNotFoundError:
        raise
    except Exception as err:  # any connection problem ends here, readably
        print(f"rlix top: cannot read the cluster: {err}", file=sys.stderr)
        return 1
    if args.output in {"json", "yaml"}:  # data is one frame: scripts poll themselves
        output.emit(frame_data(view), args.output)
        return 0
    frame = render(view, wide=wide)
    console = Console()
    if args.once:
        console.print(frame)
        return 0
    try:
        with Live(frame, console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(kube.view(namespace), wide=wide))
    except KeyboardInterrupt:
        return 0
