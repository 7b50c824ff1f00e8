"""``rlix demo``: RLix end to end on a local cluster, in a few minutes."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from rlix.core.policy.placement.rules_file import Source

_T = TypeVar("_T")

DESCRIPTION = """\
Run RLix end to end on this machine, with no external cluster, Docker or GPU:

  1. a local control plane with fake GPU nodes (as `rlix cluster up`),
  2. the RLJob CRD, the extender and the operator,
  3. one node agent per node with the simulated GPU backend, publishing each
     GPU as a shareable gpu.rlix.io device at 1.5x its memory,
  4. a mix of seven RLJobs (GRPO, PPO, a verl-style colocated job, an agentic
     long-tail job, three small lab jobs) asking 46 GPUs of a 32-GPU cluster,
     then an urgent high-priority 4-GPU job arriving at 15 s, when no four GPUs
     of a node are free: the conductor parks a lower-priority rollout in place
     for it and resumes it when the urgent job is done,
  5. a simulated trainer process per role pod that reports phases and obeys
     suspend/resume through the real client library.

It prints progress every 2 seconds and ends with a summary table (jobs done,
GPU idle %, preemptions and how many were resumed, GPUs shared). The cluster is
deleted at the end unless --keep.

RLix decides who may share a GPU as the Helm chart does by default: with the
built-in time-slicing bound (a pair shares only where its declared phases
leave one side idle enough to pay). --interference FILE decides with a
measured matrix instead (`make gpu-check` writes one), --interference none
with memory alone (rules 1-3); docs/simulator.md says what each costs.

With --compare it runs the same jobs twice on one cluster: first as plain pods
on whole GPUs through kube-scheduler's default profile (no RLix), then with
RLix, and prints GPU idle, jobs/h, mean latency, fragmentation, GPUs shared and
preemptions side by side (definitions: docs/demo.md). --out DIR also writes
the table, the records and a phase timeline PNG per GPU (needs matplotlib).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run RLix end to end on a local cluster",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=4, help="fake GPU nodes (default: 4)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node (default: 8)")
    p.add_argument("--timeout", type=float, default=900, help="give up after SECONDS")
    p.add_argument("--keep", action="store_true", help="keep the cluster running afterwards")
    p.add_argument(
        "--cluster-name",
        default="rlix-demo",
        help="name of the local cluster (two demos side by side need two names; "
        "default: %(default)s)",
    )
    p.add_argument("--workdir", type=Path, help="keep logs here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="also write the summary as JSON to this file")
    p.add_argument(
        "--compare",
        action="store_true",
        help="run the same jobs twice on one cluster, first with exclusive default "
        "scheduling (plain pods, whole GPUs), then with RLix, and print them side by side",
    )
    p.add_argument(
        "--jobs",
        type=int,
        help="run only the first N jobs of the mix (a shorter demo; default: all eight)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="with --compare: write demo_compare.md, .json (the records) and .png here",
    )
    p.add_argument(
        "--interference",
        type=_interference,
        default="time-slicing",
        metavar="time-slicing|FILE|none",
        help="the interference matrix the extender and the operator decide sharing with: "
        "the built-in time-slicing bound (default, the chart's sharing.builtinMatrix), a "
        "matrix file `make gpu-check` writes (bench/results/gpu_interference.json is an "
        "H200's), or none: any two jobs of one priority whose memory fits may share",
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="use this existing cluster (kind, ...) instead of the embedded one; it needs "
        "nodes with nvidia.com/gpu allocatable (make kind-up adds kwok GPU nodes)",
    )
    p.set_defaults(run=run)


def _interference(text: str) -> Source | None:
    """``--interference``'s value: ``rules_file.source``'s, or None for "none"."""
    from rlix.core.policy.placement.rules_file import source

    return None if text == "none" else source(text)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    from rlix.demo.runner import Demo, DemoOptions
    from rlix.demo.workload import demo_jobs

    if args.out is not None and not args.compare:
        print("rlix demo: --out needs --compare", file=sys.stderr)
        return 2
    jobs = demo_jobs()
    if args.jobs is not None:
        if not 1 <= args.jobs <= len(jobs):
            print(f"rlix demo: --jobs must be 1..{len(jobs)}, got {args.jobs}", file=sys.stderr)
            return 2
        jobs = jobs[: args.jobs]

    options = DemoOptions(
        nodes=args.nodes,
        gpus=args.gpus,
        timeout_s=args.timeout,
        keep=args.keep,
        cluster_name=args.cluster_name,
        workdir=args.workdir,
        kubeconfig=args.kubeconfig,
        interference=args.interference,
    )
    try:  # a matrix file that cannot be read fails here, not in a component's log
        demo = Demo(options, jobs=jobs)
    except ValueError as err:
        print(f"rlix demo: {err}", file=sys.stderr)
        return 2
    # SIGTERM (a CI timeout, `kill`) must unwind like Ctrl-C, so the finally blocks
    # stop every process the demo started instead of orphaning them.
    signal.signal(signal.SIGTERM, _interrupt)
    if args.compare:
        return _reported(demo.compare, lambda runs: _report_compare(demo, runs, args))
    return _reported(demo.run, lambda summary: _report_run(summary, args))


def _reported(work: Callable[[], _T], report: Callable[[_T], int]) -> int:
    """``report`` what ``work`` returned; the ways a demo can stop short (a
    failed step, no toolchain, Ctrl-C or SIGTERM) become a line and an exit code."""
    from rlix.devcluster.toolchain import ToolchainMissingError

    try:
        done = work()
    except (RuntimeError, ToolchainMissingError) as err:
        print(f"rlix demo: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rlix demo: interrupted; everything it started was stopped", file=sys.stderr)
        return 130
    return report(done)


def _report_run(summary: dict[str, Any], args: argparse.Namespace) -> int:
    from rlix.demo.runner import format_summary

    sys.stdout.write(format_summary(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["jobs_succeeded"] == summary["jobs"] else 1


def _report_compare(demo: Any, runs: Any, args: argparse.Namespace) -> int:
    from rlix.demo.compare import results

    found = results(runs, args.out, demo.sharing)
    sys.stdout.write(found.table)
    print(f"RLix: {demo.sharing}")
    if found.png is not None:
        print(f"timeline: {found.png}")
    else:
        print(f"timeline PNG skipped: {found.png_skipped}")
    if args.out is not None:
        print(f"results: {args.out / 'demo_compare.md'}")
    if args.json:
        args.json.write_text(
            json.dumps({"exclusive": found.exclusive, "rlix": found.rlix}, indent=2) + "\n"
        )
    jobs = len(demo.jobs)
    ok = all(r["jobs_succeeded"] == jobs for r in (found.exclusive, found.rlix))
    return 0 if ok else 1
