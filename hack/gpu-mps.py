#!/usr/bin/env python3
"""MPS as RLix runs it, on a real GPU (tier 5): sharing by thread share, limits, isolation.

    make gpu-check    # runs this after hack/gpu-interference.py
    .venv/bin/python hack/gpu-mps.py [--seconds 2] [--out gpu_mps.json]

docs/dra.md ("Kernels side by side: MPS") describes what a role with ``mps:``
gets: the node agent's control daemon (``rlix.agent.mps.MpsSupervisor``, the
command from ``rlix.core.mps.daemon_command``) and a client environment
(``rlix.core.mps.client_env``: pipe directory, pinned device-memory limit,
optional active-thread percentage). Until now none of it had run on a GPU.
This script runs exactly those pieces and measures:

* **layout**: where it runs as root and may mount, it re-executes itself in a
  private mount namespace with the MPS ``shm/`` directory over /dev/shm, as a
  client pod sees it, and starts the daemon through the agent's supervisor
  (which binds the same directory for the daemon). Elsewhere it says so and
  starts the same daemon without the bind.
* **splits**: a compute-bound GEMM and a bandwidth-bound GEMV (the kernels of
  ``hack/gpu-interference.py``) as two MPS clients, each with its own
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: each alone, then side by side, at full
  pressure and both duty-cycled at 0.5; each side's rate is put against the
  full GPU's (time-slicing, measured first in the same run), so "jobs'
  progress" is in exclusive-GPU units, 2.0 = neither slowed.
* **memory limit**: a client with the budget ``client_env`` gives it allocates
  within and past it.
* **driver checkpoint** of an MPS client by PID (the agent's transparent path).
* **fault isolation**: one client hits a device-side assert while another runs
  GEMMs; what happens to the other, and whether a new client starts after.

Writes JSON (after each part, so a cut-short run keeps what it measured) and
prints tables. Exits 77 without a GPU or without ``nvidia-cuda-mps-control``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlix.core import mps  # noqa: E402  (after the path: run as a script from anywhere)

SKIPPED_EXIT = 77
INNER_FLAG = "--inside-namespace"
# (shape, thread percentage) of each client; None: no percentage set (the whole GPU).
SPLITS: tuple[tuple[tuple[str, int | None], tuple[str, int | None]], ...] = (
    (("compute", None), ("memory", None)),
    (("compute", 50), ("memory", 50)),
    (("compute", 70), ("memory", 30)),
    (("compute", 85), ("memory", 15)),
    (("memory", 50), ("memory", 50)),
    (("compute", 50), ("compute", 50)),
    (("memory", None), ("memory", None)),
    (("compute", None), ("compute", None)),
)
DUTIES = (0.5, 0.65)  # both sides busy half the time; agentic rollouts (tool waits 35%)
BUDGET_MIB = 4096  # the memory-limit check's per-GPU budget


def _interference() -> ModuleType:
    """hack/gpu-interference.py (its name has a hyphen): kernels, workers, duty cycles."""
    module = sys.modules.get("gpu_interference")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "gpu_interference", Path(__file__).with_name("gpu-interference.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_interference"] = module
        spec.loader.exec_module(module)
    return module


def _worker(conn: Any) -> None:
    """The interference worker, reachable by name from a spawned child of this script."""
    _interference()._worker(conn)


def client_env(paths: mps.MpsPaths, percentage: int | None, budget_mib: int) -> dict[str, str]:
    """What rlix.core.mps gives a role's container, as a plain mapping."""
    env = mps.client_env(paths, gpus=1, budget_mib=budget_mib, active_thread_percentage=percentage)
    return {e["name"]: e["value"] for e in env}


def summarise_split(
    alone: tuple[float, float],
    shared: tuple[float, float],
    at_duty: dict[str, tuple[tuple[float, float], tuple[float, float]]],
) -> dict[str, Any]:
    """One split's numbers in exclusive-GPU units (pure: tested without a GPU).

    Every rate is already over the shape's rate with the GPU to itself (no
    MPS) at the same duty, so 1.0 is an exclusive GPU: ``alone`` each client
    alone under its thread share, ``shared`` side by side; ``at_duty[d]`` =
    (alone, shared) with both sides busy a share ``d`` of the time. "Jobs'
    progress" sums the two sides (2.0: neither slowed).
    """
    (fa, fb), (sa, sb) = alone, shared
    return {
        "alone_a": round(fa, 3),
        "alone_b": round(fb, 3),
        "shared_a": round(sa, 3),
        "shared_b": round(sb, 3),
        "jobs_progress": round(sa + sb, 3),
        "slowdown_a": round(fa / sa - 1, 3) if sa > 0 else float("inf"),
        "slowdown_b": round(fb / sb - 1, 3) if sb > 0 else float("inf"),
        "alone_at_duty": {d: [round(x, 3) for x in pair[0]] for d, pair in at_duty.items()},
        "duty_jobs_progress": {d: round(sum(pair[1]), 3) for d, pair in at_duty.items()},
    }


