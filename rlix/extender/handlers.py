"""The three extender verbs as functions of (view, request body) -> answer.

No FastAPI here: the HTTP layer (``rlix.extender.app``) only times and frames
these, and offline replay (``rlix.extender.replay``) calls the same code on a
captured snapshot. Every failure becomes a protocol answer with status 200:
filter reports ``Error`` or per-node reasons; prioritize answers an empty
``HostPriorityList`` (what kube-scheduler does with a failed prioritize anyway:
it adds nothing) and preempt an empty ``NodeNameToMetaVictims`` ("no
candidate", what it makes of a failed preempt). Those two formats have no
error field, so ``Answer.error`` carries the sentence for the log and metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from rlix.core.dra import pod_claim_names
from rlix.core.objects.metadata import uid as object_uid
from rlix.core.policy.placement import (
    PlacementView,
    best_nodes,
    choose_victims,
    filter_nodes,
    score_values,
)
from rlix.extender import wire
from rlix.extender.objects import ObjectError, pending_workload


def pinned_by_claim(pod: Any) -> bool:
    """Whether a pod gets its GPUs through a ResourceClaim it names (RLix pins those)."""
    return isinstance(pod, dict) and bool(pod_claim_names(pod))


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any
    outcome: str  # for the metrics label: ok, bad_request, pod_error, internal
    error: str = ""  # why, when the body cannot say it (prioritize, preempt)


def refusal(verb: str, message: str, outcome: str) -> Answer:
    """The protocol's own way for ``verb`` to say "nothing from me", with why."""
    if verb == "filter":
        return Answer(200, wire.filter_result([], {}, {}, error=message), outcome, message)
    if verb == "prioritize":
        return Answer(200, wire.priority_list({}), outcome, message)
    return Answer(200, wire.empty_preemption(), outcome, message)


# (preemptor UID, refused nodes) -> the victims named for it still in the view.
Awaited = Callable[[str, Collection[str]], list[str]]


def do_filter(view: PlacementView, body: bytes, awaited: Awaited | None = None) -> Answer:
    """``awaited``: the preemption victims this extender named for a pod that
    its view still holds (``ClusterCache.awaited_victims``); where every node
    refuses the pod and one of those sits there, the answer is an error, so
    kube-scheduler retries after its backoff instead of waiting for an event."""
    try:
        args = wire.parse_args(body)
    except wire.WireError as exc:
        return refusal("filter", str(exc), "bad_request")
    try:
        pod = pending_workload(args.pod)
    except ObjectError as exc:
        # The user's own pod is wrong: say so on every node, where
        # `kubectl describe pod` shows it, and let no preemption be tried.
        reason = f"pod cannot be placed by rlix: {exc}"
        result = wire.filter_result(
            [], {}, dict.fromkeys(args.node_names, reason), node_items=args.node_items
        )
        return Answer(200, result, "pod_error", reason)
    if pod.gpus > 0 and pinned_by_claim(args.pod):
        # The pod's claim pins its GPUs (the operator's admitted plan): the DRA
        # allocator judges that device's memory and has already excluded every
        # other node. A second opinion here could only veto the plan, so the
        # extender passes the nodes it was given (docs/dra.md), narrowed only to
        # those it scores best: never to none.
        nodes = best_nodes(view, pod, args.node_names)
        return Answer(200, wire.filter_result(nodes, {}, {}, node_items=args.node_items), "ok")
    outcome = filter_nodes(view, pod, args.node_names)
    # Only the nodes RLix scores best go on (ties kept): kube-scheduler's own
    # scoring then decides among equals, and with one node left it skips
    # scoring (and the prioritize round trip) altogether. The other fitting
    # nodes are left out, not failed: they are not reported anywhere, and the
    # pod is placed, so no `kubectl describe` ever lists them. When nothing
    # fits, every node's reason goes back as before.
    feasible = best_nodes(view, pod, outcome.feasible) if outcome.feasible else []
    if not feasible and awaited is not None and (uid := object_uid(args.pod)):
        waiting = awaited(uid, {*outcome.failed, *outcome.unresolvable})
        if waiting:
            message = (
                f"waiting for preemption victims {', '.join(waiting)} to leave the extender's "
                "view (kube-scheduler deleted them; its watch has not caught up): retry"
            )
            return refusal("filter", message, "awaiting_victims")
    result = wire.filter_result(
        feasible, outcome.failed, outcome.unresolvable, node_items=args.node_items
    )
    return Answer(200, result, "ok")


def do_prioritize(view: PlacementView, body: bytes) -> Answer:
    try:
        args = wire.parse_args(body)
    except wire.WireError as exc:
        return refusal("prioritize", str(exc), "bad_request")
    try:
        pod = pending_workload(args.pod)
    except ObjectError as exc:
        # Filter already rejected this pod with the reason; stay neutral here.
        return Answer(
            200, wire.priority_list(dict.fromkeys(args.node_names, 0)), "pod_error", str(exc)
        )
    return Answer(200, wire.priority_list(score_values(view, pod, args.node_names)), "ok")


def do_preempt(
    view: PlacementView,
    body: bytes,
    name_of_uid: Callable[[str], str | None],
    uid_of: Callable[[str], str | None],
    named: Callable[[str, list[str]], None] | None = None,
) -> Answer:
    """``named``: told (preemptor UID, victim UIDs) for every victim answered
    (``ClusterCache.expect_deleted``; see ``do_filter``)."""
    try:
        args = wire.parse_preemption(body)
    except wire.WireError as exc:
        return refusal("preempt", str(exc), "bad_request")
    try:
        pod = pending_workload(args.pod)
    except ObjectError as exc:
        return refusal("preempt", f"pod cannot be placed by rlix: {exc}", "pod_error")
    # Victims we cannot map to a workload keep their UID as their name, so the
    # policy passes them through unchanged.
    proposals = {
        node: [name_of_uid(uid) or uid for uid in uids] for node, (uids, _) in args.victims.items()
    }
    chosen = choose_victims(view, pod, proposals)
    out = {
        node: ([uid_of(name) or name for name in names], args.victims[node][1])
        for node, names in chosen.items()
    }
    if named is not None:
        named(object_uid(args.pod), [uid for uids, _ in out.values() for uid in uids])
    return Answer(200, wire.preemption_result(out), "ok")
