"""What claim RLix writes for a plan, and what slices and allocations say (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.core import dra

OWNER = {"apiVersion": "rlix.io/v1alpha1", "kind": "RLJob", "name": "j", "uid": "u1"}
GPUS = [dra.SliceGpu(i, f"GPU-{i}", "H200", 143771, "rack-1") for i in (1, 0)]


def published() -> dict[int, dra.PublishedGpu]:
    body = dra.resource_slice(node="n1", node_uid="nu", gpus=GPUS, overcommit=1.5)
    return dra.published_gpus(body)


def test_the_slice_has_one_shareable_device_per_gpu_with_overcommitted_memory() -> None:
    body = dra.resource_slice(node="n1", node_uid="nu", gpus=GPUS, overcommit=1.5, generation=3)
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.rlix.io", "n1")
    assert spec["pool"] == {"name": "n1", "generation": 3, "resourceSliceCount": 1}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "nu"}
    ]
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    first = spec["devices"][0]
    assert first["allowMultipleAllocations"] is True
    assert first["capacity"] == {"memory": {"value": f"{int(143771 * 1.5)}Mi"}}
    assert first["attributes"] == {
        "uuid": {"string": "GPU-0"},
        "index": {"int": 0},
        "productName": {"string": "H200"},
        "nvlinkDomain": {"string": "rack-1"},
    }
    assert dra.shares_capacity(body)
    assert published()[1] == dra.PublishedGpu(1, "GPU-1", int(143771 * 1.5))


def test_an_overcommit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="overcommit factor must be >= 1"):
        dra.resource_slice(node="n1", node_uid="nu", gpus=GPUS, overcommit=0.5)


def test_a_server_that_dropped_consumable_capacity_is_seen() -> None:
    body = dra.resource_slice(node="n1", node_uid="nu", gpus=GPUS, overcommit=1)
    for device in body["spec"]["devices"]:
        del device["allowMultipleAllocations"]
    assert not dra.shares_capacity(body)
    assert not dra.shares_capacity({})


def test_the_claim_pins_each_planned_gpu_by_uuid_for_the_peak_memory() -> None:
    plan = dra.plan_claim(
        namespace="ns", name="j-trainer-0", gpus=(1, 0), published=published(),
        peak_memory_mib=60000,
    )  # fmt: skip
    assert plan == dra.ClaimPlan("ns", "j-trainer-0", ("GPU-1", "GPU-0"), 60000, (1, 0))
    body = dra.resource_claim(plan, OWNER)
    assert body["metadata"] == {
        "name": "j-trainer-0",
        "namespace": "ns",
        "ownerReferences": [OWNER],
    }
    requests = body["spec"]["devices"]["requests"]
    assert [r["name"] for r in requests] == ["gpu-0", "gpu-1"]
    exactly = requests[0]["exactly"]
    assert exactly["deviceClassName"] == "gpu.rlix.io"
    assert exactly["count"] == 1
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.rlix.io"].uuid == "GPU-1"'}}
    ]
    assert exactly["capacity"] == {"requests": {"memory": "60000Mi"}}
    assert dra.pinned_uuids(body) == ("GPU-1", "GPU-0")


def test_a_pod_without_declared_memory_claims_the_whole_published_gpu() -> None:
    plan = dra.plan_claim(
        namespace="ns", name="p", gpus=(0,), published=published(), peak_memory_mib=0
    )
    assert plan.memory_mib == int(143771 * 1.5)


def test_a_plan_on_a_gpu_the_slice_lacks_names_it() -> None:
    with pytest.raises(dra.ClaimPlanError, match=r"pod ns/p: GPU index\(es\) \[7\] are not"):
        dra.plan_claim(namespace="ns", name="p", gpus=(7,), published=published(),
                       peak_memory_mib=1)  # fmt: skip
    with pytest.raises(dra.ClaimPlanError, match="at least one GPU"):
        dra.plan_claim(namespace="ns", name="p", gpus=(), published=published(), peak_memory_mib=1)


def allocated(*results: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str, memory: str, *, driver: str = "gpu.rlix.io", pool: str = "n1") -> Any:
    return {"driver": driver, "pool": pool, "device": device, "request": "gpu-0",
            "consumedCapacity": {"memory": memory}}  # fmt: skip


def test_the_allocation_says_node_gpus_and_consumed_memory() -> None:
    claim = allocated(result("gpu-3", "40Gi"), result("gpu-1", "30000Mi"))
    assert dra.read_allocation(claim) == dra.Allocation("n1", (3, 1), (40960, 30000))
    assert dra.claim_key(claim) == "ns/c"


@pytest.mark.parametrize(
    "claim",
    [
        {},
        {"status": {}},
        allocated(result("gpu-0", "1Gi", driver="gpu.nvidia.com")),
        allocated(result("weird", "1Gi")),
        allocated(result("gpu-0", "1Gi"), result("gpu-1", "1Gi", pool="n2")),
    ],
    ids=["empty", "unallocated", "other-driver", "other-device", "two-nodes"],
)
def test_anything_else_is_no_allocation_of_ours(claim: dict[str, Any]) -> None:
    assert dra.read_allocation(claim) is None


@pytest.mark.parametrize(
    ("raw", "mib"),
    [("80Gi", 81920), ("40000Mi", 40000), (str(80 << 30), 81920), ("1Ti", 1 << 20),
     ("1.5Gi", None), ("1e9", None), (5, None), ("9" * 40, None)],
)  # fmt: skip
def test_quantities(raw: object, mib: int | None) -> None:
    assert dra.quantity_mib(raw) == mib


def test_device_names_round_trip_and_pods_name_their_claims() -> None:
    assert dra.device_index(dra.device_name(12)) == 12
    assert dra.device_index("gpu-x") is None
    refs = [
        {"name": "a", "resourceClaimName": "c1"},
        {"name": "b", "resourceClaimTemplateName": "t"},
    ]
    pod = {"spec": {"resourceClaims": refs}}
    assert dra.pod_claim_names(pod) == ("c1",)
    assert dra.device_class()["spec"]["selectors"] == [
        {"cel": {"expression": 'device.driver == "gpu.rlix.io"'}}
    ]
