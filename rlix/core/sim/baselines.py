"""Baseline placement policies the simulator compares RLix against.

(a) ``kube-default``: what the default kube-scheduler gives GPU pods --
    exclusive whole GPUs (``nvidia.com/gpu`` is an integer resource), the
    NodeResourcesFit *LeastAllocated* score (spread), no gangs, no phases.
(b) ``gang-binpack``: a Volcano/Kueue-style batch scheduler -- exclusive whole
    GPUs, *MostAllocated* bin-packing, and priority preemption that evicts
    whole lower-priority jobs (they restart from their last checkpoint).

Both see a GPU as taken when any workload is bound to it; they ignore memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.snapshot import ClusterSnapshot, Workload


def taken_gpus(snapshot: ClusterSnapshot, node: str) -> set[int]:
    return {i for w in snapshot.on_node(node) if not w.suspended for i in w.gpu_indices}


# One job per GPU, whatever the memory says.
EXCLUSIVE_RULES: Final = SharingRules(interference=None, max_jobs_per_gpu=1)


@dataclass(frozen=True)
class ExclusivePolicy:
    """Whole-GPU allocation; ``pack`` picks MostAllocated over LeastAllocated."""

    name: str
    pack: bool
    preempts: bool
    shares_gpus: bool = False
    sharing_rules: SharingRules = EXCLUSIVE_RULES

    def filter(self, snapshot: ClusterSnapshot, pod: Workload) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        for name, node in snapshot.nodes.items():
            free = node.gpu_count - len(taken_gpus(snapshot, name))
            out[name] = (
                None
                if node.schedulable and free >= pod.gpus
                else f"Insufficient nvidia.com/gpu ({free} free, pod needs {pod.gpus})"
            )
        return out

    def score(
        self, snapshot: ClusterSnapshot, pod: Workload, nodes: Sequence[str]
    ) -> Mapping[str, int]:
        out = {}
        for name in nodes:
            node = snapshot.nodes[name]
            used_after = len(taken_gpus(snapshot, name)) + pod.gpus
            fraction = used_after / node.gpu_count if node.gpu_count else 1.0
            out[name] = round(10 * (fraction if self.pack else 1.0 - fraction))
        return out

    def gpus(self, snapshot: ClusterSnapshot, pod: Workload, node: str) -> tuple[int, ...]:
        taken = taken_gpus(snapshot, node)
        free = [i for i in range(snapshot.nodes[node].gpu_count) if i not in taken]
        return tuple(free[: pod.gpus])

    def victims(
        self, snapshot: ClusterSnapshot, pod: Workload, node: str
    ) -> tuple[Workload, ...] | None:
        """Fewest, lowest-priority preemptible pods whose removal frees enough GPUs.

        A victim pod takes its whole job with it (the simulator evicts gangs whole),
        which is what Volcano's gang plugin and Kueue's workload preemption do.
        """
        if not self.preempts:
            return None
        n = snapshot.nodes[node]
        free = n.gpu_count - len(taken_gpus(snapshot, node))
        eligible = sorted(
            (
                w
                for w in snapshot.on_node(node)
                if not w.suspended and w.preemptible and w.priority < pod.priority
            ),
            key=lambda w: (w.priority, -w.gpus, w.name),
        )
        chosen: list[Workload] = []
        for w in eligible:
            if free >= pod.gpus:
                break
            chosen.append(w)
            free += len(w.gpu_indices)
        return tuple(chosen) if chosen and free >= pod.gpus else None


KUBE_DEFAULT = ExclusivePolicy("kube-default", pack=False, preempts=False)
GANG_BINPACK = ExclusivePolicy("gang-binpack", pack=True, preempts=True)
