"""What NodePrepareResources does for one ``gpu.rlix.io`` claim, without gRPC.

The kubelet names a claim (namespace, name, uid) of a pod it is about to start
on this node. The agent reads the claim from the API server (the request says
nothing about the allocation), takes every allocation result of its own driver
on its own pool (the node's name, ``rlix.core.dra.resource_slice``), writes one
CDI spec for the claim (``rlix.agent.cdi``) and answers, per result, the device
and the CDI ids the runtime must apply: RLix's (the environment), and on a real
GPU node the vendor's own device for that GPU (``--vendor-cdi-device``).

Idempotent and restart-safe by construction: the spec file is a function of the
claim (rewritten with the same content on a repeated Prepare, e.g. after the
kubelet or the agent restarted), and Unprepare removes the file named by the
uid alone, so it works when the claim is already deleted and after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlix.agent import cdi
from rlix.agent.gpus import GpuInfo
from rlix.core import dra

log = logging.getLogger(__name__)


class ClaimReader(Protocol):
    def read_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The ResourceClaim as the API server stores it (JSON)."""
        ...


class PrepareError(Exception):
    """A claim this node cannot prepare; the message goes back to the kubelet."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocated device as the kubelet is told about it."""

    request: str
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None


class ClaimPreparer:
    def __init__(
        self,
        claims: ClaimReader,
        gpus: Callable[[], Sequence[GpuInfo]],
        *,
        node: str,
        cdi_dir: Path,
        vendor_cdi_device: str = "",
    ) -> None:
        if vendor_cdi_device:
            cdi.check_vendor_template(vendor_cdi_device)
        self._vendor = vendor_cdi_device
        self._claims = claims
        self._gpus = gpus
        self._node = node
        self.cdi_dir = cdi_dir

    def prepare(self, namespace: str, name: str, uid: str) -> list[PreparedDevice]:
        """Write the claim's CDI spec; the devices the kubelet should hand on."""
        where = f"ResourceClaim {namespace}/{name}"
        claim = self._claims.read_claim(namespace, name)
        stored_uid = str((claim.get("metadata") or {}).get("uid", ""))
        if stored_uid != uid:
            # A claim deleted and recreated under the same name is another claim.
            raise PrepareError(f"{where}: uid is {stored_uid!r}, the kubelet asked for {uid!r}")
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = [
            r
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == dra.DRIVER
        ]
        if not results:
            raise PrepareError(f"{where}: no allocation of a {dra.DRIVER} device")
        by_index = {g.index: g for g in self._gpus()}
        prepared: list[tuple[dict[str, Any], cdi.PreparedGpu]] = []
        for result in results:
            pool, device = str(result.get("pool", "")), str(result.get("device", ""))
            index = dra.device_index(device)
            if pool != self._node:
                raise PrepareError(f"{where}: device {device} is in pool {pool!r}, not this node's")
            if index is None or index not in by_index:
                raise PrepareError(
                    f"{where}: device {device!r} is not a GPU of node {self._node} "
                    f"(it has {sorted(by_index)})"
                )
            memory = dra.quantity_mib((result.get("consumedCapacity") or {}).get(dra.MEMORY))
            gpu = by_index[index]
            prepared.append((result, cdi.PreparedGpu(index, gpu.uuid, memory or gpu.memory_mib)))
        cdi_id = cdi.write_spec(self.cdi_dir, uid, [gpu for _, gpu in prepared])
        log.info(
            "prepared %s (uid %s): GPUs %s as CDI device %s",
            where,
            uid,
            [gpu.index for _, gpu in prepared],
            cdi_id,
        )
        return [
            PreparedDevice(
                request=str(result.get("request", "")),
                pool=str(result["pool"]),
                device=str(result["device"]),
                cdi_ids=(cdi_id, *cdi.vendor_device_ids(self._vendor, [gpu])),
                share_id=str(result["shareID"]) if result.get("shareID") else None,
            )
            for result, gpu in prepared
        ]

    def unprepare(self, uid: str) -> None:
        """Remove the claim's CDI spec (nothing to do when it is already gone)."""
        if cdi.remove_spec(self.cdi_dir, uid):
            log.info("unprepared claim uid %s", uid)
