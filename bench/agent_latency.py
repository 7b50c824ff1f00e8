"""Node agent latency and the trainer's cost per phase switch.

Measures the code that ships, with a real agent process (``rlix-node-agent
--no-kube --backend simulated``) on its real unix socket:

* phase report round trip (request -> agent authenticates the peer through
  SO_PEERCRED and the cgroup path, validates, queues the annotation patch ->
  reply), p50/p99 over many reports alternating phases;
* the cost of one ``with rlix.phase(...)`` switch inside the trainer, connected
  to the agent, in no-op mode (no agent), and a bare ``nullcontext`` baseline;
* suspend + resume round trip of torch CPU tensors through the agent (when
  torch is installed), to show the control path is not the bottleneck.

Writes bench/results/agent_latency.md and prints the same table.
Run: .venv/bin/python bench/agent_latency.py [--reports 3000] [--switches 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rlix.client.runtime import Runtime
from rlix.core import agent_protocol as proto

# The agent harness lives with the tests (tests/support).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.agent_fakes import AgentProcess

UID = "eeeeeeee-0000-4000-8000-000000000005"
RESULTS = Path(__file__).parent / "results" / "agent_latency.md"


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def phase_report_latency(agent: AgentProcess, n: int) -> list[float]:
    """Synchronous phase reports from this process (which the fake proc tree
    places in a pod), in microseconds."""
    phases = ["rollout", "training"]
    out: list[float] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(agent.socket))
        reader = s.makefile("rb")
        for i in range(n + 100):
            line = proto.encode_request(i + 1, proto.OP_PHASE, phase=phases[i % 2])
            t0 = time.perf_counter()
            s.sendall(line)
            reply = proto.decode(reader.readline())
            dt = (time.perf_counter() - t0) * 1e6
            assert isinstance(reply, proto.Reply) and reply.ok, reply
            if i >= 100:  # warm-up
                out.append(dt)
        reader.close()
    return out


def switch_cost(runtime: Runtime | None, n: int) -> float:
    """Mean microseconds per phase switch (enter + exit of a phase block)."""
    phases = ["rollout", "training"]
    t0 = time.perf_counter()
    if runtime is None:
        for i in range(n):
            with contextlib.nullcontext(phases[i % 2]):
                pass
    else:
        for i in range(n):
            with runtime.phase(phases[i % 2]):
                pass
    return (time.perf_counter() - t0) / n * 1e6


def gated_switch_cost(tmp: Path, park: str, n: int) -> float:
    """``switch_cost`` against a second agent that runs the phase gate, with no
    other pod on the GPU: what asking the gate costs (each switch waits for
    its answer, and leaving the block reports idle)."""
    uid = "cccccccc-0000-4000-8000-00000000000c"
    gate_dir = tmp / "gated"
    gate_dir.mkdir()
    agent = AgentProcess(
        gate_dir, pods={uid: "bench/gated-0"}, park_dir=Path(park), extra_args=("--phase-gate",)
    )
    with agent:
        agent.put_in_pod(os.getpid(), uid)
        rt = Runtime(str(agent.socket))
        deadline = time.monotonic() + 10
        while rt.gate_wait_s is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if rt.gate_wait_s is None:
            raise TimeoutError(
                f"the gated agent's hello did not offer the gate: {agent.log_text()}"
            )
        try:
            return switch_cost(rt, n)
        finally:
            assert rt.link is not None
            rt.link.close()


def suspend_resume(agent: AgentProcess, mib: int, target: str) -> dict[str, float] | None:
    try:
        import torch
    except ImportError:
        return None
    rt = Runtime(str(agent.socket))
    assert rt.link is not None
    tensors = [torch.rand(mib * (1 << 20) // 4 // 8) for _ in range(8)]
    from rlix.client.torch_offload import TorchOffload

    rt.register(TorchOffload("bench", tensors=tensors))
    # Be identified as the pod (at accept time) before flipping to "host".
    if not rt.link.connected.wait(20):
        raise TimeoutError("bench runtime did not connect")
    hello = rt.link.request(proto.OP_HELLO, hooks=["bench"]).result(20)
    assert hello.ok, hello
    with as_host(agent):
        t0 = time.perf_counter()
        r = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target=target)
        t1 = time.perf_counter()
        assert r.ok, r
        r = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
        t2 = time.perf_counter()
        assert r.ok, r
    rt.link.close()
    gb = mib / 1024 * 1.073741824
    return {"suspend_s": t1 - t0, "resume_s": t2 - t1, "gb": gb}


@contextlib.contextmanager
def as_host(agent: AgentProcess) -> Iterator[None]:
    """Control ops are refused from inside a pod. This process is both the pod
    (its runtime's connection was identified when it connected) and, for new
    connections made inside this block, a host controller."""
    agent.set_cgroup(os.getpid(), "0::/user.slice\n")
    try:
        yield
    finally:
        agent.put_in_pod(os.getpid(), UID)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reports", type=int, default=3000)
    ap.add_argument("--switches", type=int, default=20000)
    ap.add_argument("--suspend-mib", type=int, default=256)
    args = ap.parse_args()

    rows: list[tuple[str, str]] = []
    # Park files on a tmpfs, as in the chart, when this machine has one.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with (
        tempfile.TemporaryDirectory(prefix="rlix-bench-") as tmp,
        tempfile.TemporaryDirectory(prefix="rlix-bench-park-", dir=shm) as park,
    ):
        agent = AgentProcess(Path(tmp), pods={UID: "bench/trainer-0"}, park_dir=Path(park))
        with agent:
            agent.put_in_pod(os.getpid(), UID)  # this process is the "pod"
            lat = phase_report_latency(agent, args.reports)
            rows.append(("phase report round trip, p50", f"{pct(lat, 0.50):.0f} µs"))
            rows.append(("phase report round trip, p99", f"{pct(lat, 0.99):.0f} µs"))
            rows.append(("phase report round trip, mean", f"{statistics.fmean(lat):.0f} µs"))

            baseline = switch_cost(None, args.switches)
            noop = switch_cost(Runtime(None), args.switches)
            connected_rt = Runtime(str(agent.socket))
            assert connected_rt.link is not None
            if not connected_rt.link.connected.wait(10):
                raise TimeoutError("runtime did not connect")
            connected = switch_cost(connected_rt, args.switches)
            connected_rt.link.close()
            gated = gated_switch_cost(Path(tmp), park, args.switches)
            rows.append(("phase switch, bare nullcontext (baseline)", f"{baseline:.2f} µs"))
            rows.append(("phase switch, rlix no-op mode (no agent)", f"{noop:.2f} µs"))
            rows.append(("phase switch, rlix connected to the agent", f"{connected:.2f} µs"))
            rows.append(
                (
                    "phase switch, agent with --phase-gate, GPU not shared",
                    f"{gated:.2f} µs ({gated / connected:.1f}x connected)",
                )
            )

            # Side by side, same tensors size, one run: parking in the process's
            # own pool (target self) against relocation to memory the agent owns.
            base: dict[str, float] | None = None
            for target in ("self", "host", "gpu:1"):
                runs = [suspend_resume(agent, args.suspend_mib, target) for _ in range(3)]
                if runs[0] is None:
                    rows.append(("suspend/resume", "skipped: torch not installed"))
                    break
                # The median of three: one run on 2 shared cores is mostly noise.
                sr = {k: statistics.median(r[k] for r in runs if r) for k in runs[0]}
                base = base or sr
                for step, verb in (("suspend_s", "suspend"), ("resume_s", "resume (verified)")):
                    ratio = "" if sr is base else f", {sr[step] / base[step]:.2f}x the self time"
                    rows.append(
                        (
                            f"{verb} via agent, target {target}, {args.suspend_mib} MiB CPU",
                            f"{sr[step] * 1e3:.0f} ms ({sr['gb'] / sr[step]:.2f} GB/s{ratio})",
                        )
                    )

    width = max(len(r[0]) for r in rows)
    lines = [
        "# Node agent latency",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {args.reports} reports, "
        f"{args.switches} switches. Generated by `bench/agent_latency.py`.",
        "",
        f"| {'measure'.ljust(width)} | result |",
        f"| {'-' * width} | ------ |",
        *[f"| {name.ljust(width)} | {value} |" for name, value in rows],
        "",
        "Phase switches in the trainer are fire-and-forget (one `sendall`); the",
        "report round trip is what a synchronous caller would wait for. With the",
        "agent's phase gate on, entering a phase waits for the gate's answer (a round",
        "trip, here with no neighbour to wait for) and leaving the outermost block",
        "reports idle; the process alternates rollout and training. CPU suspend",
        "numbers are memcpy plus fingerprinting on this machine, not a GPU link;",
        "each is the median of three suspend/resume cycles.",
        "Relocation (target host / gpu:<i>) on CPU copies twice each way (tensor ->",
        "memfd -> park file), where a GPU export copies once (device -> park file",
        "through CUDA IPC); on simulated GPUs the gpu:<i> copy is accounting only.",
    ]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
