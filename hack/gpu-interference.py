#!/usr/bin/env python3
"""Measure how phases of two processes slow each other down on one GPU (tier 5).

    make gpu-check    # runs this after hack/gpu-check.py
    .venv/bin/python hack/gpu-interference.py [--seconds 4] [--out interference.json]

The simulator models a job's progress on a shared GPU as ``1 / (1 + I[s, t])``
for a co-runner of shape ``t`` at full pressure (rlix/core/sim/interference.py).
Its coefficients were taken from published co-location studies; this script
measures them on the GPU at hand, with three kernels standing in for the
phase shapes:

* ``compute``: a bf16 GEMM (training's forward/backward, scoring's prefill);
* ``memory``: a bf16 GEMV with a batch of 8 against a 1 GiB weight matrix,
  which reads HBM and barely uses the tensor cores (rollout decode);
* ``network``: host<->device copies of pinned memory (weight sync and parking;
  with one GPU there is no NVLink peer, so PCIe stands in, and the docs say so).

Two long-lived worker processes (two CUDA contexts, as two pods would have)
run a shape alone, then every pair at the same time for the same wall-clock
window; ``I = rate_alone / rate_shared - 1``. Default time-slicing is measured;
where ``nvidia-cuda-mps-control`` runs, the pairs are measured again under MPS.

The simulator scales a co-runner's slowdown by its *pressure*, the share of
time it has kernels running (rollout tails, tool waits): ``p * I``. Under
time-slicing (``--pressure-sets``; ``--no-pressure`` skips them) a co-runner
that works in ~10 ms bursts and idles for a fixed time between them (a duty
cycle of 0.25, 0.5, 0.75) is run beside a full-pressure GEMM or GEMV
("victim"), and the victim's measured slowdown is put beside the model's
``p * I``; then both sides idle part of the time ("both": two agentic
rollouts at 0.65, half-busy pairs), each side's slowdown beside the model's.

Writes a JSON file the simulator can load and prints a table. Exits 77 without
a GPU, like hack/gpu-check.py.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import combinations_with_replacement
from pathlib import Path
from typing import Any

SKIPPED_EXIT = 77
SHAPES = ("compute", "memory", "network")
# Shapes run at a duty cycle beside full-pressure victims; copies already
# overlap almost perfectly with kernels at full pressure.
DUTY_SHAPES = ("compute", "memory")
DUTIES = (0.25, 0.5, 0.75)
# Both sides idle part of the time: two agentic rollouts (35% of their wall
# time waiting on tools, busy 0.65), one beside a half-busy trainer-like GEMM,
# and half-busy pairs. (shape, duty) of each side.
BOTH_IDLE = (
    (("memory", 0.65), ("memory", 0.65)),
    (("compute", 0.65), ("memory", 0.65)),
    (("memory", 0.5), ("memory", 0.5)),
    (("compute", 0.5), ("memory", 0.5)),
    (("compute", 0.5), ("compute", 0.5)),
)
PRESSURE_SETS = ("victim", "both")
BURST_S = 0.010  # one burst of a duty-cycled co-runner, alone
# Work of one step in each shape's unit (TFLOP, GB read, GB copied): see _worker.
STEP_UNITS = {
    "compute": 2 * 8192**3 / 1e12,  # TFLOP of one 8192^3 GEMM
    "memory": 32768 * 16384 * 2 / 1e9,  # GB of bf16 weights one GEMV reads
    "network": 2 * (256 << 20) / 1e9,  # GB copied, one way and back
}


def _worker(conn: Any) -> None:
    """One CUDA context; runs a named kernel loop from a common start time."""
    import torch

    dev = torch.device("cuda:0")
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    w = torch.randn(32768, 16384, dtype=torch.bfloat16, device=dev)  # 1 GiB
    x = torch.randn(16384, 8, dtype=torch.bfloat16, device=dev)
    host = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    dbuf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)

    def step(shape: str) -> float:
        """One unit of work; returns its size in the shape's unit (STEP_UNITS)."""
        if shape == "compute":
            torch.mm(a, b)
        elif shape == "memory":
            torch.mm(w, x)
        else:
            dbuf.copy_(host, non_blocking=True)
            host.copy_(dbuf, non_blocking=True)
        return STEP_UNITS[shape]

    for shape in SHAPES:  # warm-up: kernels chosen, clocks up
        for _ in range(3):
            step(shape)
    torch.cuda.synchronize()
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        shape, start, seconds, burst, idle_s = msg
        while time.time() < start:
            time.sleep(0.0005)
        done, busy, t0 = 0.0, 0.0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            b0 = time.perf_counter()
            for _ in range(burst):
                done += step(shape)
            torch.cuda.synchronize()
            busy += time.perf_counter() - b0
            if idle_s:  # a fixed wait, as a tool call's: it does not stretch when slowed
                time.sleep(idle_s)
        wall = time.perf_counter() - t0
        conn.send((done / wall, busy / wall))


