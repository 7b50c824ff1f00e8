"""Replay a captured ``/debug/snapshot`` through the real policy, offline.

When a pod lands somewhere surprising, grab ``/debug/snapshot`` from the
extender and the pod's YAML/JSON, then ``rlix replay`` answers "what did filter
and prioritize say, and why" on a laptop. Same functions as the live service;
no FastAPI, no cluster. Pure: the caller reads the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlix.core.policy.placement import (
    PlacementView,
    filter_nodes,
    score_nodes,
    snapshot_from_doc,
)
from rlix.core.policy.placement.documents import rules_from_doc, rules_to_doc, workload_from_doc
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.snapshot import Workload
from rlix.extender.objects import pending_workload


def _pending(pod: Mapping[str, Any]) -> Workload:
    """A Kubernetes Pod object, or a workload entry in snapshot-document form."""
    if "metadata" in pod or "spec" in pod:
        return pending_workload(pod)
    return workload_from_doc(pod)


def replay(
    snapshot_doc: Mapping[str, Any],
    pod: Mapping[str, Any],
    node_names: Sequence[str] | None = None,
    rules: SharingRules | None = None,
) -> dict[str, Any]:
    """Filter and prioritize ``pod`` against a captured snapshot.

    Returns a JSON-able report: feasible nodes ranked best first (with each
    score's terms; the live filter passes on those tied for the first score),
    and the reason for every rejected node. ``node_names``
    defaults to every node in the snapshot; ``rules`` to the sharing rules the
    snapshot says its extender decided with (``DEFAULT_RULES`` for a snapshot
    that does not say). Raises ``ValueError`` subclasses with a clear message
    for a bad snapshot or pod.
    """
    if rules is None:
        said = snapshot_doc.get("sharingRules")
        rules = DEFAULT_RULES if said is None else rules_from_doc(said)
    view = PlacementView(snapshot_from_doc(snapshot_doc), rules=rules)
    workload = _pending(pod)
    names = list(node_names) if node_names is not None else list(view.snapshot.nodes)
    outcome = filter_nodes(view, workload, names)
    scores = score_nodes(view, workload, outcome.feasible)
    ranked = sorted(scores.values(), key=lambda s: (-s.score, s.node))
    return {
        "pod": workload.name,
        "sharingRules": rules_to_doc(rules),
        "ranking": [
            {
                "node": s.node,
                "score": s.score,
                "complement": round(s.complement, 3),
                "interleave": round(s.interleave, 3),
                "locality": round(s.locality, 3),
                "packing": round(s.packing, 3),
                "gpus": list(s.gpus),
            }
            for s in ranked
        ],
        "failed": dict(outcome.failed),
        "unresolvable": dict(outcome.unresolvable),
    }
