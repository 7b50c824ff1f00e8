"""Offline replay of a captured snapshot: same verdicts, clear errors."""

from __future__ import annotations

import pytest

from rlix.core.policy.placement import SnapshotDocumentError, snapshot_to_doc
from rlix.core.policy.placement.documents import workload_to_doc
from rlix.extender.objects import ObjectError
from rlix.extender.replay import replay
from tests.builders.objects import pod_object
from tests.builders.placement import cluster, node, pod

GiB = 1024
SNAP = (
    cluster()
    .with_nodes(node("busy").gpus(1), node("free").gpus(1), node("off").gpus(1).cordoned())
    .with_pods(pod("r").memory(70 * GiB).phase("training").on("busy", 0))
    .build()
)


def test_replay_ranks_and_explains() -> None:
    report = replay(snapshot_to_doc(SNAP), pod_object(pod("p").memory(20 * GiB).build()))
    assert report["pod"] == "default/p"
    assert [r["node"] for r in report["ranking"]] == ["free"]
    assert set(report["ranking"][0]) >= {"score", "complement", "interleave", "locality"}
    assert "only 0 of 1 GPUs" in report["failed"]["busy"]
    assert report["unresolvable"] == {"off": "node is cordoned"}


def test_replay_accepts_a_workload_document_and_a_node_subset() -> None:
    doc = workload_to_doc(pod("p").memory(20 * GiB).build())
    report = replay(snapshot_to_doc(SNAP), doc, ["busy"])
    assert report["ranking"] == [] and list(report["failed"]) == ["busy"]


def test_replay_errors_are_clear() -> None:
    with pytest.raises(SnapshotDocumentError, match="version"):
        replay({"nodes": [], "workloads": []}, pod_object(pod("p").build()))
    bad = pod_object(pod("p").build())
    bad["metadata"]["annotations"]["rlix.io/gpu-memory-mib"] = "{"
    with pytest.raises(ObjectError, match="gpu-memory-mib"):
        replay(snapshot_to_doc(SNAP), bad)