class Workers:
    def __init__(
        self,
        n: int,
        envs: Sequence[dict[str, str]] = (),
        target: Callable[[Any], None] = _worker,
    ) -> None:
        """``envs[i]``: variables worker i starts with (an MPS client's thread
        share and memory limit are read once, when its CUDA context is made)."""
        ctx = mp.get_context("spawn")
        self.conns = []
        self.procs = []
        for i in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=target, args=(child,), daemon=True)
            with _environ(envs[i] if i < len(envs) else {}):
                p.start()  # a spawned child copies os.environ here
            self.conns.append(parent)
            self.procs.append(p)
        for c in self.conns:
            if not c.poll(180):
                raise RuntimeError("a worker did not become ready in 180 s")
            c.recv()

    def run(
        self, shapes: Sequence[str], seconds: float, cycles: Sequence[tuple[int, float]] = ()
    ) -> list[float]:
        """Each shape's rate over one common window (``cycles`` as in ``run_cycles``)."""
        return [rate for rate, _ in self.run_cycles(shapes, seconds, cycles)]

    def run_cycles(
        self, shapes: Sequence[str], seconds: float, cycles: Sequence[tuple[int, float]] = ()
    ) -> list[tuple[float, float]]:
        """(rate, busy share of the window) per shape; ``cycles[i]`` = (steps
        per burst, idle seconds after each) for worker i, else (4, 0): full pressure."""
        start = time.time() + 0.2
        for i, (c, s) in enumerate(zip(self.conns, shapes, strict=False)):
            burst, idle = cycles[i] if i < len(cycles) else (4, 0.0)
            c.send((s, start, seconds, burst, idle))
        return [c.recv() for c in self.conns[: len(shapes)]]

    def run_alone(
        self, index: int, shape: str, seconds: float, cycle: tuple[int, float] = (4, 0.0)
    ) -> float:
        """Worker ``index``'s rate with the others sent nothing (idle, their
        contexts kept): ``cycle`` as in ``run_cycles``."""
        self.conns[index].send((shape, time.time() + 0.2, seconds, *cycle))
        rate, _ = self.conns[index].recv()
        return float(rate)

    def close(self) -> None:
        for c in self.conns:
            c.send(None)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def summarise(
    alone: dict[str, float], shared: dict[tuple[str, str], tuple[float, float]]
) -> dict[str, Any]:
    """Slowdowns and combined progress from raw rates (pure: tested without a GPU).

    ``shared[(s, t)]`` holds the rates of ``s`` and ``t`` measured side by side.
    ``I[v][o] = alone[v] / shared_rate_of_v - 1``; for a same-shape pair the two
    symmetric runs are averaged.
    """
    slowdown: dict[str, dict[str, float]] = {s: {} for s in alone}
    combined: dict[str, float] = {}
    for (s, t), (rs, rt) in shared.items():
        fs, ft = rs / alone[s], rt / alone[t]
        if s == t:
            slowdown[s][t] = round((1 / fs + 1 / ft) / 2 - 1, 3)
        else:
            slowdown[s][t] = round(1 / fs - 1, 3)
            slowdown[t][s] = round(1 / ft - 1, 3)
        combined[f"{s}+{t}"] = round(fs + ft, 3)
    return {"alone": alone, "slowdown": slowdown, "combined_progress": combined}


