"""Which pods of an admitted gang count as stuck, and what the job is told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rlix.operator.replanning import Stuck, replan_message, stuck_pods, unschedulable

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def pod(*, seconds: float, reason: str = "Unschedulable", node: str = "") -> dict[str, Any]:
    since = (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "spec": {"nodeName": node} if node else {},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": reason,
                 "lastTransitionTime": since, "message": "cannot allocate all claims"}
            ]
        },
    }  # fmt: skip


def test_only_unbound_unschedulable_pods_past_the_limit_are_stuck() -> None:
    pods = {
        "a": pod(seconds=90),
        "b": pod(seconds=10),
        "c": pod(seconds=90, reason="SchedulerError"),  # the extender was down: not a verdict
        "d": pod(seconds=90, node="n1"),
        "e": {"status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                         "reason": "Unschedulable", "lastTransitionTime": "x"}]}},
    }  # fmt: skip
    assert [s.pod for s in unschedulable(pods, NOW)] == ["a", "b"]
    assert stuck_pods(pods, NOW, 60) == [Stuck("a", 90.0, "cannot allocate all claims")]


def test_the_message_names_the_pod_the_time_and_the_schedulers_words() -> None:
    message = replan_message([Stuck("a", 90.4, "0/1 nodes"), Stuck("b", 70, "")])
    assert message == (
        "pod a (and 1 more) stayed unschedulable for 90s (scheduler: 0/1 nodes); "
        "the gang is planned again"
    )
