"""What `rlix top` and `rlix describe` compute, from API-shaped dicts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlix.cli import describe
from rlix.core import names
from rlix.core.suspension import (
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    CONDITION_SUSPENDED,
    DesiredSuspension,
    ObservedSuspension,
    Outcome,
    State,
)
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


def test_job_rows_say_which_roles_wait_their_turn_at_the_gate() -> None:
    job = rljob("a", "Running")
    job["status"]["roles"][0]["waiting"] = 1  # the operator's count (status.roles[].waiting)
    job["status"]["roles"][1]["waiting"] = "2"  # not a count: a view never fails on it
    (row,) = views.job_rows([job], [], NOW)
    assert row.roles == "policy:training (1 waiting), rollout:rollout"
    assert row.waiting == 1


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


def test_describe_says_which_pod_waits_its_turn_at_the_phase_gate() -> None:
    waits, garbled = pod("a-policy-0", "a", phase="idle"), pod("a-rollout-0", "a", phase="idle")
    waits["metadata"]["annotations"][names.ANNOTATION_WAITING_FOR_TURN] = "training"
    garbled["metadata"]["annotations"][names.ANNOTATION_WAITING_FOR_TURN] = "{not a phase"
    job = rljob("a", "Running")
    job["status"]["roles"][0]["waiting"] = 1  # the operator's count of the policy role
    text = describe.format_rljob(job, [waits, garbled], [])
    lines = {x.split()[0]: x for x in text.splitlines() if x.strip()}
    roles_header = next(x for x in text.splitlines() if x.split()[:2] == ["NAME", "KIND"])
    assert roles_header.split()[-2:] == ["WAITING", "TURN"]
    assert lines["policy"].split()[-1] == "1" and lines["rollout"].split()[-1] == "0"
    assert "idle (waits its turn for training)" in lines["a-policy-0"]
    assert "waits" not in lines["a-rollout-0"]  # not a phase: as if absent
    data = describe.describe_data(rljob("a", "Running"), [waits, garbled], [])
    assert [p["waitingForTurn"] for p in data["pods"]] == ["training", None]


def lent(body: dict[str, Any], *, generation: int, done: bool, back: bool = False) -> None:
    """Give a pod the conductor protocol's annotations: asked to park (or back)."""
    want = State.RUNNING if back else State.SUSPENDED
    reason = "MemoryFree" if back else "Lend"
    desired = DesiredSuspension(generation, want, reason, "ns/high", since=ts(120))
    notes = body["metadata"]["annotations"]
    notes[ANNOTATION_DESIRED] = desired.to_json()
    if done or back:
        seen = ObservedSuspension(1, State.SUSPENDED, Outcome.SUSPENDED, 3 << 30, at=ts(110))
        notes[ANNOTATION_OBSERVED] = seen.to_json()


def test_suspension_rows_say_who_is_parked_why_for_whom_and_since_when() -> None:
    pods = [pod(f"a-rollout-{i}", "a") for i in range(4)]
    lent(pods[1], generation=1, done=True)
    lent(pods[2], generation=1, done=True)
    lent(pods[3], generation=1, done=False)  # asked, the agent has not answered
    other = pod("b-rollout-0", "b")
    lent(other, generation=2, done=True, back=True)  # asked back, not yet back
    rows = views.suspension_rows([*pods, other], NOW)
    got = [(r.job, r.pods, r.state, r.reason, r.requester, r.age, r.parked_bytes) for r in rows]
    assert got == [
        ("a", ("a-rollout-1", "a-rollout-2"), "parked", "Lend", "ns/high", "2m", 6 << 30),
        ("a", ("a-rollout-3",), "parking", "Lend", "ns/high", "2m", 0),
        ("b", ("b-rollout-0",), "resuming", "MemoryFree", "ns/high", "2m", 3 << 30),
    ]
    assert rows[0].since == ts(120)
    garbage = pod("c-rollout-0", "c")
    garbage["metadata"]["annotations"][ANNOTATION_DESIRED] = "{not json"
    assert views.suspension_rows([pods[0], garbage], NOW) == [], "nothing asked: nothing shown"


def test_job_rows_carry_the_suspended_conditions_reason() -> None:
    job = rljob("a", "Running")
    condition = {
        "type": CONDITION_SUSPENDED, "status": "True", "reason": "Lend",
        "message": "suspended in place for ns/high", "lastTransitionTime": ts(60),
    }  # fmt: skip
    job["status"]["conditions"].append(condition)
    refused = rljob("b", "Running")
    refused["status"]["conditions"].append({**condition, "status": "False", "reason": "AgentDown"})
    calm = rljob("c", "Running")
    calm["status"]["conditions"].append({**condition, "status": "False", "reason": "Running"})
    rows = views.job_rows([job, refused, calm, rljob("d", "Running")], [], NOW)
    assert [r.suspension for r in rows] == ["Lend", "refused: AgentDown", "-", "-"]