def duty_cycle(rate: float, shape: str, duty: float) -> tuple[int, float]:
    """(steps per burst, idle seconds after it) for ``shape`` to be busy ``duty``
    of the time alone, in bursts of about BURST_S, given its full-pressure rate."""
    step_s = STEP_UNITS[shape] / rate
    steps = max(1, round(BURST_S / step_s))
    return steps, steps * step_s * (1 - duty) / duty


def summarise_pressure(
    slowdown: dict[str, dict[str, float]],
    alone: dict[str, float],
    cycled_alone: dict[tuple[str, float], tuple[float, float]],
    pairs: dict[tuple[str, str, float], tuple[float, float]],
) -> list[dict[str, Any]]:
    """Measured slowdown of a full-pressure victim beside a duty-cycled
    co-runner, next to the model's ``p * I`` (pure: tested without a GPU).

    ``cycled_alone[(t, d)]`` = (rate, busy share) of shape ``t`` at duty ``d``
    alone; ``pairs[(v, t, d)]`` = (victim rate, co-runner rate) side by side.
    ``p`` is the busy share measured alone; the co-runner's own slowdown is
    over its whole window (waits included), which is what the simulator slows.
    """
    rows = []
    for (v, t, d), (rv, rt) in pairs.items():
        rate_t, busy = cycled_alone[(t, d)]
        measured = alone[v] / rv - 1
        rows.append(
            {
                "victim": v,
                "co_runner": t,
                "duty": d,
                "pressure": round(busy, 3),
                "victim_slowdown": round(measured, 3),
                "model_p_times_I": round(busy * slowdown[v][t], 3),
                "co_runner_slowdown": round(rate_t / rt - 1, 3),
                "model_co_runner": round(slowdown[t][v], 3),
                # in exclusive-GPU units: alone, the co-runner delivers about p
                "combined_progress": round(rv / alone[v] + rt / alone[t], 3),
            }
        )
    return rows


def summarise_both(
    slowdown: dict[str, dict[str, float]],
    cycled_alone: dict[tuple[str, float], tuple[float, float]],
    pairs: dict[tuple[tuple[str, float], tuple[str, float]], tuple[float, float]],
) -> list[dict[str, Any]]:
    """Two duty-cycled sides on one GPU, each against its own rate alone, next
    to the simulator's model and to a candidate one (pure: tested without a GPU).

    The model slows each side's whole segment, waits included, by
    ``1 / (1 + p_other x I)``; the candidate lets only the busy share stretch,
    ``1 / (1 + p_self x p_other x I)``. "Jobs' progress" sums the two sides'
    rates against their own alone (2.0: neither slowed), rule 5's measure.
    """
    rows = []
    for ((a, da), (b, db)), (ra, rb) in pairs.items():
        alone_a, pa = cycled_alone[(a, da)]
        alone_b, pb = cycled_alone[(b, db)]
        sa, sb = alone_a / ra - 1, alone_b / rb - 1
        model_a, model_b = pb * slowdown[a][b], pa * slowdown[b][a]
        busy_a, busy_b = pa * model_a, pb * model_b
        rows.append(
            {
                "a": a,
                "duty_a": da,
                "b": b,
                "duty_b": db,
                "pressure_a": round(pa, 3),
                "pressure_b": round(pb, 3),
                "slowdown_a": round(sa, 3),
                "slowdown_b": round(sb, 3),
                "model_a": round(model_a, 3),
                "model_b": round(model_b, 3),
                "jobs_progress": round(1 / (1 + sa) + 1 / (1 + sb), 3),
                "model_jobs_progress": round(1 / (1 + model_a) + 1 / (1 + model_b), 3),
                "busy_only_jobs_progress": round(1 / (1 + busy_a) + 1 / (1 + busy_b), 3),
            }
        )
    return rows


