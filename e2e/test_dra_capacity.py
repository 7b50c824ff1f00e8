"""Consumable capacity (DRA, KEP-5075) works in the control plane the session starts.

This is the ground the RLix DRA driver stands on (issue 14): a device that
allows multiple allocations and publishes a ``memory`` capacity is shared by
independent ResourceClaims, and the real kube-scheduler keeps the sum of what
they consume within that capacity. The feature gate (DRAConsumableCapacity) is
beta and on by default since Kubernetes 1.36; with it off the API server drops
the gated fields on write, and the scheduler would treat the device as
allocatable once. Nothing here is RLix code: the ResourceSlice is published by
the test itself, on a kwok node, the way scheduler tests publish fake devices.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.kube import apply, get_json, wait_for
from rlix.devcluster.cluster import DevCluster

GIB = 1024**3
DEVICE = "gpu-0"
CAPACITY = "80Gi"
REQUEST = "30Gi"


@dataclass(frozen=True)
class SharedDevice:
    """One test's driver, DeviceClass and ResourceSlice (cluster-scoped, so per test)."""

    driver: str
    device_class: str
    slice_name: str
    node: str


def _quantity_bytes(value: str) -> int:
    """Binary-suffixed quantities as the API server writes them back (``30Gi``)."""
    suffixes = {"Ki": 1024, "Mi": 1024**2, "Gi": GIB, "Ti": 1024**4}
    for suffix, factor in suffixes.items():
        if value.endswith(suffix):
            return int(value[: -len(suffix)]) * factor
    return int(value)


@pytest.fixture
def shared_device(local_cluster: DevCluster, namespace: str) -> Iterator[SharedDevice]:
    """A DeviceClass and a ResourceSlice with one shareable 80Gi device on a kwok node."""
    node = sorted(
        n["metadata"]["name"] for n in get_json(local_cluster, "nodes", "-l", "type=kwok")["items"]
    )[0]
    # Unique per test: ResourceSlices and DeviceClasses outlive the namespace.
    device = SharedDevice(
        driver=f"{namespace}.capacity.e2e.rlix.io",
        device_class=f"{namespace}-shared-gpu",
        slice_name=f"{namespace}-{node}",
        node=node,
    )
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": device.device_class},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{device.driver}"'}}]},
    }
    resource_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": device.slice_name},
        "spec": {
            "driver": device.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": DEVICE,
                    "attributes": {"index": {"int": 0}, "uuid": {"string": "GPU-e2e-0"}},
                    "capacity": {"memory": {"value": CAPACITY}},
                    "allowMultipleAllocations": True,
                }
            ],
        },
    }
    local_cluster.apply([device_class, resource_slice])
    try:
        yield device
    finally:
        # Pods and claims go with the namespace; these are cluster-scoped.
        for kind, name in (
            ("resourceslice", device.slice_name),
            ("deviceclass", device.device_class),
        ):
            local_cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def _claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "capacity": {"requests": {"memory": REQUEST}},
                        },
                    }
                ]
            }
        },
    }


def _pod_with_claim(name: str, claim: str) -> dict[str, Any]:
    """A pod for the default kube-scheduler; kwok runs it once it is bound."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "main", "image": "pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _allocation(cluster: DevCluster, namespace: str, claim: str) -> list[dict[str, Any]] | None:
    status = get_json(cluster, "resourceclaim", claim, "-n", namespace).get("status", {})
    results = status.get("allocation", {}).get("devices", {}).get("results")
    return list(results) if results else None


def _node_of(cluster: DevCluster, namespace: str, pod: str) -> str | None:
    return get_json(cluster, "pod", pod, "-n", namespace)["spec"].get("nodeName") or None


def _unschedulable_message(cluster: DevCluster, namespace: str, pod: str) -> str | None:
    conditions = get_json(cluster, "pod", pod, "-n", namespace)["status"].get("conditions", [])
    for condition in conditions:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None


def _scheduled_node(cluster: DevCluster, namespace: str, pod: str, timeout_s: float = 60) -> str:
    """The pod's node once bound; on a timeout the failure carries the scheduler's reason."""
    try:
        return wait_for(
            f"{pod} to be scheduled", lambda: _node_of(cluster, namespace, pod), timeout_s=timeout_s
        )
    except AssertionError as exc:
        status = get_json(cluster, "pod", pod, "-n", namespace)["status"]
        raise AssertionError(f"{exc}; its conditions: {status.get('conditions')}") from None


def _allocated(cluster: DevCluster, namespace: str, claim: str) -> dict[str, Any]:
    """The claim's one allocation result, once the scheduler has written it."""
    (result,) = wait_for(f"{claim} to be allocated", lambda: _allocation(cluster, namespace, claim))
    return result


