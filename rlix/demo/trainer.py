"""A simulated RL role process: real client library, simulated device work.

It stands in for a role pod's container in the demo. It runs the phases of an
RL iteration for real wall-clock time, reports them through ``rlix.phase`` to
its node's agent, tells the simulated GPU backend what it holds in each phase,
and registers an offload hook over a buffer that stands in for its device
memory, so a suspend really parks the bytes and a resume checks them.

The trainer role finishes after ``--iterations``, waiting in its rollout and
weight-sync phases while its job's whole rollout is parked; other roles
(rollout servers, reference, reward) serve until their pod is deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import rlix
from rlix.core.digests import host_digest

# SM utilisation a phase of this shape shows on a GPU (rollout decoding is
# memory-bound; training and scoring keep the SMs busy; weight sync is copies).
UTILIZATION = {"rollout": 0.35, "scoring": 0.7, "training": 0.92, "weight-sync": 0.1, "idle": 0.0}
ORDER = ("rollout", "scoring", "training", "weight-sync")


class DeviceBuffer:
    """Bytes standing in for the role's device memory, parked on suspend."""

    def __init__(self, size: int, seed: int) -> None:
        self.device: bytearray | None = bytearray(random.Random(seed).randbytes(size))
        self.parked: bytes | None = None

    def offload(self) -> dict[str, tuple[int, str]]:
        assert self.device is not None, "suspended twice"
        self.parked = bytes(self.device)
        self.device = None  # the "device" memory is free now
        return {"weights": (len(self.parked), host_digest(self.parked))}

    def restore(self) -> dict[str, str]:
        assert self.parked is not None, "resumed without a suspend"
        self.device, self.parked = bytearray(self.parked), None
        return {"weights": host_digest(self.device)}


def _report(gpus: Sequence[int], memory: dict[str, int], phase: str) -> None:
    mib = memory.get(phase, max(memory.values(), default=0))
    for gpu in gpus:
        rlix.report_usage(gpu=gpu, memory_mib=mib, utilization=UTILIZATION[phase])


# A trainer's phases that need its rollout servers: generation is served by
# them, and weight sync writes into their memory, so a parked rollout must be
# back first (a job could otherwise end on its last weight sync with its
# rollout still parked, never to be resumed).
NEEDS_ROLLOUT = frozenset({"rollout", "weight-sync"})


def _work(seconds: float, *, needs_rollout: bool = False) -> None:
    """Spend ``seconds`` in the current phase, letting a pending suspend happen.

    ``needs_rollout``: a trainer's phase that stalls whenever its whole rollout
    is parked, not only at the phase's start (the roster reaches the trainer a
    moment after a park: a trainer that looked once went on generating with
    nobody serving it).
    """
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.2, left))
        rlix.safe_point()
        if needs_rollout:
            stalled = time.monotonic()
            _await_rollout()
            deadline += time.monotonic() - stalled


def _await_rollout() -> None:
    """Wait at safe points while the job's whole rollout is parked.

    A real trainer's generation blocks on requests its rollout servers serve;
    with all of them parked for a higher-priority job nobody serves them, so
    it waits until the conductor brings one back (``rlix.active_replicas``).
    """
    while (roster := rlix.active_replicas()) is not None and roster.suspended and not roster.active:
        time.sleep(0.2)
        rlix.safe_point()


def run(args: argparse.Namespace) -> int:
    ready = os.environ.get("RLIX_DEMO_READY")
    while ready and not Path(ready).exists():  # the orchestrator maps our pid to the pod
        time.sleep(0.05)
    rng = random.Random(args.seed)
    memory: dict[str, int] = json.loads(args.memory)
    seconds: dict[str, float] = json.loads(args.phase_seconds)
    gpus = [int(g) for g in args.gpu_indices.split(",") if g]
    buffer = DeviceBuffer(args.buffer_mib << 20, args.seed)
    rlix.register_offload("weights", buffer.offload, buffer.restore)
    iteration = 0
    while args.kind != "trainer" or iteration < args.iterations:
        for phase in ORDER:
            with rlix.phase(phase):
                _report(gpus, memory, phase)
                duration = seconds.get(phase, 0.5)
                needs_rollout = phase in NEEDS_ROLLOUT and args.kind == "trainer"
                if needs_rollout:
                    _await_rollout()
                if phase == "rollout":
                    # Long tail: the slowest sequence of the batch sets the length.
                    duration *= rng.lognormvariate(0.0, 0.35)
                _work(duration, needs_rollout=needs_rollout)
        iteration += 1
        print(f"iteration {iteration} done", flush=True)
    with rlix.phase("idle"):
        _report(gpus, memory, "idle")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rlix.demo.trainer", description=__doc__)
    p.add_argument("--kind", default="trainer", help="the role's kind (trainer finishes)")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--phase-seconds", default='{"rollout": 2, "training": 1}')
    p.add_argument("--memory", default="{}", help="JSON {phase: MiB per GPU}")
    p.add_argument("--gpu-indices", default="", help="GPUs of the node this pod holds")
    p.add_argument("--buffer-mib", type=int, default=8, help="bytes parked on suspend")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