def measure(seconds: float, pressure: Sequence[str] = ()) -> dict[str, Any]:
    workers = Workers(2)
    try:
        alone = {s: workers.run([s], seconds)[0] for s in SHAPES}
        shared: dict[tuple[str, str], tuple[float, float]] = {}
        for s, t in combinations_with_replacement(SHAPES, 2):
            rs, rt = workers.run([s, t], seconds)
            shared[(s, t)] = (rs, rt)
        result = summarise(alone, shared)
        cycled: dict[tuple[str, float], tuple[float, float]] = {}
        if "victim" in pressure:
            pairs: dict[tuple[str, str, float], tuple[float, float]] = {}
            for d in DUTIES:
                for t in DUTY_SHAPES:
                    cycle = duty_cycle(alone[t], t, d)
                    # worker 0 runs the cycled shape alone, then beside each victim
                    cycled[(t, d)] = workers.run_cycles([t], seconds, [cycle])[0]
                    for v in DUTY_SHAPES:
                        rt, rv = workers.run([t, v], seconds, [cycle])
                        pairs[(v, t, d)] = (rv, rt)
            result["pressure"] = summarise_pressure(result["slowdown"], alone, cycled, pairs)
        if "both" in pressure:
            both: dict[tuple[tuple[str, float], tuple[str, float]], tuple[float, float]] = {}
            for sides in BOTH_IDLE:
                cycles = [duty_cycle(alone[s], s, d) for s, d in sides]
                for (s, d), cycle in zip(sides, cycles, strict=True):
                    if (s, d) not in cycled:
                        cycled[(s, d)] = workers.run_cycles([s], seconds, [cycle])[0]
                ra, rb = workers.run([s for s, _ in sides], seconds, cycles)
                both[sides] = (ra, rb)
            result["both_idle"] = summarise_both(result["slowdown"], cycled, both)
        return result
    finally:
        workers.close()


@contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` set (a value of "" removes the variable), then as it was."""
    old = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v:
            os.environ[k] = v
        else:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, was in old.items():
            if was is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = was


def find_mps_control() -> str | None:
    """``nvidia-cuda-mps-control`` on PATH, or where NVIDIA's container toolkit puts it."""
    for candidate in (
        shutil.which("nvidia-cuda-mps-control"),
        "/usr/local/nvidia/bin/nvidia-cuda-mps-control",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@contextmanager
def mps_daemon() -> Iterator[str | None]:
    """Start an MPS control daemon for this run; yields None (with why) where none runs."""
    binary = find_mps_control()
    if binary is None:
        print("MPS: nvidia-cuda-mps-control not found; pairs measured with time-slicing only")
        yield None
        return
    base = Path(tempfile.mkdtemp(prefix="rlix-mps-"))
    env = dict(
        os.environ,
        CUDA_MPS_PIPE_DIRECTORY=str(base / "pipe"),
        CUDA_MPS_LOG_DIRECTORY=str(base / "log"),
    )
    (base / "pipe").mkdir()
    (base / "log").mkdir()
    started = subprocess.run(
        [binary, "-d"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    if started.returncode != 0:
        print(f"MPS: the control daemon did not start: {started.stderr.strip()}")
        yield None
        return
    old = {k: os.environ.get(k) for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
    os.environ.update(
        CUDA_MPS_PIPE_DIRECTORY=env["CUDA_MPS_PIPE_DIRECTORY"],
        CUDA_MPS_LOG_DIRECTORY=env["CUDA_MPS_LOG_DIRECTORY"],
    )
    try:
        yield binary
    finally:
        subprocess.run([binary], input="quit\n", env=env, text=True, timeout=30, check=False)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(base, ignore_errors=True)


def table(result: dict[str, Any], title: str) -> str:
    units = {"compute": "TFLOP/s", "memory": "GB/s read", "network": "GB/s copied"}
    lines = [f"{title}", "| shape alone | rate |", "|---|---|"]
    lines += [f"| {s} | {result['alone'][s]:.1f} {units[s]} |" for s in SHAPES]
    lines += ["", "| I[victim, co-runner] | " + " | ".join(SHAPES) + " |"]
    lines += ["|---|" + "---|" * len(SHAPES)]
    lines += [
        f"| {v} | " + " | ".join(f"{result['slowdown'][v][o]:.2f}" for o in SHAPES) + " |"
        for v in SHAPES
    ]
    lines += ["", "| pair | combined progress (exclusive = 1.0 each, 2.0 = no interference) |"]
    lines += ["|---|---|"] + [f"| {k} | {v:.2f} |" for k, v in result["combined_progress"].items()]
    if result.get("pressure"):
        lines += [
            "",
            "| victim (full) | co-runner | duty | pressure p | victim I measured | model p x I "
            "| co-runner slowdown (wall) | model I | combined progress |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['victim']} | {r['co_runner']} | {r['duty']:.2f} | {r['pressure']:.2f} "
            f"| {r['victim_slowdown']:.2f} | {r['model_p_times_I']:.2f} "
            f"| {r['co_runner_slowdown']:.2f} | {r['model_co_runner']:.2f} "
            f"| {r['combined_progress']:.2f} |"
            for r in result["pressure"]
        ]
    if result.get("both_idle"):
        lines += [
            "",
            "| a (duty) | b (duty) | p_a | p_b | slowdown a | b | model a | b "
            "| jobs' progress | model | busy share only |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['a']} ({r['duty_a']:.2f}) | {r['b']} ({r['duty_b']:.2f}) "
            f"| {r['pressure_a']:.2f} | {r['pressure_b']:.2f} "
            f"| {r['slowdown_a']:.2f} | {r['slowdown_b']:.2f} "
            f"| {r['model_a']:.2f} | {r['model_b']:.2f} | {r['jobs_progress']:.2f} "
            f"| {r['model_jobs_progress']:.2f} | {r['busy_only_jobs_progress']:.2f} |"
            for r in result["both_idle"]
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="window per measurement")
    ap.add_argument("--out", type=Path, default=Path("interference.json"))
    ap.add_argument("--no-mps", action="store_true", help="time-slicing only")
    ap.add_argument(
        "--no-pressure",
        action="store_true",
        help="skip the duty-cycled co-runners (p x I check, time-slicing)",
    )
    ap.add_argument(
        "--pressure-sets",
        nargs="+",
        choices=PRESSURE_SETS,
        default=list(PRESSURE_SETS),
        help="victim: a full-pressure victim beside a co-runner at duty 0.25/0.5/0.75 "
        "(24 windows); both: both sides idle part of the time (9 windows)",
    )
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"gpu-interference: SKIPPED: torch is not installed ({exc})")
        return SKIPPED_EXIT
    if not torch.cuda.is_available():
        print("gpu-interference: SKIPPED: torch sees no CUDA device")
        return SKIPPED_EXIT
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "seconds_per_window": args.seconds,
        "model": "rate_shared = rate_alone / (1 + I[victim, co-runner])",
        "kernels": {
            "compute": "bf16 GEMM 8192x8192x8192",
            "memory": "bf16 GEMV, 32768x16384 weights (1 GiB), batch 8",
            "network": "pinned host<->device copy, 256 MiB each way (PCIe stands in for NVLink)",
        },
    }
    t0 = time.perf_counter()
    report["time_slicing"] = measure(
        args.seconds, pressure=() if args.no_pressure else args.pressure_sets
    )
    print(table(report["time_slicing"], f"time-slicing on {report['gpu']}"))
    if not args.no_mps:
        with mps_daemon() as daemon:
            if daemon is not None:
                try:
                    report["mps"] = measure(args.seconds)
                    print()
                    print(table(report["mps"], "MPS"))
                except Exception as exc:
                    print(f"MPS: measurement failed: {type(exc).__name__}: {exc}")
                    report["mps_error"] = f"{type(exc).__name__}: {exc}"
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.out}; total {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
