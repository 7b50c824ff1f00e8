"""Fluent builders for placement scenarios (tests and benchmarks; never shipped).

``node("n1").gpus(8, mib=81920).domain("rack-a").build()`` and
``pod("a-roll-0").job("a").role("rollout").gpus(1).memory(rollout=40000)
.phase("rollout").on("n1", 0).build()`` read like the scenario tables they
serve; defaults are the common case so a table row states only what matters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlix.core.phases import Phase
from rlix.core.snapshot import GPU, ClusterSnapshot, Node, PhaseLoad, Workload

H100_MIB = 81920


@dataclass(frozen=True)
class NodeBuilder:
    node: Node

    def gpus(self, count: int, mib: int = H100_MIB) -> NodeBuilder:
        return NodeBuilder(replace(self.node, gpu_count=count, gpu_memory_mib=mib))

    def domain(self, name: str) -> NodeBuilder:
        return NodeBuilder(replace(self.node, nvlink_domain=name))

    def product(self, name: str) -> NodeBuilder:
        return NodeBuilder(replace(self.node, product=name))

    def cordoned(self) -> NodeBuilder:
        return NodeBuilder(replace(self.node, schedulable=False))

    def headroom(self, overcommit: float) -> NodeBuilder:
        """GPUs RLix publishes as gpu.rlix.io claims at ``overcommit`` x physical
        memory: the part above physical takes parked memory only."""
        return NodeBuilder(replace(self.node, claims=True, memory_overcommit=overcommit))

    def used(self, *used_mib: int) -> NodeBuilder:
        """Live agent state: measured use per GPU (index order)."""
        gpus = tuple(
            GPU(index=i, memory_mib=self.node.gpu_memory_mib, used_mib=u)
            for i, u in enumerate(used_mib)
        )
        return NodeBuilder(replace(self.node, gpus=gpus))

    def build(self) -> Node:
        return self.node


def node(name: str) -> NodeBuilder:
    return NodeBuilder(Node(name=name, gpu_count=8, gpu_memory_mib=H100_MIB, product="H100"))


@dataclass(frozen=True)
class PodBuilder:
    w: Workload

    def job(self, job: str, gang: int = 1) -> PodBuilder:
        full = job if "/" in job else f"default/{job}"
        return PodBuilder(replace(self.w, job=full, gang_size=gang))

    def role(self, role: str) -> PodBuilder:
        return PodBuilder(replace(self.w, role=role))

    def gpus(self, count: int) -> PodBuilder:
        return PodBuilder(replace(self.w, gpus=count))

    def memory(self, all_phases: int | None = None, **per_phase: int) -> PodBuilder:
        """``memory(40000)`` for every phase, or ``memory(rollout=..., training=...)``."""
        table: dict[Phase, int] = {}
        if all_phases is not None:
            table = {p: all_phases for p in Phase if p is not Phase.IDLE}
        for key, mib in per_phase.items():
            table[Phase(key.replace("_", "-"))] = mib
        return PodBuilder(replace(self.w, memory_mib=table))

    def phase(self, phase: str | Phase | None) -> PodBuilder:
        value = Phase(phase) if isinstance(phase, str) else phase
        return PodBuilder(replace(self.w, phase=value))

    def priority(self, value: int) -> PodBuilder:
        return PodBuilder(replace(self.w, priority=value))

    def preemptible(self, value: bool = True) -> PodBuilder:
        return PodBuilder(replace(self.w, preemptible=value))

    def suspended(self) -> PodBuilder:
        return PodBuilder(replace(self.w, suspended=True))

    def loads_through_gate(self) -> PodBuilder:
        """Its processes allocate first inside ``rlix.loading()`` (the role's
        ``loadsThroughGate``): a parking gate may pair it by turns."""
        return PodBuilder(replace(self.w, loads_through_gate=True))

    def load(self, *segments: tuple[str, float, float]) -> PodBuilder:
        """``load(("rollout", 0.8, 0.6), ("training", 0.2, 1.0))``: (phase, share, pressure)."""
        profile = tuple(PhaseLoad(Phase(ph), share, p) for ph, share, p in segments)
        return PodBuilder(replace(self.w, load_profile=profile))

    def iteration(self, seconds: float) -> PodBuilder:
        """Alone seconds of one iteration of its job (the phase gate's estimate)."""
        return PodBuilder(replace(self.w, iteration_s=seconds))

    def work_left(self, gpu_s: float) -> PodBuilder:
        """Expected GPU-seconds its job has left (``policy.ordering``)."""
        return PodBuilder(replace(self.w, work_left=gpu_s))

    def on(self, node_name: str, *gpu_indices: int) -> PodBuilder:
        return PodBuilder(replace(self.w, node=node_name, gpu_indices=tuple(gpu_indices)))

    def build(self) -> Workload:
        return self.w


def pod(name: str) -> PodBuilder:
    full = name if "/" in name else f"default/{name}"
    return PodBuilder(Workload(name=full, job="", role="", gpus=1, preemptible=True))


@dataclass(frozen=True)
class ClusterBuilder:
    nodes: tuple[Node, ...] = ()
    workloads: tuple[Workload, ...] = field(default=())

    def with_nodes(self, *builders: NodeBuilder | Node) -> ClusterBuilder:
        built = tuple(b.build() if isinstance(b, NodeBuilder) else b for b in builders)
        return replace(self, nodes=(*self.nodes, *built))

    def with_pods(self, *builders: PodBuilder | Workload) -> ClusterBuilder:
        built = tuple(b.build() if isinstance(b, PodBuilder) else b for b in builders)
        return replace(self, workloads=(*self.workloads, *built))

    def build(self) -> ClusterSnapshot:
        return ClusterSnapshot.of(self.nodes, self.workloads)


def cluster() -> ClusterBuilder:
    return ClusterBuilder()