def measure_split(
    sides: tuple[tuple[str, int | None], tuple[str, int | None]],
    seconds: float,
    envs: Sequence[dict[str, str]],
    full: dict[str, float],
    full_duty: dict[str, dict[str, float]],
    *,
    observe: Callable[[], None] | None = None,
) -> dict[str, Any]:
    gi = _interference()
    shapes = [s for s, _ in sides]
    raw: dict[str, Any] = {}
    workers = gi.Workers(2, envs=envs, target=_worker)
    try:
        if observe is not None:
            observe()
        raw["alone"] = [workers.run_alone(i, shapes[i], seconds) for i in (0, 1)]
        raw["shared"] = workers.run(shapes, seconds)
        for d in DUTIES:
            cycles = [gi.duty_cycle(full[s], s, d) for s in shapes]
            raw[f"alone_{d}"] = [
                workers.run_alone(i, shapes[i], seconds, cycles[i]) for i in (0, 1)
            ]
            raw[f"shared_{d}"] = workers.run(shapes, seconds, cycles)
    finally:
        workers.close()

    def rel(rates: Sequence[float], base: dict[str, float]) -> tuple[float, float]:
        return rates[0] / base[shapes[0]], rates[1] / base[shapes[1]]

    out: dict[str, Any] = {"a": shapes[0], "threads_a": sides[0][1]}
    out |= {"b": shapes[1], "threads_b": sides[1][1]}
    at_duty = {
        str(d): (
            rel(raw[f"alone_{d}"], full_duty[str(d)]),
            rel(raw[f"shared_{d}"], full_duty[str(d)]),
        )
        for d in DUTIES
    }
    out |= summarise_split(rel(raw["alone"], full), rel(raw["shared"], full), at_duty)
    out["raw"] = raw
    return out


def measure_full(
    seconds: float,
) -> tuple[dict[str, float], dict[str, dict[str, float]], dict[str, Any]]:
    """Each shape with the GPU to itself (full pressure and at each duty), and
    the time-slicing compute+memory pair, before any MPS runs."""
    gi = _interference()
    no_mps = {mps.ENV_PIPE: "", mps.ENV_THREADS: ""}
    shapes = ("compute", "memory")
    workers = gi.Workers(2, envs=[no_mps, no_mps], target=_worker)
    full_duty: dict[str, dict[str, float]] = {}
    ts: dict[str, Any] = {"a": "compute", "b": "memory", "duty_jobs_progress": {}, "raw": {}}
    try:
        full = {s: workers.run([s], seconds)[0] for s in shapes}
        pair = workers.run(list(shapes), seconds)
        ts["jobs_progress"] = round(pair[0] / full["compute"] + pair[1] / full["memory"], 3)
        ts["raw"]["pair"] = pair
        for d in DUTIES:
            cycles = {s: gi.duty_cycle(full[s], s, d) for s in shapes}
            alone = {s: workers.run_cycles([s], seconds, [cycles[s]])[0][0] for s in shapes}
            full_duty[str(d)] = alone
            rates = workers.run(list(shapes), seconds, [cycles[s] for s in shapes])
            ts["duty_jobs_progress"][str(d)] = round(
                rates[0] / alone["compute"] + rates[1] / alone["memory"], 3
            )
            ts["raw"][f"pair_{d}"] = rates
    finally:
        workers.close()
    return full, full_duty, ts


def merged_env(env: dict[str, str]) -> dict[str, str]:
    """``os.environ`` with ``env`` over it; a value of "" removes the variable."""
    out = {**os.environ, **env}
    return {k: v for k, v in out.items() if v != ""}


