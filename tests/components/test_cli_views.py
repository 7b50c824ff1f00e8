"""What `rlix top` and `rlix describe` compute, from API-shaped dicts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlix.cli import describe
from rlix.core import names
from rlix.views import rows as views

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def ts(ago_s: int) -> str:
    return (NOW - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    job: str,
    *,
    node: str | None = "n0",
    gpus: int = 2,
    phase: str = "rollout",
    suspended: bool = False,
    memory: Any = None,
) -> dict[str, Any]:
    ann = {names.ANNOTATION_PHASE: phase}
    if suspended:
        ann[names.ANNOTATION_SUSPENDED] = "true"
    if memory is not None:
        ann[names.ANNOTATION_GPU_MEMORY_MIB] = json.dumps(memory)
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {names.LABEL_JOB: job},
            "annotations": ann,
        },
        "spec": {
            "nodeName": node,
            "containers": [{"resources": {"limits": {names.GPU_RESOURCE: str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def node(name: str, gpus: int, util: list[float] | None) -> dict[str, Any]:
    ann = {}
    if util is not None:
        ann[names.ANNOTATION_NODE_GPUS] = json.dumps(
            [
                {"index": i, "memoryMiB": 81920, "usedMiB": 1024 * i, "utilization": u}
                for i, u in enumerate(util)
            ]
        )
    return {
        "metadata": {
            "name": name,
            "annotations": ann,
            "labels": {names.NODE_LABEL_GPU_MEMORY_MIB: "81920"},
        },
        "status": {"allocatable": {names.GPU_RESOURCE: str(gpus)}},
    }


def rljob(name: str, state: str, created_ago: int = 90) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "creationTimestamp": ts(created_ago),
            "uid": "u",
        },
        "spec": {
            "priority": 5,
            "roles": [
                {
                    "name": "policy",
                    "kind": "trainer",
                    "replicas": 1,
                    "gpusPerReplica": 2,
                    "gpuMemoryMiB": {"training": 60000},
                },
                {"name": "rollout", "kind": "rollout", "replicas": 2, "gpusPerReplica": 2},
            ],
        },
        "status": {
            "state": state,
            "phase": "training",
            "iterations": 7,
            "gpus": 6,
            "roles": [
                {"name": "policy", "phase": "training", "bound": 1, "ready": 1},
                {"name": "rollout", "phase": "rollout", "bound": 2, "ready": 2},
            ],
            "phaseSeconds": {"training": 30.0, "rollout": 90.0},
            "conditions": [
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "AllRolesFit",
                    "message": "6 GPUs on 2 nodes",
                    "lastTransitionTime": ts(60),
                }
            ],
        },
    }


@pytest.mark.parametrize(("ago", "want"), [(5, "5s"), (125, "2m"), (7300, "2h"), (200000, "2d")])
def test_age_reads_like_kubectl(ago: int, want: str) -> None:
    assert views.age(ts(ago), NOW) == want


def test_job_rows_join_pods_and_count_parked_memory() -> None:
    pods = [
        pod("a-rollout-0", "a", suspended=True, memory={"rollout": 30000, "training": 10}),
        pod("a-rollout-1", "a", suspended=False),
        pod("b-policy-0", "b", gpus=4, suspended=True, memory=20000, phase="training"),
    ]
    rows = views.job_rows([rljob("b", "Queued"), rljob("a", "Running")], pods, NOW)
    assert [r.name for r in rows] == ["a", "b"]
    a = rows[0]
    assert (a.state, a.phase, a.iterations, a.suspended) == ("Running", "training", 7, 1)
    assert a.roles == "policy:training, rollout:rollout"
    assert a.parked_mib == 30000 * 2  # rollout-phase declaration x 2 GPUs
    assert rows[1].parked_mib == 20000 * 4
    assert a.age == "1m"


def test_garbage_annotations_do_not_break_top() -> None:
    bad = pod("x", "a", suspended=True)
    bad["metadata"]["annotations"][names.ANNOTATION_GPU_MEMORY_MIB] = "{not json"
    assert views.parked_mib(bad) == 0
    broken_node = node("n", 8, None)
    broken_node["metadata"]["annotations"][names.ANNOTATION_NODE_GPUS] = "[1, 2"
    (row,) = views.node_rows([broken_node], [])
    assert row.utilization is None and row.idle_gpus is None


def test_summary_idle_share_counts_only_measured_gpus() -> None:
    nodes = [
        node("n0", 4, [0.9, 0.0, 0.01, 0.5]),
        node("n1", 4, None),
        {"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "8"}}},
    ]
    rows = views.node_rows(nodes, [pod("p", "a", node="n0", gpus=3)])
    assert [r.name for r in rows] == ["n0", "n1"]  # the CPU node is not a GPU node
    assert rows[0].allocated == 3 and rows[0].idle_gpus == 2
    s = views.summary([], rows)
    assert s.gpus == 8 and s.allocated == 3
    assert s.idle_pct == pytest.approx(50.0)  # 2 of the 4 GPUs that report


def test_describe_prints_roles_conditions_pods() -> None:
    text = describe.format_rljob(
        rljob("a", "Running"), [pod("a-rollout-0", "a", suspended=True)], []
    )
    assert "State:              Running" in text
    assert "AllRolesFit" in text and "6 GPUs on 2 nodes" in text
    assert "training=60000" in text
    assert "rollout 90s (75%)" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("a-rollout-0"))
    assert line.split()[-1] == "yes"
