"""Which admitted pods cannot bind on their planned node, and for how long.

An admitted pod is pinned to its planned node (``pods.pin_to_node``), so a
plan that turns out unusable (the node cordoned, tainted, gone, or its room
taken by something admission does not see, such as a pod of another scheduler)
leaves the pod ``Unschedulable`` for good: the scheduler will never bind it
anywhere else. Rather than let the gang wait forever while holding its
promise, the reconciler releases it once a pod has been unschedulable for a
grace period: the job's pods are deleted, the job goes back to ``Queued`` with
``Admitted=False`` reason ``Replanning``, and the next admission pass drops its
ledger entry and decides it again from the cluster as it is now.

Why a grace period and not the first failure: a pod can be briefly
unschedulable on a healthy plan (the room is still held by a pod that is
terminating, or the extender is restarting), and re-planning a gang costs a
pod deletion and recreation.

Pure: it reads pod bodies and ``now``; the reconciler acts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rlix.core import names
from rlix.operator.statuses import parse_time

# The Admitted=False reason a released job carries until the next admission
# pass drops its ledger entry and decides it again.
REASON_REPLANNING = "Replanning"
DEFAULT_AFTER_S = 60.0


@dataclass(frozen=True, slots=True)
class Stuck:
    """A pod that the scheduler has found unschedulable since ``since``."""

    pod: str
    node: str  # its admitted node ("" if it has none)
    since: datetime
    message: str  # the scheduler's own words


def unschedulable(body: Mapping[str, Any]) -> Stuck | None:
    """The pod's ``PodScheduled=False, Unschedulable`` condition, if it is unbound."""
    if (body.get("spec") or {}).get("nodeName") or (body.get("metadata") or {}).get(
        "deletionTimestamp"
    ):
        return None
    for cond in (body.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            since = parse_time(cond.get("lastTransitionTime"))
            if since is None:
                return None
            meta = body.get("metadata") or {}
            node = (meta.get("annotations") or {}).get(names.ANNOTATION_ADMITTED_NODE, "")
            return Stuck(str(meta.get("name", "")), str(node), since, str(cond.get("message", "")))
    return None


def stuck_pods(
    pods: Mapping[str, Mapping[str, Any]],
    now: datetime,
    after_s: float,
    admitted_at: datetime | None = None,
) -> tuple[list[Stuck], float | None]:
    """Pods unschedulable for ``after_s`` or longer, and seconds until the next one is.

    Time counts from the later of the condition and the job's admission, so a
    job admitted again starts a fresh grace period even if a pod of its previous
    plan is still in the cache. The second value tells the reconciler when to
    look again: a pod that stays unschedulable produces no new watch event.
    """
    due: list[Stuck] = []
    wait: float | None = None
    for body in pods.values():
        stuck = unschedulable(body)
        if stuck is None:
            continue
        since = max(stuck.since, admitted_at) if admitted_at is not None else stuck.since
        left = after_s - (now - since).total_seconds()
        if left <= 0:
            due.append(stuck)
        else:
            wait = left if wait is None else min(wait, left)
    return sorted(due, key=lambda s: s.pod), wait


def message(stuck: list[Stuck], after_s: float) -> str:
    first = stuck[0]
    where = f"its planned node {first.node}" if first.node else "any node"
    more = f" (and {len(stuck) - 1} more pods)" if len(stuck) > 1 else ""
    return (
        f"pod {first.pod}{more} could not be scheduled on {where} for {after_s:.0f}s or "
        f"more ({first.message}); the gang's pods were deleted and the job is queued to be "
        "admitted again"
    )