def run_python(code: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """A short client program; its last stdout line is JSON."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=merged_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        out = {"stdout_tail": lines[-3:]}
    out["rc"] = done.returncode
    if done.returncode != 0:
        out["stderr_tail"] = done.stderr.strip().splitlines()[-3:]
    return out


MEMORY_LIMIT_CLIENT = """
    import json, torch
    GiB = 1 << 30
    free, total = torch.cuda.mem_get_info(0)
    out = {"mem_get_info_total_mib": total >> 20, "mem_get_info_free_mib": free >> 20}
    kept = []
    for gib in (2, 3):
        try:
            kept.append(torch.empty(gib * GiB, dtype=torch.uint8, device="cuda:0"))
            out[f"then_{gib}_gib"] = "allocated"
        except torch.OutOfMemoryError as exc:
            out[f"then_{gib}_gib"] = "refused: " + str(exc).splitlines()[0][:160]
    print(json.dumps(out))
"""


def check_memory_limit(paths: mps.MpsPaths) -> dict[str, Any]:
    env = client_env(paths, None, BUDGET_MIB)
    out = run_python(MEMORY_LIMIT_CLIENT, env, 120)
    out["env"] = {k: v.replace(paths.root, "$MPS_ROOT") for k, v in env.items()}
    return out


CHECKPOINT_CLIENT = """
    import hashlib, json, sys, torch
    t = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device="cuda:0")
    def digest():
        return hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()
    print(json.dumps({"before": digest()}), flush=True)
    sys.stdin.readline()  # the parent checkpointed and restored us meanwhile
    print(json.dumps({"after": digest()}), flush=True)
"""


def check_checkpoint(paths: mps.MpsPaths) -> dict[str, Any]:
    """The agent's transparent path (rlix.agent.driver_checkpoint) on an MPS
    client, and on a process outside MPS at the same time for contrast."""
    from rlix.agent.driver_checkpoint import CudaDriverCheckpointer

    ckpt = CudaDriverCheckpointer()
    reason = ckpt.unsupported_reason()
    if reason is not None:
        return {"outcome": f"unsupported here: {reason}"}
    no_mps = {mps.ENV_PIPE: ""}  # the default pipe directory, where no daemon runs
    return {
        "mps_client": _checkpoint_one(ckpt, client_env(paths, 50, 8192)),
        "plain_process": _checkpoint_one(ckpt, no_mps),
    }


def _checkpoint_one(ckpt: Any, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHECKPOINT_CLIENT)],
        env=merged_env(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        before = json.loads(proc.stdout.readline())["before"]
        took: dict[str, float] = {}
        for step, call in (("suspend", ckpt.suspend), ("resume", ckpt.resume)):
            t0 = time.perf_counter()
            try:
                call(proc.pid)
            except Exception as exc:
                return {"outcome": f"{step} failed: {type(exc).__name__}: {exc}"[:300]}
            took[step] = round(time.perf_counter() - t0, 3)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            return {"outcome": f"client died after restore (exit {proc.wait(10)})"}
        same = json.loads(line)["after"] == before
        return {
            "outcome": "bit for bit" if same else "MISMATCH",
            "checkpoint_s": took["suspend"],
            "restore_s": took["resume"],
        }
    finally:
        proc.kill()
        proc.wait(10)


VICTIM_CLIENT = """
    import json, time, torch
    a = torch.randn(4096, 4096, device="cuda:0")
    out = {"steps": 0}
    t0 = time.time()
    try:
        while time.time() - t0 < 20:  # the fault comes about 8 s in
            torch.mm(a, a)
            torch.cuda.synchronize()
            out["steps"] += 1
        out["outcome"] = "ran on"
    except Exception as exc:
        out["outcome"] = f"{type(exc).__name__}: " + str(exc).splitlines()[0][:160]
        out["after_s"] = round(time.time() - t0, 2)
    print(json.dumps(out))
"""

FAULTS = {
    # a kernel's own check fails: the context is poisoned, the GPU is not
    "device_assert": "x[torch.tensor([1 << 20], device='cuda:0')] = 1.0",
    # a load from an unmapped address: an MMU fault, what NVIDIA calls fatal
    "illegal_address": (
        "torch.cuda.jiterator._create_jit_fn('template <typename T> T bad(T x) "
        "{ return x + *reinterpret_cast<volatile T*>(0x10); }')(x)"
    ),
}

FAULTING_CLIENT = """
    import json, time, torch
    x = torch.zeros(16, device="cuda:0")
    time.sleep(2)
    try:
        {fault}
        torch.cuda.synchronize()
        print(json.dumps({{"outcome": "no fault raised"}}))
    except Exception as exc:
        why = f"{{type(exc).__name__}}: " + str(exc).splitlines()[0][:160]
        print(json.dumps({{"outcome": why}}))
