"""The node agent as the DRA driver ``gpu.rlix.io``: its node's ResourceSlice.

One slice per node, one device per GPU (see ``rlix.core.dra``), republished
when the inventory changes (a GPU appears, goes, or changes size; never for a
change of usage, which would churn the scheduler's view every few seconds).
The slice is owned by the Node, so the garbage collector removes it with the
node, and is written again when it disappears otherwise (a starting kubelet
deletes its node's slices). After each write the agent checks that the API server kept the
consumable-capacity fields: a cluster without them (before Kubernetes 1.36
without the DRAConsumableCapacity gate) would otherwise offer each GPU whole
to one claim while RLix promised it to several. There the slice is withdrawn
and the node keeps whole GPUs; the node annotation ``rlix.io/gpu-claims``
tells the operator, the extender and ``rlix top`` which way the node works.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rlix.agent.gpus import GpuBackend, GpuInfo
from rlix.core import dra, names

log = logging.getLogger(__name__)


class SliceApi(Protocol):
    def read_node(self, name: str) -> Mapping[str, Any]: ...

    def apply_slice(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Create or replace the slice; the object as the API server stored it."""
        ...

    def read_slice(self, name: str) -> Mapping[str, Any] | None:
        """The slice, or None when there is none."""
        ...

    def delete_slice(self, name: str) -> None: ...

    def patch_node_annotations(
        self, *, node: str, annotations: Mapping[str, str | None]
    ) -> None: ...


def _inventory(gpus: Sequence[GpuInfo]) -> tuple[tuple[int, str, str, int], ...]:
    return tuple(sorted((g.index, g.uuid, g.product, g.memory_mib) for g in gpus))


class SlicePublisher:
    def __init__(self, api: SliceApi, *, node: str, overcommit: float) -> None:
        if overcommit < 1:
            raise ValueError(f"--memory-overcommit must be >= 1, got {overcommit}")
        self._api = api
        self._node = node
        self._overcommit = overcommit
        self._published: tuple[tuple[int, str, str, int], ...] | None = None
        self._generation = 0
        self.shares: bool | None = None  # None until the first publication

    def publish(self, gpus: Sequence[GpuInfo]) -> None:
        """Publish the slice if the inventory changed since the last success."""
        inventory = _inventory(gpus)
        if inventory == self._published and (not self.shares or self._still_there()):
            return
        node = self._api.read_node(self._node)
        meta = node.get("metadata") or {}
        domain = str((meta.get("labels") or {}).get(names.LABEL_NVLINK_DOMAIN, ""))
        self._generation += 1
        body = dra.resource_slice(
            node=self._node,
            node_uid=str(meta.get("uid", "")),
            gpus=[
                dra.SliceGpu(g.index, g.uuid, g.product, g.memory_mib, domain)
                for g in sorted(gpus, key=lambda g: g.index)
            ],
            overcommit=self._overcommit,
            generation=self._generation,
        )
        stored = self._api.apply_slice(body) if gpus else {}
        shares = dra.shares_capacity(stored)
        if not shares:
            # Whole GPUs here: a slice without sharing would let the DRA
            # allocator hand a GPU to one claim that RLix planned for several.
            self._api.delete_slice(dra.slice_name(self._node))
        if shares != self.shares:
            log.log(
                logging.INFO if shares else logging.WARNING,
                "node %s: %s",
                self._node,
                f"{len(gpus)} GPUs published as {dra.DRIVER} devices with consumable memory "
                f"(x{self._overcommit:g} overcommit): pods share them through claims"
                if shares
                else "the API server dropped consumable capacity from the "
                f"{dra.DRIVER} slice (or no GPUs): whole GPUs, no sharing",
            )
        self._api.patch_node_annotations(
            node=self._node,
            annotations={
                names.ANNOTATION_NODE_GPU_CLAIMS: "true" if shares else None,
                # Admission's headroom for parked memory (rlix.core.policy.placement.loads).
                names.ANNOTATION_NODE_MEMORY_OVERCOMMIT: f"{self._overcommit:g}"
                if shares
                else None,
            },
        )
        self.shares = shares
        self._published = inventory

    def _still_there(self) -> bool:
        """Whether the published slice still exists. A kubelet deletes its node's
        slices of every driver when it starts, and of a driver whose plugin stayed
        unregistered for a while (kubernetes pkg/kubelet/cm/dra/plugin): after
        that the node would offer no GPUs until the inventory changed."""
        if self._api.read_slice(dra.slice_name(self._node)) is not None:
            return True
        log.info(
            "node %s: the %s slice was deleted (by the kubelet?); republishing",
            self._node,
            dra.DRIVER,
        )
        return False

    def withdraw(self) -> None:
        """Stop driving the node's GPUs (the agent is told to stop publishing)."""
        self._api.delete_slice(dra.slice_name(self._node))
        self._api.patch_node_annotations(
            node=self._node,
            annotations={
                names.ANNOTATION_NODE_GPU_CLAIMS: None,
                names.ANNOTATION_NODE_MEMORY_OVERCOMMIT: None,
            },
        )
        self._published = None
        self.shares = None


def publish_slices(
    slices: SlicePublisher, backend: GpuBackend, interval_s: float, stop: threading.Event
) -> None:
    """Publish now, then whenever the inventory changes, until ``stop``.

    A failure (API server down, RBAC missing) is logged and retried at the
    next tick: the node keeps working with whatever was published last.
    """
    while True:
        try:
            slices.publish(backend.gpus())
        except Exception:
            log.exception("publishing the %s ResourceSlice failed; retrying", dra.DRIVER)
        if stop.wait(interval_s):
            return
