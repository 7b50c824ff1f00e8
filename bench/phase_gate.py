"""What the node agent's phase gate does to two trainers on one GPU (CPU only).

Two real trainer processes use the client library against a real agent
process (``rlix-node-agent --no-kube --backend simulated``), both holding
memory on simulated GPU 0. Each loops: a busy phase of ``busy`` seconds inside
``with rlix.phase("training")``, then ``idle`` seconds outside any phase block
(a disaggregated pool waiting for its other pool, a rollout waiting on tools).
The same pair runs against an agent without the gate and one with
``--phase-gate``, side by side in one run, for several duty cycles.

Measured: the share of each trainer's busy time during which the other was
busy too (overlap), and each trainer's mean iteration time against its time
alone (busy + idle). Simulated GPUs do not slow overlapping kernels, so
without the gate the iteration time stays at alone here; on a GPU the overlap
is where two busy phases share it (0.90-0.95 of a GPU's progress on an H200,
bench/results/gpu_interference.md). The gate trades that overlap for waiting:
the table shows how much of each.

Writes bench/results/phase_gate.md and prints it.
Run: .venv/bin/python bench/phase_gate.py [--iterations 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.agent_fakes import AgentProcess

RESULTS = Path(__file__).parent / "results" / "phase_gate.md"
PODS = {
    "aaaaaaaa-0000-4000-8000-0000000000aa": "bench/trainer-a",
    "bbbbbbbb-0000-4000-8000-0000000000bb": "bench/trainer-b",
}
# (busy s, idle s): half busy (a disaggregated pool), two thirds busy (a
# rollout with a third of its time on tools), always busy (colocated phases).
DUTIES = ((0.2, 0.2), (0.2, 0.1), (0.2, 0.0))
# Where in its cycle the second trainer starts (shares of a cycle), as the
# simulator's gated_rates plays pairs out: where a pair settles depends on it.
OFFSETS = (0.0, 0.25, 0.5, 0.75)

TRAINER = r"""
import json, sys, time
import rlix
from rlix.client import api
busy, idle, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
gated, offset = sys.argv[4] == "1", float(sys.argv[5])
sys.stdin.readline()  # in a pod by now
rt = api._get()
deadline = time.monotonic() + 20
while (rt.link is None or not rt.link.connected.is_set() or (gated and rt.gate_wait_s is None)) \
        and time.monotonic() < deadline:
    time.sleep(0.01)
rlix.report_usage(gpu=0, memory_mib=1024, utilization=0.9)
print("ready", flush=True)
sys.stdin.readline()  # both start together, the second one offset into its cycle
time.sleep(offset)
spans, start = [], time.time()
for _ in range(n):
    with rlix.phase("training"):
        t0 = time.time()
        time.sleep(busy)
        spans.append((t0, time.time()))
    time.sleep(idle)
print(json.dumps({"spans": spans, "total": time.time() - start}), flush=True)
"""


def run_pair(
    agent: AgentProcess, busy: float, idle: float, n: int, *, gated: bool, offset: float
) -> list[dict[str, Any]]:
    """Both trainers' busy spans and total times; the second starts ``offset``
    of a cycle after the first."""
    procs = []
    for uid, delay in zip(PODS, (0.0, offset * (busy + idle)), strict=True):
        flag = "1" if gated else "0"
        proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(busy), str(idle), str(n), flag, str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "RLIX_AGENT_SOCKET": str(agent.socket)},
        )
        agent.put_in_pod(proc.pid, uid)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"trainer did not start: {agent.log_text()}")
        procs.append(proc)
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("start\n")
        proc.stdin.flush()
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=600)
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def overlap_share(mine: list[list[float]], theirs: list[list[float]]) -> float:
    """Share of ``mine``'s busy time during which ``theirs`` was busy too."""
    both = sum(max(0.0, min(a1, b1) - max(a0, b0)) for a0, a1 in mine for b0, b1 in theirs)
    return both / sum(a1 - a0 for a0, a1 in mine)


def measure(agent: AgentProcess, busy: float, idle: float, n: int, gated: bool) -> dict[str, float]:
    """Overlap and iteration stretch, averaged over the starting offsets."""
    overlaps, stretches = [], []
    for offset in OFFSETS:
        a, b = run_pair(agent, busy, idle, n, gated=gated, offset=offset)
        overlaps += [overlap_share(a["spans"], b["spans"]), overlap_share(b["spans"], a["spans"])]
        stretches += [r["total"] / n / (busy + idle) for r in (a, b)]
    return {"overlap": statistics.fmean(overlaps), "stretch": statistics.fmean(stretches)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=30)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlix-bench-gate-") as tmp:
        for path in (Path(tmp) / "plain", Path(tmp) / "gated"):
            path.mkdir()
        plain = AgentProcess(Path(tmp) / "plain", pods=PODS)
        gated = AgentProcess(Path(tmp) / "gated", pods=PODS, extra_args=("--phase-gate",))
        with plain, gated:
            for busy, idle in DUTIES:
                off = measure(plain, busy, idle, args.iterations, gated=False)
                on = measure(gated, busy, idle, args.iterations, gated=True)
                rows.append((busy, idle, off, on))
                print(f"  busy {busy} s, idle {idle} s: done", file=sys.stderr, flush=True)
    lines = [
        "# The phase gate: two trainers on one GPU",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {args.iterations} iterations per trainer, "
        f"the second starting {', '.join(f'{o:g}' for o in OFFSETS)} of a cycle after "
        "the first (cells: the mean over those runs). Generated by `bench/phase_gate.py` "
        "(simulated GPUs: nothing slows when phases overlap, so this measures the gate's "
        "mechanism, not GPU progress).",
        "",
        "| busy / idle (s) | busy share | overlap, no gate | overlap, gate | "
        "iteration / alone, no gate | iteration / alone, gate |",
        "|---|---|---|---|---|---|",
    ]
    for busy, idle, off, on in rows:
        lines.append(
            f"| {busy} / {idle} | {busy / (busy + idle):.2f} | {off['overlap']:.2f} | "
            f"{on['overlap']:.2f} | {off['stretch']:.2f} | {on['stretch']:.2f} |"
        )
    lines += [
        "",
        "Overlap: the share of a trainer's busy time during which the other was busy",
        "too (mean of the two). Iteration / alone: mean iteration time over busy + idle.",
        "With the gate, two trainers whose busy shares sum to at most 1 fall into step",
        "(each works while the other idles); above 1 they take turns, and each",
        "iteration lasts as long as both busy phases.",
    ]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