"""


def check_fault_isolation(paths: mps.MpsPaths) -> dict[str, Any]:
    """Each fault in one client while another runs GEMMs; then a new client."""
    return {kind: _fault_once(paths, code) for kind, code in FAULTS.items()}


def _fault_once(paths: mps.MpsPaths, fault: str) -> dict[str, Any]:
    env = client_env(paths, 50, 8192)
    code = textwrap.dedent(VICTIM_CLIENT)
    victim = subprocess.Popen(
        [sys.executable, "-c", code],
        env=merged_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # the victim's context is up and running GEMMs
    faulting = run_python(FAULTING_CLIENT.format(fault=fault), env, 90)
    try:
        out, err = victim.communicate(timeout=60)
        lines = out.strip().splitlines()
        victim_out = json.loads(lines[-1]) if lines else {"stderr_tail": err.splitlines()[-3:]}
    except subprocess.TimeoutExpired:
        victim.kill()
        victim_out = {"outcome": "hung (killed after 60 s)"}
    after = run_python(
        "import json, torch; torch.ones(1, device='cuda:0').sum().item(); "
        "print(json.dumps({'outcome': 'a new client ran a kernel'}))",
        env,
        60,
    )
    return {"faulting_client": faulting, "other_client": victim_out, "new_client_after": after}


CHECKS = (
    ("memory_limit", check_memory_limit),
    ("checkpoint", check_checkpoint),
    ("fault_isolation", check_fault_isolation),
)
PARTS = ("splits", *(key for key, _ in CHECKS))


def nvidia_smi_processes() -> list[str]:
    """nvidia-smi's process rows (Type "M" the MPS server, "M+C" its clients)."""
    try:
        text = subprocess.run(
            ["nvidia-smi"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"nvidia-smi: {exc}"]
    return process_rows(text)


def process_rows(text: str) -> list[str]:
    """ "pid type memory" of each MPS process row (pure; the process's path is left out)."""
    rows = []
    for line in text.splitlines():
        cells = line.strip("| ").split()
        if len(cells) >= 6 and cells[4] in ("M", "M+C", "C") and cells[-1].endswith("MiB"):
            rows.append(f"pid {cells[3]} type {cells[4]} {cells[-1]}")
    return rows


def can_bind_shm(paths: mps.MpsPaths) -> str | None:
    """None where a private mount namespace with ``shm/`` over /dev/shm can be made, else why."""
    if os.geteuid() != 0:
        return "not root"
    probe = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            f"mount --bind {paths.shm} /dev/shm",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return (probe.stderr.strip() or f"unshare exited {probe.returncode}")[:200]
    return None


def save(report: dict[str, Any], out: Path) -> None:
    out.write_text(json.dumps(report, indent=2) + "\n")


def fmt_threads(p: int | None) -> str:
    return "whole GPU" if p is None else f"{p}%"


def matrices(report: dict[str, Any]) -> dict[str, dict[tuple[str, str], float]]:
    """Full-pressure ``I[victim, co-runner]`` measured in this run (pure).

    "time-slicing" from the compute+memory pair before MPS ran; "MPS" from the
    whole-GPU splits (same-shape pairs: the mean of the two sides).
    """
    full = report["full_gpu_rates"]
    c, m = report["time_slicing"]["raw"]["pair"]
    ts = {
        ("compute", "memory"): full["compute"] / c - 1,
        ("memory", "compute"): full["memory"] / m - 1,
    }
    whole: dict[tuple[str, str], float] = {}
    for r in report.get("splits", []):
        if "error" in r or r["threads_a"] is not None or r["threads_b"] is not None:
            continue
        if r["a"] == r["b"]:
            whole[(r["a"], r["a"])] = (r["slowdown_a"] + r["slowdown_b"]) / 2
        else:
            whole[(r["a"], r["b"])] = r["slowdown_a"]
            whole[(r["b"], r["a"])] = r["slowdown_b"]
    return {"time-slicing": ts, "MPS": whole}


def model_jobs_progress(
    matrix: dict[tuple[str, str], float], a: str, b: str, duty: float
) -> float | None:
    """The simulator's ``p x I`` for two sides busy ``duty`` of the time each:
    each side's rate is ``1 / (1 + p_other x I[self, other])`` (None: no cell)."""
    if (a, b) not in matrix or (b, a) not in matrix:
        return None
    return 1 / (1 + duty * matrix[(a, b)]) + 1 / (1 + duty * matrix[(b, a)])


def bursty_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Both sides idling, measured beside the ``p x I`` model with the same
    run's full-pressure matrix of the same sharing mode (pure)."""
    mats = matrices(report)
    pairs: list[tuple[str, str, str, dict[str, float]]] = []
    ts = report["time_slicing"]
    pairs.append(("time-slicing", "compute", "memory", ts["duty_jobs_progress"]))
    for r in report.get("splits", []):
        if "error" not in r and r["threads_a"] is None and r["threads_b"] is None:
            pairs.append(("MPS", r["a"], r["b"], r["duty_jobs_progress"]))
    rows = []
    for mode, a, b, measured in pairs:
        for d, value in measured.items():
            model = model_jobs_progress(mats[mode], a, b, float(d))
            rows.append(
                {
                    "mode": mode,
                    "pair": f"{a}+{b}",
                    "duty": float(d),
                    "measured": round(value, 3),
                    "model": None if model is None else round(model, 3),
                }
            )
    return rows


def table(report: dict[str, Any]) -> str:
    duties = [str(d) for d in report.get("duties", DUTIES)]
    lines = [
        f"MPS on {report['gpu']} ({report['layout']})",
        "",
        "| a (threads) | b (threads) | a alone | b alone | a shared | b shared | jobs' progress | "
        + " | ".join(f"both busy {d}: jobs' progress" for d in duties)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(duties),
    ]

    def at_duty(r: dict[str, Any]) -> str:
        return " | ".join(f"{r['duty_jobs_progress'][d]:.2f}" for d in duties)

    ts = report.get("time_slicing")
    if ts:
        lines.append(
            f"| compute (time-slicing) | memory (time-slicing) | 1.00 | 1.00 | | "
            f"| {ts['jobs_progress']:.2f} | {at_duty(ts)} |"
        )
    for r in report.get("splits", []):
        if "error" in r:
            lines.append(f"| {r['a']} | {r['b']} | {r['error']} |")
            continue
        a = f"{r['a']} ({fmt_threads(r['threads_a'])})"
        b = f"{r['b']} ({fmt_threads(r['threads_b'])})"
        lines.append(
            f"| {a} | {b} "
            f"| {r['alone_a']:.2f} | {r['alone_b']:.2f} | {r['shared_a']:.2f} "
            f"| {r['shared_b']:.2f} | {r['jobs_progress']:.2f} | {at_duty(r)} |"
        )
    if report.get("splits"):
        lines += [
            "",
            "| sharing | pair (whole GPU) | both busy | jobs' progress measured "
            "| model p x I (this run's full-pressure I) |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['mode']} | {r['pair']} | {r['duty']:.2f} | {r['measured']:.2f} | "
            + ("" if r["model"] is None else f"{r['model']:.2f}")
            + " |"
            for r in bursty_rows(report)
        ]
    for key, _ in CHECKS:
        if key in report:
            lines += ["", f"{key}: {json.dumps(report[key])}"]
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="window per measurement")
    ap.add_argument("--out", type=Path, default=Path("gpu_mps.json"), help="the JSON report")
    ap.add_argument(
        "--from",
        dest="from_json",
        type=Path,
        help="print the tables of an earlier run's JSON report (no GPU needed) and exit",
    )
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=PARTS,
        help="parts not to run (fault_isolation runs last: a fatal fault may end the server)",
    )
    return ap.parse_args(argv)


