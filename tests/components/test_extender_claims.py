"""The extender believes claim allocations about who holds which RLix GPU."""

from __future__ import annotations

from typing import Any

from rlix.core import dra, names
from rlix.extender.cache import ADDED, DELETED, MODIFIED, ClusterCache
from rlix.extender.handlers import do_filter
from tests.builders.objects import node_object
from tests.builders.placement import node


def claimed_pod(name: str, *, bound_to: str | None = None) -> dict[str, Any]:
    """A role pod as the operator writes it on a DRA node: a claim, no nvidia.com/gpu."""
    spec: dict[str, Any] = {
        "schedulerName": names.SCHEDULER_NAME,
        "resourceClaims": [{"name": dra.POD_CLAIM_NAME, "resourceClaimName": name}],
        "containers": [
            {"name": "main", "image": "t", "resources": {"claims": [{"name": dra.POD_CLAIM_NAME}]}}
        ],
    }
    if bound_to:
        spec["nodeName"] = bound_to
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {names.LABEL_JOB: name, names.LABEL_ROLE: "trainer"},
            "annotations": {
                names.ANNOTATION_CLAIMED_GPUS: "1",
                names.ANNOTATION_GPU_MEMORY_MIB: "40000",
                # The operator's plan; the allocation, not this, is believed.
                names.ANNOTATION_GPU_INDICES: "5",
            },
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def claim(name: str, *, device: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name}}
    if device is not None:
        body["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": dra.DRIVER, "pool": "n1", "device": device,
                         "request": "gpu-0", "consumedCapacity": {"memory": "40000Mi"}}
                    ]
                }
            }
        }  # fmt: skip
    return body


def held(cache: ClusterCache) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    return {w.name: (w.node, w.gpu_indices) for w in cache.view().snapshot.workloads}


def fresh() -> ClusterCache:
    cache = ClusterCache()
    cache.apply_node(ADDED, node_object(node("n1").gpus(8).build()))
    return cache


def test_a_pod_holds_what_its_claim_was_allocated_even_before_binding() -> None:
    cache = fresh()
    cache.apply_pod(ADDED, claimed_pod("a"))
    assert held(cache) == {}  # not allocated: it holds nothing yet
    cache.apply_claim(MODIFIED, claim("a", device="gpu-2"))
    assert held(cache) == {"ns/a": ("n1", (2,))}
    # Binding changes nothing about where it holds.
    cache.apply_pod(MODIFIED, claimed_pod("a", bound_to="n1"))
    assert held(cache) == {"ns/a": ("n1", (2,))}
    load = cache.view().load("n1")
    assert load is not None and load.gpus[2].owed_mib == 40000
    assert cache.allocations() == {"ns/a": dra.Allocation("n1", (2,), (40000,))}


def test_a_claim_seen_before_its_pod_and_a_deallocation_both_count() -> None:
    cache = fresh()
    cache.apply_claim(ADDED, claim("a", device="gpu-1"))
    cache.apply_pod(ADDED, claimed_pod("a", bound_to="n1"))
    assert held(cache) == {"ns/a": ("n1", (1,))}
    cache.apply_claim(MODIFIED, claim("a", device=None))
    assert held(cache) == {}
    cache.replace_claims([claim("a", device="gpu-4")])
    assert held(cache) == {"ns/a": ("n1", (4,))}
    cache.apply_claim(DELETED, claim("a", device=None))
    cache.apply_pod(DELETED, claimed_pod("a", bound_to="n1"))
    assert held(cache) == {} and cache.allocations() == {}


def test_pods_without_claims_keep_the_whole_gpu_rules() -> None:
    cache = fresh()
    pod = claimed_pod("w", bound_to="n1")
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {"limits": {names.GPU_RESOURCE: "1"}}
    cache.apply_pod(ADDED, pod)
    assert held(cache) == {"ns/w": ("n1", (5,))}


def test_the_filter_defers_to_the_claim_for_a_pinned_pod() -> None:
    """A full GPU in the extender's view must not veto the operator's pinned plan."""
    import json

    cache = fresh()
    for i in range(8):  # every GPU promised to someone the extender knows of
        other = claimed_pod(f"o{i}", bound_to="n1")
        other["metadata"]["annotations"][names.ANNOTATION_GPU_MEMORY_MIB] = "81920"
        cache.apply_claim(ADDED, claim(f"o{i}", device=f"gpu-{i}"))
        cache.apply_pod(ADDED, other)
    body = json.dumps({"Pod": claimed_pod("new"), "NodeNames": ["n1"]}).encode()
    answer = do_filter(cache.view(), body)
    assert answer.body["NodeNames"] == ["n1"], answer.body
    unpinned = claimed_pod("new")
    del unpinned["spec"]["resourceClaims"]
    body = json.dumps({"Pod": unpinned, "NodeNames": ["n1"]}).encode()
    assert do_filter(cache.view(), body).body["NodeNames"] == []


def test_the_filter_narrows_a_pinned_pods_nodes_to_its_best_never_to_none() -> None:
    """Among nodes the claim allows, RLix's best score still steers (what its
    prioritize did), but a node it thinks full is never the reason for none."""
    import json

    cache = fresh()
    cache.apply_node(ADDED, node_object(node("n2").gpus(8).build()))
    for i in range(8):  # n1 full in the extender's view, n2 empty
        other = claimed_pod(f"o{i}", bound_to="n1")
        other["metadata"]["annotations"][names.ANNOTATION_GPU_MEMORY_MIB] = "81920"
        cache.apply_claim(ADDED, claim(f"o{i}", device=f"gpu-{i}"))
        cache.apply_pod(ADDED, other)
    body = json.dumps({"Pod": claimed_pod("new"), "NodeNames": ["n1", "n2"]}).encode()
    assert do_filter(cache.view(), body).body["NodeNames"] == ["n2"]
    body = json.dumps({"Pod": claimed_pod("new"), "NodeNames": ["n1", "n1"]}).encode()
    assert do_filter(cache.view(), body).body["NodeNames"] == ["n1"]
