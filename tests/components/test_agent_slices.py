"""The agent as the gpu.rlix.io DRA driver: when it (re)publishes its slice, and
how it tells a cluster that kept consumable capacity from one that dropped it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from rlix.agent.gpus import GpuInfo
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.agent.slices import SlicePublisher, publish_slices
from rlix.core import dra, names


class FakeSliceApi:
    """An API server in memory; ``drops_sharing`` models one without the feature."""

    def __init__(self, *, drops_sharing: bool = False) -> None:
        self.drops_sharing = drops_sharing
        self.slices: dict[str, dict[str, Any]] = {}
        self.annotations: dict[str, str] = {}
        self.writes = 0

    def read_node(self, name: str) -> Mapping[str, Any]:
        return {"metadata": {"name": name, "uid": "node-uid",
                             "labels": {names.LABEL_NVLINK_DOMAIN: "rack-7"}}}  # fmt: skip

    def apply_slice(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.writes += 1
        stored = {
            **body,
            "spec": {**body["spec"], "devices": [dict(d) for d in body["spec"]["devices"]]},
        }
        if self.drops_sharing:
            for device in stored["spec"]["devices"]:
                device.pop("allowMultipleAllocations", None)
        self.slices[body["metadata"]["name"]] = stored
        return stored

    def read_slice(self, name: str) -> Mapping[str, Any] | None:
        return self.slices.get(name)

    def delete_slice(self, name: str) -> None:
        self.slices.pop(name, None)

    def patch_node_annotations(self, *, node: str, annotations: Mapping[str, str | None]) -> None:
        for key, value in annotations.items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value


def gpus(memory: int = 81920, count: int = 2) -> list[GpuInfo]:
    return [GpuInfo(i, f"GPU-{i}", "H100", memory, used_mib=0, utilization=0.0)
            for i in range(count)]  # fmt: skip


def test_publishes_once_per_inventory_and_marks_the_node() -> None:
    api = FakeSliceApi()
    pub = SlicePublisher(api, node="n1", overcommit=2)
    pub.publish(gpus())
    # Usage changes are not inventory changes: no new write.
    pub.publish([GpuInfo(g.index, g.uuid, g.product, g.memory_mib, 5000, 0.9) for g in gpus()])
    assert api.writes == 1
    body = api.slices[dra.slice_name("n1")]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert body["spec"]["devices"][0]["attributes"]["nvlinkDomain"] == {"string": "rack-7"}
    assert dra.published_gpus(body)[1].memory_mib == 2 * 81920
    assert api.annotations == {
        names.ANNOTATION_NODE_GPU_CLAIMS: "true",
        names.ANNOTATION_NODE_MEMORY_OVERCOMMIT: "2",  # admission's headroom for parked memory
    }
    assert pub.shares is True
    # A GPU goes away: republished with the next pool generation.
    pub.publish(gpus(count=1))
    assert api.writes == 2
    assert api.slices[dra.slice_name("n1")]["spec"]["pool"]["generation"] == 2


def test_a_slice_the_kubelet_wiped_is_published_again() -> None:
    # A starting kubelet deletes its node's slices of every driver; the inventory
    # did not change, but the node must not stay without GPUs.
    api = FakeSliceApi()
    pub = SlicePublisher(api, node="n1", overcommit=1)
    pub.publish(gpus())
    api.slices.clear()
    pub.publish(gpus())
    assert api.writes == 2
    assert sorted(dra.published_gpus(api.slices[dra.slice_name("n1")])) == [0, 1]


def test_a_cluster_without_consumable_capacity_keeps_whole_gpus() -> None:
    api = FakeSliceApi(drops_sharing=True)
    pub = SlicePublisher(api, node="n1", overcommit=1)
    pub.publish(gpus())
    assert api.slices == {}  # withdrawn: it would hand a GPU to one claim only
    assert api.annotations == {}
    assert pub.shares is False


def test_withdraw_removes_the_slice_and_the_mark() -> None:
    api = FakeSliceApi()
    pub = SlicePublisher(api, node="n1", overcommit=1)
    pub.publish(gpus())
    pub.withdraw()
    assert api.slices == {} and api.annotations == {}


def test_an_overcommit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="--memory-overcommit must be >= 1"):
        SlicePublisher(FakeSliceApi(), node="n1", overcommit=0.9)


def test_the_loop_publishes_the_backends_gpus_until_stopped() -> None:
    api = FakeSliceApi()
    stop = threading.Event()
    stop.set()  # one pass, then the loop ends
    publish_slices(SlicePublisher(api, node="n1", overcommit=1),
                   SimulatedBackend(gpu_count=3, memory_mib=1000), 0.01, stop)  # fmt: skip
    assert sorted(dra.published_gpus(api.slices[dra.slice_name("n1")])) == [0, 1, 2]