def skipped_reason(binary: str | None) -> str | None:
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if binary is None:
        return f"{mps.CONTROL_BINARY} not found"
    return None


def enter_pod_layout(paths: mps.MpsPaths, binary: str, argv: Sequence[str]) -> str:
    """Re-execute in a mount namespace with ``shm/`` over /dev/shm (no return), or say why not."""
    os.environ["PATH"] = f"{Path(binary).parent}:{os.environ.get('PATH', '')}"
    why_not = can_bind_shm(paths)
    if why_not is None:
        cmd = [sys.executable, str(Path(__file__).resolve()), *argv, INNER_FLAG]
        cmd += ["--root", paths.root]
        inside = f"mount --bind {shlex.quote(paths.shm)} /dev/shm && exec {shlex.join(cmd)}"
        os.execvp(
            "unshare", ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", inside]
        )
    return f"daemon without the /dev/shm bind: {why_not}"


def measure_splits(
    report: dict[str, Any], paths: mps.MpsPaths, binary: str, seconds: float, out: Path
) -> None:
    full, full_duty = report["full_gpu_rates"], report["full_gpu_rates_at_duty"]

    def observe() -> None:  # while the first split's clients are up
        report["nvidia_smi_with_clients"] = nvidia_smi_processes()
        report["server_list"] = control(binary, paths, "get_server_list")

    report["splits"] = []
    for n, sides in enumerate(SPLITS):
        envs = [client_env(paths, p, 65536) for _, p in sides]
        try:
            r = measure_split(
                sides, seconds, envs, full, full_duty, observe=observe if n == 0 else None
            )
        except Exception as exc:
            r = {"a": sides[0][0], "b": sides[1][0], "error": f"{type(exc).__name__}: {exc}"}
        report["splits"].append(r)
        save(report, out)
        print(json.dumps({k: v for k, v in r.items() if k != "raw"}), flush=True)


