"""A memoising, read-only view over one ClusterSnapshot.

Scheduler extenders must answer in milliseconds for thousands of nodes, while a
snapshot changes only when a watch event arrives. So the per-node GPU debts and
the per-job peer counts are computed on first use and kept for the life of the
snapshot; the view itself never changes what it was built from (a new snapshot
gets a new view), which keeps the policy a pure function of its input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from rlix.core.policy.placement.loads import NodeLoad, node_load
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.snapshot import ClusterSnapshot, Node, Workload


class PlacementView:
    """Cached derived facts about ``snapshot``: node loads, job members, peers."""

    __slots__ = ("_by_job", "_by_name", "_complete", "_loads", "_peers", "rules", "snapshot")

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        *,
        loads: Mapping[str, NodeLoad] | None = None,
        by_job: Mapping[str, tuple[Workload, ...]] | None = None,
        rules: SharingRules = DEFAULT_RULES,
    ) -> None:
        """``loads`` and ``by_job`` let a caller that maintains them incrementally
        (the extender's cache) hand them in; they must describe ``snapshot``.
        ``rules`` say who may share a GPU with whom (``sharing``)."""
        self.snapshot = snapshot
        self.rules = rules
        self._complete = loads is not None
        self._loads: dict[str, NodeLoad] = dict(loads) if loads is not None else {}
        self._peers: dict[str, tuple[Counter[str], Counter[str]]] = {}
        self._by_job: dict[str, tuple[Workload, ...]] | None = (
            dict(by_job) if by_job is not None else None
        )
        self._by_name: dict[str, Workload] | None = None

    def node(self, name: str) -> Node | None:
        return self.snapshot.nodes.get(name)

    def load(self, name: str) -> NodeLoad | None:
        """The node's GPU debts, or None for a node the snapshot does not know."""
        cached = self._loads.get(name)
        if cached is not None or self._complete:
            return cached
        node = self.snapshot.nodes.get(name)
        if node is None:
            return None
        built = node_load(node, self.snapshot.on_node(name))
        self._loads[name] = built
        return built

    def load_getter(self) -> Callable[[str], NodeLoad | None]:
        """A fast ``load`` for hot loops: the dict's own ``get`` when the caller
        handed in every load (the extender), else ``load`` itself."""
        return self._loads.get if self._complete else self.load

    def workload(self, name: str) -> Workload | None:
        if self._by_name is None:
            self._by_name = {w.name: w for w in self.snapshot.workloads}
        return self._by_name.get(name)

    def job_members(self, job: str) -> tuple[Workload, ...]:
        """Every known pod of ``job`` (placed or not); () for pods without a job."""
        if not job:
            return ()
        if self._by_job is None:
            index: dict[str, list[Workload]] = {}
            for w in self.snapshot.workloads:
                if w.job:
                    index.setdefault(w.job, []).append(w)
            self._by_job = {k: tuple(v) for k, v in index.items()}
        return self._by_job.get(job, ())

    def peers(self, job: str, exclude: str = "") -> tuple[Mapping[str, int], Mapping[str, int]]:
        """Placed pods of ``job`` per node and per NVLink domain (``exclude`` left out)."""
        key = f"{job}\x00{exclude}"
        cached = self._peers.get(key)
        if cached is not None:
            return cached
        per_node: Counter[str] = Counter()
        per_domain: Counter[str] = Counter()
        for w in self.job_members(job):
            if w.node is None or w.name == exclude:
                continue
            per_node[w.node] += 1
            node = self.snapshot.nodes.get(w.node)
            if node is not None and node.nvlink_domain:
                per_domain[node.nvlink_domain] += 1
        self._peers[key] = (per_node, per_domain)
        return per_node, per_domain
