"""The port through which the simulator asks a placement policy for decisions.

The simulator never decides where a pod goes: it asks a ``PlacementPolicy`` the
same three questions kube-scheduler asks the RLix extender (filter, prioritize,
preempt) plus the one a device plugin answers (which GPU indices). RLix's
adapter (``rlix_policy``) forwards to ``rlix.core.policy.placement``, the code the
extender ships; the baselines (``baselines``) answer as kube-scheduler and a
Volcano/Kueue-style gang scheduler would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from rlix.core.policy.placement.sharing import SharingRules
from rlix.core.snapshot import ClusterSnapshot, Workload


class PlacementPolicy(Protocol):
    """Pure decisions over a snapshot; implementations keep no state between calls."""

    @property
    def name(self) -> str: ...

    @property
    def shares_gpus(self) -> bool:
        """Whether pods of different jobs may share one GPU (memory permitting).

        The simulator's cheap candidate pre-filter needs to know which index to use.
        """
        ...

    def filter(self, snapshot: ClusterSnapshot, pod: Workload) -> Mapping[str, str | None]:
        """Per node of the snapshot: None when ``pod`` fits, else the reason it does not."""
        ...

    def score(
        self, snapshot: ClusterSnapshot, pod: Workload, nodes: Sequence[str]
    ) -> Mapping[str, int]:
        """Per feasible node, a 0..10 preference (kube-scheduler's HostPriority)."""
        ...

    @property
    def sharing_rules(self) -> SharingRules | None:
        """Which running pods a pod may join on one GPU (``sharing.joinable``);
        None: memory alone decides. The conductor brings a parked pod back only
        where its GPUs' residents would have let it in."""
        ...

    def gpus(self, snapshot: ClusterSnapshot, pod: Workload, node: str) -> tuple[int, ...]:
        """The GPU indices ``pod`` gets on ``node`` (what the device plugin allocates)."""
        ...

    def victims(
        self, snapshot: ClusterSnapshot, pod: Workload, node: str
    ) -> tuple[Workload, ...] | None:
        """Workloads on ``node`` to preempt so ``pod`` fits there; None when none may."""
        ...