def control(binary: str, paths: mps.MpsPaths, command: str) -> str:
    """One command to the control daemon (``get_server_list``, ``quit``...), its answer."""
    return subprocess.run(
        [binary],
        input=command + "\n",
        env={**os.environ, **mps.daemon_env(paths)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout.strip()


def run_under_mps(
    report: dict[str, Any],
    args: argparse.Namespace,
    paths: mps.MpsPaths,
    supervisor: Any,
    binary: str,
) -> None:
    """Start the daemon (the agent's command where the layout allows), run the
    splits and the checks, and stop it, whatever happened."""
    plain: subprocess.Popen[bytes] | None = None
    if args.inside_namespace:
        supervisor.start()  # the agent's own command: unshare, bind, daemon in the foreground
    else:
        plain = subprocess.Popen([binary, "-f"], env={**os.environ, **mps.daemon_env(paths)})
    time.sleep(1)
    report["daemon_running"] = supervisor.running() if plain is None else plain.poll() is None
    try:
        if "splits" not in args.skip:
            measure_splits(report, paths, binary, args.seconds, args.out)
        for key, check in CHECKS:
            if key in args.skip:
                continue
            try:
                report[key] = check(paths)
            except Exception as exc:
                report[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            save(report, args.out)
            print(f"{key}: {json.dumps(report[key])}", flush=True)
    finally:
        supervisor.shutdown(labelled=False)
        if plain is not None:
            control(binary, paths, "quit")
            plain.wait(30)
        report["daemon_log_tail"] = _log_tail(paths)
        save(report, args.out)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.from_json is not None:
        earlier = json.loads(args.from_json.read_text())
        if "duties" not in earlier:
            print(f"gpu-mps: {args.from_json} was written by an earlier version of this script")
            return 2
        print(table(earlier))
        return 0
    binary = _interference().find_mps_control()
    reason = skipped_reason(binary)
    if reason is not None or binary is None:
        print(f"gpu-mps: SKIPPED: {reason}")
        return SKIPPED_EXIT
    import torch

    from rlix.agent.mps import MpsSupervisor

    paths = mps.MpsPaths(root=args.root or tempfile.mkdtemp(prefix="rlix-mps-"))
    supervisor = MpsSupervisor(paths, label=lambda on: None, binary=binary)
    if args.inside_namespace:
        layout = "as in a pod: clients and daemon see the node's shm/ as /dev/shm"
    else:
        supervisor.prepare()
        layout = enter_pod_layout(paths, binary, argv)
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "seconds_per_window": args.seconds,
        "layout": layout,
        "duties": DUTIES,
    }
    t0 = time.perf_counter()
    full, full_duty, ts = measure_full(args.seconds)
    report.update(full_gpu_rates=full, full_gpu_rates_at_duty=full_duty, time_slicing=ts)
    save(report, args.out)
    print(f"time-slicing pair: jobs' progress {ts['jobs_progress']:.2f}", flush=True)

    run_under_mps(report, args, paths, supervisor, binary)
    print()
    print(table(report))
    print(f"\nwrote {args.out}; total {time.perf_counter() - t0:.0f}s")
    return 0


def _log_tail(paths: mps.MpsPaths) -> list[str]:
    lines: list[str] = []
    for name in ("control.log", "server.log", "agent-daemon.out"):
        f = Path(paths.log) / name
        if f.exists():
            lines += [f"{name}: {line}" for line in f.read_text().splitlines()[-6:]]
    return lines


if __name__ == "__main__":
    sys.exit(main())
