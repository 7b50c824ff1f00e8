"""RLix's placement policy behind the simulator's port: ``rlix.core.policy.placement``.

This module only translates; it decides nothing. Filter, score and victims come
from the same functions the extender calls, so the benchmark measures them.
The one translation with a choice in it is preemption: kube-scheduler proposes
victims by its own (count-based) accounting and RLix rewrites that proposal, so
we build the proposal the way kube-scheduler would -- lowest priority first until
enough GPUs would be free -- and hand it to ``choose_victims_on``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlix.core.policy.ordering import displaces
from rlix.core.policy.placement import (
    NodeLoad,
    PlacementView,
    choose_victims_on,
    filter_nodes,
    node_load,
    score_nodes,
)
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.snapshot import ClusterSnapshot, Workload

_Key = tuple[object, ...]


def _node_key(snapshot: ClusterSnapshot, name: str) -> _Key:
    """Everything ``node_load`` reads about one node (workloads are not hashable)."""
    return (
        snapshot.nodes[name],
        *(
            (
                w.name,
                w.job,
                w.gpus,
                w.phase,
                w.gpu_indices,
                w.suspended,
                w.priority,
                w.preemptible,
                w.gang_size,
                tuple(w.memory_mib.items()),
            )
            for w in snapshot.on_node(name)
        ),
    )


@dataclass
class RLixPolicy:
    """Adapter; one PlacementView per snapshot, node loads memoised across snapshots.

    The simulator asks about the same nodes many times at one instant (each
    waiting job, each what-if of a gang). ``node_load`` is a pure function of
    the node and its residents, so its result is reused while they are
    unchanged and handed to the view through its ``loads`` parameter, the hook
    the extender's incremental cache uses too.
    """

    name: str = "rlix"
    shares_gpus: bool = True
    rules: SharingRules = DEFAULT_RULES
    _last: tuple[int, PlacementView] | None = field(default=None, repr=False)
    _loads: dict[_Key, NodeLoad] = field(default_factory=dict, repr=False)

    def _view(self, snapshot: ClusterSnapshot) -> PlacementView:
        if self._last is not None and self._last[1].snapshot is snapshot:
            return self._last[1]
        if len(self._loads) > 100_000:
            self._loads.clear()
        loads = {}
        for name in snapshot.nodes:
            key = _node_key(snapshot, name)
            load = self._loads.get(key)
            if load is None:
                load = self._loads[key] = node_load(snapshot.nodes[name], snapshot.on_node(name))
            loads[name] = load
        view = PlacementView(snapshot, loads=loads, rules=self.rules)
        self._last = (id(snapshot), view)
        return view

    @property
    def sharing_rules(self) -> SharingRules:
        return self.rules

    def filter(self, snapshot: ClusterSnapshot, pod: Workload) -> Mapping[str, str | None]:
        outcome = filter_nodes(self._view(snapshot), pod, snapshot.nodes)
        out: dict[str, str | None] = dict.fromkeys(outcome.feasible)
        out.update(outcome.failed)
        out.update(outcome.unresolvable)
        return out

    def score(
        self, snapshot: ClusterSnapshot, pod: Workload, nodes: Sequence[str]
    ) -> Mapping[str, int]:
        scores = score_nodes(self._view(snapshot), pod, nodes)
        return {name: s.score for name, s in scores.items()}

    def gpus(self, snapshot: ClusterSnapshot, pod: Workload, node: str) -> tuple[int, ...]:
        scores = score_nodes(self._view(snapshot), pod, [node])
        return scores[node].gpus

    def victims(
        self, snapshot: ClusterSnapshot, pod: Workload, node: str
    ) -> tuple[Workload, ...] | None:
        # The stand-in for kube-scheduler's proposal (it would remove every
        # lower-priority pod, then reprieve what it can; parking in place may
        # also take a far larger job of the pod's own class, ordering.displaces,
        # lower classes still first by the sort below): preemptible pods
        # first, so a non-preemptible neighbour of lower priority does not
        # inflate the GPUs the victims must free and hide a valid parking.
        residents = sorted(
            (
                w
                for w in snapshot.on_node(node)
                if not w.suspended
                and displaces(pod.priority, pod.work_left, w.priority, w.work_left)
            ),
            key=lambda w: (not w.preemptible, w.priority, w.name),
        )
        n = snapshot.nodes[node]
        used = {i for w in snapshot.on_node(node) if not w.suspended for i in w.gpu_indices}
        free = n.gpu_count - len(used)
        proposal: list[str] = []
        for w in residents:
            if free >= pod.gpus:
                break
            proposal.append(w.name)
            free += w.gpus
        if not proposal:
            return None
        # The conductor and the simulator park victims in place.
        names = choose_victims_on(self._view(snapshot), pod, node, proposal, in_place=True)
        if names is None:
            return None
        by_name = {w.name: w for w in snapshot.on_node(node)}
        return tuple(by_name[x] for x in names if x in by_name)
