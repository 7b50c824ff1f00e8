"""Fixtures for the simulator tests (no tests here; named to match test_sim_*)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rlix.core.sim import hardware as hw
from rlix.core.sim.mixes import Mix
from rlix.core.sim.workload import JobSpec
from rlix.core.snapshot import ClusterSnapshot, Workload


def spec(name: str, index: int, arrival: float = 0.0, **kw: object) -> JobSpec:
    """A 7B, 8-GPU job; near-zero length spread makes durations deterministic."""
    base: dict[str, object] = {
        "model": "7b",
        "gpus": 8,
        "iterations": 20,
        "response_sigma": 1e-6,
    }
    base.update(kw)
    return JobSpec(name=name, arrival_s=arrival, index=index, **base)  # type: ignore[arg-type]


def mix_of(*jobs: JobSpec, nodes: int = 1) -> Mix:
    return Mix("test", "test", nodes, 8, tuple(jobs), 1.0)


def load_s(job: JobSpec) -> float:
    """First-start cost the engine charges: fixed start + reading bf16 weights."""
    from rlix.core.sim.workload import MODELS

    weights = MODELS[job.model].params * 2 / job.gpus
    return hw.RESTART_FIXED_S + weights / hw.CHECKPOINT_READ_BYTES_PER_S


@dataclass(frozen=True)
class MemoryShare:
    """A test-only sharing policy: a GPU takes a pod while peak memories fit."""

    name: str = "memory-share"
    shares_gpus: bool = True
    sharing_rules: None = None  # memory alone decides

    def _room(self, snapshot: ClusterSnapshot, node: str, pod: Workload) -> list[int]:
        n = snapshot.nodes[node]
        used = [0] * n.gpu_count
        for w in snapshot.on_node(node):
            for i in w.gpu_indices:
                used[i] += w.peak_memory_mib
        return [i for i in range(n.gpu_count) if used[i] + pod.peak_memory_mib <= n.gpu_memory_mib]

    def filter(self, snapshot: ClusterSnapshot, pod: Workload) -> Mapping[str, str | None]:
        return {
            n: None if len(self._room(snapshot, n, pod)) >= pod.gpus else "no room"
            for n in snapshot.nodes
        }

    def score(
        self, snapshot: ClusterSnapshot, pod: Workload, nodes: Sequence[str]
    ) -> Mapping[str, int]:
        return dict.fromkeys(nodes, 0)

    def gpus(self, snapshot: ClusterSnapshot, pod: Workload, node: str) -> tuple[int, ...]:
        return tuple(self._room(snapshot, node, pod)[: pod.gpus])

    def victims(
        self, snapshot: ClusterSnapshot, pod: Workload, node: str
    ) -> tuple[Workload, ...] | None:
        return None
