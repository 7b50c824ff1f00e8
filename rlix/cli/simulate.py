"""``rlix simulate``: run a named workload mix through the schedulers and print the table.

The simulator and the policies are the pure core (``rlix.core.sim``); this
module only parses arguments, times the run (the core never reads a clock),
shows progress on stderr and writes results. Plots live in bench/simulate.py
so the CLI does not need matplotlib.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

DESCRIPTION = """\
Simulate a cluster running RL post-training jobs under several schedulers:
kube-default (exclusive GPUs, FIFO), gang-binpack (Volcano/Kueue-style gangs,
bin-packing, eviction) and rlix (the placement policy the extender ships).
Prints one table: metric rows, a column per scheduler, the lower bound, and
RLix's ratio to each baseline. Definitions: docs/simulator.md.

examples:
  rlix simulate --mix small-lab
  rlix simulate --mix scale --scheduler rlix --json out.json
  rlix simulate --mix mixed-tenants --suspend cuda-checkpoint
  rlix simulate --mix agentic --scheduler rlix --rules default
  rlix simulate --mix disaggregated --rules time-slicing

RLix decides with the run's interference matrix by default (rules 1-6, what
bench/results uses). --rules default runs the rules rlix-operator and the
extender ship without --interference (rules 1-3): they let a pod in beside a
resident's current and next phase, so a pair can meet both peaks on one GPU;
the conductor then parks one of them (its rule 3), which the run plays out and
counts ("parks for memory"). --rules time-slicing runs the components'
--interference time-slicing: rules 1-6 with the built-in bound for GPUs shared
by time slices (no measurement) instead of the run's matrix, which still
decides how fast the jobs go.
"""

# --rules other than "matrix" (the run's own): what the header says RLix decides with.
OTHER_RULES = {
    "default": "the cluster's default rules (1-3, no interference matrix)",
    "time-slicing": "rules 1-6 with the built-in time-slicing bound, not the run's matrix",
}

SUSPEND_BYTES_PER_S = {
    # name: (device-to-host, host-to-device) bytes/s; see rlix.core.sim.hardware
    "link": ("PCIE_D2H_BYTES_PER_S", "PCIE_H2D_BYTES_PER_S"),
    "cuda-checkpoint": ("CUDA_CHECKPOINT_BYTES_PER_S", "CUDA_CHECKPOINT_BYTES_PER_S"),
    "vllm-sleep": ("VLLM_SLEEP_BYTES_PER_S", "VLLM_SLEEP_BYTES_PER_S"),
}


def add_parser(sub: Any) -> None:
    from rlix.core.policy.ordering import CLASS_GRACE, TOP_GRACE, parse_share
    from rlix.core.sim.mixes import MIXES
    from rlix.core.sim.schedulers import SCHEDULERS

    p = sub.add_parser(
        "simulate",
        help="simulate a cluster under RLix and baseline schedulers",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--mix", default="small-lab", choices=sorted(MIXES), help="workload mix")
    p.add_argument(
        "--scheduler",
        action="append",
        choices=sorted(SCHEDULERS),
        help="scheduler to run (repeatable; default: all)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the mix and of rollout lengths")
    p.add_argument("--jobs", type=int, help="only the first N jobs of the mix (quick runs)")
    p.add_argument(
        "--candidates", type=int, default=32, help="nodes per pool shown to the policy per pod"
    )
    p.add_argument("--sample-s", type=float, default=300.0, help="metric sampling interval")
    p.add_argument(
        "--suspend",
        default="link",
        choices=sorted(SUSPEND_BYTES_PER_S),
        help="speed of parking memory on suspension (link = PCIe Gen5 floors)",
    )
    p.add_argument(
        "--top-grace",
        type=parse_share,
        default=TOP_GRACE,
        metavar="SHARE",
        help="as rlix-operator's: a waiting top-class job that declares its size queues "
        "with the lowest class for this share of its expected length (default %(default)s)",
    )
    p.add_argument(
        "--class-grace",
        type=parse_share,
        default=CLASS_GRACE,
        metavar="SHARE",
        help="the same for the classes between (default %(default)s; both 0: strict classes)",
    )
    p.add_argument(
        "--aging",
        type=parse_share,
        default=0.0,
        metavar="SHARE",
        help="as rlix-operator's: a waiting job that declares its size and has waited this "
        "share of its expected length goes first in its class and, once running, is not "
        "parked by it (default %(default)s: never)",
    )
    p.add_argument(
        "--rules",
        default="matrix",
        choices=("matrix", *OTHER_RULES),
        help="RLix's sharing rules: matrix = with the interference matrix (rules 1-6); "
        "default = the cluster components' without --interference (rules 1-3), with the "
        "conductor parking pairs that outgrow a GPU; time-slicing = the components' "
        "--interference time-slicing (rules 1-6 with the built-in time-slicing bound) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--park-at-gate",
        action="store_true",
        help="RLix as with the node agents' --park-at-gate (experimental): pods that take "
        "turns are placed where the larger of their peaks fits, not both (sharing rule 6 "
        "by turns); at the phase gate a pod goes in only where its peak fits beside the "
        "pods that work (the others are parked), and on a GPU over its memory at both "
        "peaks each turn pays its copies at the PCIe floors; a weight sync parks a working "
        "trainer pod (it stops at safe points) where enough of its phase is left, and "
        "pays its copies (docs/simulator.md, 'Parking at the gate, played out'). Needs "
        "--rules matrix or time-slicing",
    )
    p.add_argument(
        "--no-phase-gate",
        action="store_true",
        help="RLix as where the node agents run no phase gate (the chart's "
        "nodeAgent.phaseGate.enabled false; the extender's and the operator's "
        "--no-phase-gate): sharing rule 5 judges a pair of pods that idle part of their "
        "cycle as they drift in and out of each other's busy phases, and every phase goes "
        "in at once (bench/results/sharing_rules.md, 'no gate'). Needs --rules matrix or "
        "time-slicing; not with --park-at-gate",
    )
    p.add_argument("--json", metavar="FILE", help="also write every result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)


def _progress(scheduler: str, quiet: bool) -> Any:
    if quiet:
        return None
    started = time.perf_counter()

    def report(sim_t: float, done: int, total: int) -> None:
        wall = time.perf_counter() - started
        sys.stderr.write(
            f"\r  {scheduler}: {done}/{total} jobs done, simulated {sim_t / 3600:.1f} h, "
            f"{wall:.0f} s"
        )
        sys.stderr.flush()

    return report


def run_mix(args: argparse.Namespace) -> tuple[list[Any], Any, list[dict[str, float]]]:
    """Run every requested scheduler on the mix; returns results, bound, speeds."""
    from rlix.core.policy.ordering import Grace
    from rlix.core.sim import hardware as hw
    from rlix.core.sim.engine import SimConfig, simulate
    from rlix.core.sim.interference import TIME_SLICING_BOUND
    from rlix.core.sim.metrics import bound
    from rlix.core.sim.mixes import make_mix
    from rlix.core.sim.schedulers import SCHEDULERS, rlix, scheduler

    out_name, in_name = SUSPEND_BYTES_PER_S[args.suspend]
    config = SimConfig(
        seed=args.seed,
        candidates=args.candidates,
        sample_s=args.sample_s,
        suspend_bytes_per_s=getattr(hw, out_name),
        restore_bytes_per_s=getattr(hw, in_name),
        grace=Grace(args.top_grace, args.class_grace, args.aging),
    )
    mix = make_mix(args.mix, seed=args.seed, jobs=args.jobs)
    decides_with = {"default": None, "time-slicing": TIME_SLICING_BOUND}  # keys: OTHER_RULES
    results, speeds = [], []
    for name in args.scheduler or list(SCHEDULERS):
        started = time.perf_counter()
        chosen = (
            rlix(decides_with[args.rules])
            if name == "rlix" and args.rules in OTHER_RULES
            else scheduler(name, config.interference)
        )
        if name == "rlix" and (args.park_at_gate or args.no_phase_gate):
            matrix = decides_with.get(args.rules, config.interference)
            chosen = rlix(
                matrix, parks_at_gate=args.park_at_gate, phase_gate=not args.no_phase_gate
            )
        result = simulate(mix, chosen, config, progress=_progress(name, args.quiet))
        wall = time.perf_counter() - started
        if not args.quiet:
            sys.stderr.write(f"\r  {name}: {result.jobs} jobs in {wall:.1f} s{' ' * 30}\n")
        results.append(result)
        speeds.append(
            {"wall_s": wall, "events": result.events, "events_per_s": result.events / wall}
        )
    first = min((j.arrival_s for j in mix.jobs), default=0.0)
    return results, bound(results[0], first), speeds


def _refusal(args: argparse.Namespace) -> str | None:
    """Why these flags cannot run together (None: they can)."""
    matrix = "rules with an interference matrix (--rules matrix or time-slicing)"
    if args.park_at_gate and args.rules == "default":
        return f"--park-at-gate needs {matrix}: without one no pair takes turns"
    if args.no_phase_gate and args.park_at_gate:
        return (
            "--no-phase-gate and --park-at-gate contradict each other: parking happens at the gate"
        )
    if args.no_phase_gate and args.rules == "default":
        return f"--no-phase-gate needs {matrix}: without one the gate decides nothing"
    return None


def run(args: argparse.Namespace) -> int:
    from rlix.core.sim.report import table

    refused = _refusal(args)
    if refused is not None:
        print(f"rlix simulate: {refused}", file=sys.stderr)
        return 2
    results, ideal, speeds = run_mix(args)
    print(f"mix {args.mix} (seed {args.seed}): {results[0].jobs} jobs on {results[0].gpus} GPUs")
    if args.rules in OTHER_RULES and any(r.scheduler == "rlix" for r in results):
        print(f"rlix decides with {OTHER_RULES[args.rules]}")
    if args.park_at_gate and any(r.scheduler == "rlix" for r in results):
        print("rlix parks at the gate: pairs that take turns need the larger peak, not both")
    if args.no_phase_gate and any(r.scheduler == "rlix" for r in results):
        print("rlix decides for nodes without the phase gate: pairs judged as their pods drift")
    print(table(results, ideal))
    for r, s in zip(results, speeds, strict=True):
        print(
            f"{r.scheduler}: {s['events']:.0f} events in {s['wall_s']:.1f} s "
            f"({s['events_per_s']:.0f} events/s)"
        )
    if args.json:
        doc = {
            "mix": args.mix,
            "seed": args.seed,
            "bound": asdict(ideal),
            "results": [
                {**{k: v for k, v in asdict(r).items() if k != "series"}, "speed": s}
                for r, s in zip(results, speeds, strict=True)
            ],
        }
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    return 0
