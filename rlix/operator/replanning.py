"""Gangs the scheduler will not place are planned again, not left waiting.

Admission plans from RLix's own picture of the cluster; the scheduler decides
from its own (nvidia.com/gpu counts, DRA claims, taints, pod slots). When they
disagree the pods of an admitted gang sit ``Unschedulable`` and hold the GPUs
admission promised them. Only an ``Admitted`` gang (not yet running) is
re-planned: a running job's work is not thrown away for a late pod. The
reconciler deletes the gang's pods and claims, then puts the job back in the
queue with ``Admitted=False`` reason ``Replanning``, which also tells the
admitter to drop the job's ledger entry (its placements were the ones that
failed) and decide again from a fresh snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

REASON_REPLANNING = "Replanning"
# How long a pod of an admitted gang may stay Unschedulable before the gang is
# re-planned: long enough for the scheduler's own retries after a binding race.
DEFAULT_REPLAN_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class Stuck:
    pod: str
    seconds: float
    message: str  # the scheduler's own words


def _since(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def unschedulable(pods: Mapping[str, Mapping[str, Any]], now: datetime) -> list[Stuck]:
    """Unbound pods the scheduler marked Unschedulable, with how long they have been."""
    out = []
    for name, body in sorted(pods.items()):
        if (body.get("spec") or {}).get("nodeName"):
            continue
        for condition in (body.get("status") or {}).get("conditions") or []:
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            if condition.get("reason") != "Unschedulable":
                continue
            since = _since(condition.get("lastTransitionTime"))
            if since is not None:
                seconds = (now - since).total_seconds()
                out.append(Stuck(name, seconds, str(condition.get("message", ""))))
    return out


def stuck_pods(pods: Mapping[str, Mapping[str, Any]], now: datetime, after_s: float) -> list[Stuck]:
    """Pods unschedulable for at least ``after_s`` (by their PodScheduled condition)."""
    return [s for s in unschedulable(pods, now) if s.seconds >= after_s]


def replan_message(stuck: list[Stuck]) -> str:
    first = stuck[0]
    more = f" (and {len(stuck) - 1} more)" if len(stuck) > 1 else ""
    return (
        f"pod {first.pod}{more} stayed unschedulable for {first.seconds:.0f}s "
        f"(scheduler: {first.message or 'no message'}); the gang is planned again"
    )