def test_the_api_server_runs_with_consumable_capacity_on(local_cluster: DevCluster) -> None:
    metrics = local_cluster.kubectl("get", "--raw", "/metrics").stdout
    gate = [line for line in metrics.splitlines() if 'name="DRAConsumableCapacity"' in line]
    assert gate, "the API server does not know the DRAConsumableCapacity feature gate"
    assert gate[0].startswith("kubernetes_feature_enabled") and gate[0].endswith(" 1"), gate


def test_a_shareable_device_keeps_its_capacity_fields(
    local_cluster: DevCluster, shared_device: SharedDevice
) -> None:
    """With the gate off the API server would silently drop allowMultipleAllocations."""
    stored = get_json(local_cluster, "resourceslice", shared_device.slice_name)
    (device,) = stored["spec"]["devices"]
    assert device.get("allowMultipleAllocations") is True, f"field dropped: {device}"
    assert device.get("capacity", {}).get("memory", {}).get("value") == CAPACITY, device


def test_two_claims_share_one_device_and_a_third_does_not_fit(
    local_cluster: DevCluster, namespace: str, shared_device: SharedDevice
) -> None:
    # One holder at a time: the second claim is allocated against the first's
    # allocation as the API server stores it, not while the scheduler still binds
    # pod-a. Created together, pod-b once waited out the 60 s unscheduled in a
    # full CI run (1 run in 4; never in 70 runs of this file alone, 40 of them
    # creating both pods at once with no scheduling failure at all). The cause
    # is not known; one at a time keeps the scheduler's in-flight bookkeeping
    # out of a test about capacity, and a timeout now says the scheduler's reason.
    results: dict[str, dict[str, Any]] = {}
    for pod, claim in (("pod-a", "share-a"), ("pod-b", "share-b")):
        apply(
            local_cluster,
            namespace,
            _claim(claim, shared_device.device_class),
            _pod_with_claim(pod, claim),
        )
        node = _scheduled_node(local_cluster, namespace, pod)
        assert node == shared_device.node, f"{pod} went to {node}, not the device's node"
        results[claim] = _allocated(local_cluster, namespace, claim)
    for claim, result in results.items():
        assert result["driver"] == shared_device.driver, (claim, result)
        assert result["pool"] == shared_device.node, (claim, result)
        assert result["device"] == DEVICE, (claim, result)
        assert result["consumedCapacity"] == {"memory": REQUEST}, (claim, result)
        assert result.get("shareID"), f"{claim}: a shared allocation carries a share ID"
    assert results["share-a"]["shareID"] != results["share-b"]["shareID"]
    consumed = sum(_quantity_bytes(r["consumedCapacity"]["memory"]) for r in results.values())
    assert consumed <= _quantity_bytes(CAPACITY)

    # 30Gi more would make 90Gi on an 80Gi device: the scheduler must refuse it.
    apply(
        local_cluster,
        namespace,
        _claim("share-c", shared_device.device_class),
        _pod_with_claim("pod-c", "share-c"),
    )
    message = wait_for(
        "pod-c to be reported unschedulable",
        lambda: _unschedulable_message(local_cluster, namespace, "pod-c"),
    )
    assert "cannot allocate all claims" in message, message
    assert _node_of(local_cluster, namespace, "pod-c") is None
    assert _allocation(local_cluster, namespace, "share-c") is None

    # Kubernetes counts a claim while it exists: deleting one holder and its
    # claim frees its 30Gi, and the waiting pod gets the same device.
    local_cluster.kubectl("delete", "pod", "pod-a", "-n", namespace, "--wait=true")
    local_cluster.kubectl("delete", "resourceclaim", "share-a", "-n", namespace, "--wait=true")
    node = _scheduled_node(local_cluster, namespace, "pod-c", timeout_s=120)
    assert node == shared_device.node
    result = _allocated(local_cluster, namespace, "share-c")
    assert result["device"] == DEVICE and result["consumedCapacity"] == {"memory": REQUEST}
