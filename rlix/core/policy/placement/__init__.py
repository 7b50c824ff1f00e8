"""Placement policy: filter (fit), prioritize (scoring) and preempt (victims).

Pure functions over a ``ClusterSnapshot`` (through a memoising
``PlacementView``); the extender, the operator and the simulator all call these,
so what is benchmarked and tested is what ships.
"""

from rlix.core.policy.placement.documents import (
    SnapshotDocumentError,
    snapshot_from_doc,
    snapshot_to_doc,
)
from rlix.core.policy.placement.fit import FilterOutcome, Fit, filter_nodes, fit, pod_demand_mib
from rlix.core.policy.placement.loads import GPULoad, NodeLoad, next_phase, node_load, owed_mib
from rlix.core.policy.placement.preemption import choose_victims, choose_victims_on, victim_units
from rlix.core.policy.placement.scoring import (
    NodeScore,
    best_nodes,
    likely_phase,
    score_load,
    score_nodes,
    score_values,
)
from rlix.core.policy.placement.view import PlacementView

__all__ = [
    "FilterOutcome",
    "Fit",
    "GPULoad",
    "NodeLoad",
    "NodeScore",
    "PlacementView",
    "SnapshotDocumentError",
    "best_nodes",
    "choose_victims",
    "choose_victims_on",
    "filter_nodes",
    "fit",
    "likely_phase",
    "next_phase",
    "node_load",
    "owed_mib",
    "pod_demand_mib",
    "score_load",
    "score_nodes",
    "score_values",
    "snapshot_from_doc",
    "snapshot_to_doc",
    "victim_units",
]
