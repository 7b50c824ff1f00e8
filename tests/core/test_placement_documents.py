"""Snapshot documents round-trip exactly and reject hand-edits clearly."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from rlix.core.policy.placement import SnapshotDocumentError, snapshot_from_doc, snapshot_to_doc
from rlix.core.policy.placement.documents import rules_from_doc, rules_to_doc
from rlix.core.policy.placement.sharing import ASSUMED_CELLS, DEFAULT_RULES, SharingRules
from tests.builders.placement import cluster, node, pod


def sample() -> Any:
    return (
        cluster()
        .with_nodes(node("a").domain("rack-1").used(100, 200), node("b").gpus(4).cordoned())
        .with_pods(
            pod("x").job("j", gang=2).role("rollout").gpus(2).memory(rollout=10, training=20)
            .phase("rollout").priority(3).on("a", 0, 1)
            .load(("rollout", 0.75, 0.6), ("training", 0.25, 1.0)).iteration(312.5)
            .loads_through_gate(),
            pod("y").suspended().preemptible(False),
        )
        .build()
    )  # fmt: skip


def test_round_trip_is_exact_through_json() -> None:
    snap = sample()
    doc = json.loads(json.dumps(snapshot_to_doc(snap)))
    again = snapshot_from_doc(doc)
    assert again.nodes == snap.nodes
    assert again.workloads == snap.workloads


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.pop("nodes"), "missing field 'nodes'"),
        (lambda d: d["nodes"][0].update(gpuCount="8"), "'gpuCount' has the wrong type"),
        (lambda d: d["nodes"][0].update(gpuCount=True), "'gpuCount' has the wrong type"),
        (lambda d: d["workloads"][0].update(phase="warmup"), "unknown phase 'warmup'"),
        (lambda d: d["workloads"][0]["memoryMiB"].update(rollout=-1), "memoryMiB['rollout']"),
        (lambda d: d["workloads"].append(7), "workload entry must be an object"),
        (lambda d: d["nodes"][0]["gpus"].append("gpu"), "gpus[2] must be an object"),
        (lambda d: d["workloads"][0]["loadProfile"][0].update(share=2.0), "share/pressure"),
        (lambda d: d["workloads"][0]["loadProfile"][0].update(share="x"), "must be numbers"),
        (lambda d: d["workloads"][0].update(iterationSeconds=-1.0), "iterationSeconds"),
        (lambda d: d["workloads"][0].update(iterationSeconds="5"), "iterationSeconds"),
        (lambda d: d["workloads"][0].update(loadsThroughGate="yes"), "'loadsThroughGate'"),
    ],
)
def test_bad_documents_name_the_field(edit: Any, words: str) -> None:
    doc = snapshot_to_doc(sample())
    edit(doc)
    with pytest.raises(SnapshotDocumentError, match=words.replace("[", r"\[").replace("(", r"\(")):
        snapshot_from_doc(doc)


def test_not_an_object() -> None:
    with pytest.raises(SnapshotDocumentError, match="JSON object"):
        snapshot_from_doc([])


@pytest.mark.parametrize(
    "rules",
    [
        DEFAULT_RULES,
        SharingRules(),
        SharingRules(interference=ASSUMED_CELLS, max_jobs_per_gpu=3, phase_gate=False),
        SharingRules(min_pair_progress=1.1, protected_priority=7, max_protected_stretch=1.5),
        SharingRules(parks_at_gate=True),
    ],
)
def test_sharing_rules_round_trip_exactly_through_json(rules: SharingRules) -> None:
    assert rules_from_doc(json.loads(json.dumps(rules_to_doc(rules)))) == rules


def test_sharing_rules_left_out_are_the_clusters_defaults() -> None:
    assert rules_from_doc({}) == DEFAULT_RULES
    assert rules_from_doc({"maxJobsPerGpu": 3}) == SharingRules(
        interference=None, max_jobs_per_gpu=3
    )


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ([], "sharingRules must be an object"),
        (
            {"interference": {"compute": {}}},
            "sharingRules.interference.compute: missing field 'compute'",
        ),
        ({"interference": {}}, "sharingRules.interference: missing field 'compute'"),
        (
            {"interference": {s: {t: -1 for t in ("compute", "memory", "network")}
                              for s in ("compute", "memory", "network")}},
            "sharingRules.interference.compute.compute = -1.0 < 0",
        ),
        ({"maxJobsPerGpu": "2"}, "field 'maxJobsPerGpu' has the wrong type"),
        ({"maxJobsPerGpu": 0}, "sharingRules: SharingRules.max_jobs_per_gpu = 0 < 1"),
        ({"phaseGate": 1}, "field 'phaseGate' has the wrong type"),
        ({"parksAtGate": "yes"}, "field 'parksAtGate' has the wrong type"),
    ],
)  # fmt: skip
def test_bad_sharing_rules_name_the_field(doc: Any, words: str) -> None:
    with pytest.raises(SnapshotDocumentError, match=re.escape(words)):
        rules_from_doc(doc)
