"""The public surface of rlix.core.policy.placement is exactly what __all__ says."""

from __future__ import annotations

from rlix.core.policy import placement

EXPECTED = {
    "FilterOutcome", "Fit", "GPULoad", "NodeLoad", "NodeScore", "PlacementView",
    "SnapshotDocumentError", "best_nodes", "choose_victims", "choose_victims_on",
    "filter_nodes", "fit", "likely_phase", "next_phase", "node_load", "owed_mib",
    "pod_demand_mib", "score_load", "score_nodes", "score_values", "snapshot_from_doc",
    "snapshot_to_doc", "victim_units",
}  # fmt: skip


def test_all_is_pinned_and_importable() -> None:
    assert set(placement.__all__) == EXPECTED
    for name in placement.__all__:
        assert getattr(placement, name) is not None
