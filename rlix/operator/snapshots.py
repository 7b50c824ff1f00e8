"""Watched Nodes and Pods -> the core ``ClusterSnapshot``, through the one reader.

Pods and nodes are read by ``rlix.core.objects``, the same reader the extender
uses, so admission and placement agree on every default (GPUs per node,
priority, preemptible, memory). A malformed value yields that object's safe
reading and an error that is logged once per object, never an exception that
would stop an admission pass for every other job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from rlix.core.objects import ObjectError, read_node, read_pod
from rlix.core.snapshot import ClusterSnapshot, Node, Workload

Body = Mapping[str, Any]
log = logging.getLogger("rlix.operator.snapshots")
_reported: dict[str, tuple[str, ...]] = {}


def _report(key: str, errors: Sequence[ObjectError]) -> None:
    messages = tuple(str(e) for e in errors)
    if _reported.get(key, ()) == messages:
        return
    if not messages:
        _reported.pop(key, None)
        return
    _reported[key] = messages
    for message in messages:
        log.warning("read with safe values: %s", message)


def node_from_body(body: Body) -> Node | None:
    """The node, or None (logged) when it has no usable name."""
    try:
        facts = read_node(body)
    except ObjectError as exc:
        log.warning("ignoring an unreadable node: %s", exc)
        return None
    _report(f"Node {facts.node.name}", facts.errors)
    return facts.node


def node_offer(body: Body) -> Node | None:
    """What the node offers, without the agent's live GPU state.

    Agents republish utilisation every few seconds; only a change in what the
    node offers is worth an admission pass.
    """
    node = node_from_body(body)
    return replace(node, gpus=()) if node is not None else None


def log_gpu_mode(old: Body | None, new: Body) -> None:
    """Say in the operator's log how a GPU node's GPUs are handed out, when that changes.

    Detected, not configured: RLix's agent marks a node whose GPUs it publishes
    as gpu.rlix.io DRA devices with consumable memory; every other GPU node
    (NVIDIA's device plugin or DRA driver, a cluster without consumable
    capacity) keeps whole GPUs.
    """
    node = node_offer(new)
    if node is None or node.gpu_count <= 0:
        return
    before = node_offer(old) if old is not None else None
    if before is not None and before.claims == node.claims:
        return
    if node.claims:
        log.info(
            "node %s: %d GPUs shared by memory through pinned gpu.rlix.io ResourceClaims",
            node.name,
            node.gpu_count,
        )
    else:
        log.info(
            "node %s: %d whole GPUs (nvidia.com/gpu; no gpu.rlix.io consumable capacity): "
            "no GPU sharing, and parking frees nothing the scheduler can reuse",
            node.name,
            node.gpu_count,
        )


def workload_from_pod(body: Body) -> Workload | None:
    """The pod's workload, placed where admission planned it until it binds."""
    try:
        facts = read_pod(body)
    except ObjectError as exc:
        log.warning("ignoring an unreadable pod: %s", exc)
        return None
    _report(f"Pod {facts.workload.name}", facts.errors)
    if facts.finished:
        return None  # finished pods free their GPUs
    if facts.workload.node is None and facts.admitted_node:
        return replace(facts.workload, node=facts.admitted_node)
    return facts.workload


def build_snapshot(
    nodes: Iterable[Body], pods: Iterable[Body], planned: Iterable[Workload] = ()
) -> ClusterSnapshot:
    """Nodes, live pods, and workloads admitted but not yet created as pods."""
    live = [w for w in map(workload_from_pod, pods) if w is not None]
    seen = {w.name for w in live}
    return ClusterSnapshot.of(
        (n for n in map(node_from_body, nodes) if n is not None),
        [*live, *(w for w in planned if w.name not in seen)],
    )
