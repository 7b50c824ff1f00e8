"""Which admitted pods are stuck off their plan, and when to look again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rlix.core import names
from rlix.operator.replanning import message, stuck_pods, unschedulable

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pod(
    name: str, *, since: datetime | None = T0, node: str = "", reason: str = "Unschedulable"
) -> dict[str, Any]:
    conditions = []
    if since is not None:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": "0/4 nodes are available: 1 node(s) were unschedulable",
                "lastTransitionTime": since.isoformat().replace("+00:00", "Z"),
            }
        )
    return {
        "metadata": {"name": name, "annotations": {names.ANNOTATION_ADMITTED_NODE: "n1"}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Pending", "conditions": conditions},
    }


def test_a_pod_unschedulable_past_the_grace_period_is_stuck() -> None:
    pods = {"a": pod("a"), "b": pod("b", since=T0 + timedelta(seconds=50))}
    due, wait = stuck_pods(pods, T0 + timedelta(seconds=60), 60)
    assert [s.pod for s in due] == ["a"] and due[0].node == "n1"
    assert wait == 50  # b is due 50 s later: the reconciler looks again then
    text = message(due, 60)
    assert "pod a" in text and "planned node n1" in text and "unschedulable" in text


def test_bound_deleting_or_merely_pending_pods_are_not_stuck() -> None:
    deleting = pod("d")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pods = {
        "bound": pod("bound", node="n1"),
        "d": deleting,
        "new": pod("new", since=None),
        "gated": pod("gated", reason="SchedulingGated"),
    }
    assert stuck_pods(pods, T0 + timedelta(hours=1), 60) == ([], None)
    assert unschedulable(pods["bound"]) is None


def test_grace_counts_from_the_latest_admission() -> None:
    """A job admitted again gets a fresh grace period even if an old pod is still cached."""
    later = T0 + timedelta(seconds=100)
    due, wait = stuck_pods({"a": pod("a")}, later + timedelta(seconds=10), 60, later)
    assert due == [] and wait == 50
