"""Pod/Node objects -> Workload/Node: the annotations users write, read right."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.core.phases import Phase
from rlix.extender.objects import (
    ObjectError,
    node_from_object,
    parse_memory,
    pod_gpus,
    pod_to_workload,
)
from tests.builders.objects import node_object, pod_object
from tests.builders.placement import node, pod


def test_pod_round_trips_through_its_object() -> None:
    w = (
        pod("ns1/x").job("ns1/j", gang=4).role("rollout").gpus(2)
        .memory(rollout=100, training=200).phase("rollout").priority(7)
        .preemptible(False).suspended().on("n", 3, 5).build()
    )  # fmt: skip
    assert pod_to_workload(pod_object(w), strict=True) == w


def test_node_round_trips_through_its_object() -> None:
    n = node("n").gpus(4, mib=1000).domain("rack").used(1, 2, 3, 4).cordoned().build()
    assert node_from_object(node_object(n)) == n


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("40000", {p: 40000 for p in Phase if p is not Phase.IDLE}),
        ('{"rollout": 100, "Training": "200"}', {Phase.ROLLOUT: 100, Phase.TRAINING: 200}),
    ],
)
def test_memory_annotation_forms(raw: str, expected: dict[Phase, int]) -> None:
    assert parse_memory(raw) == expected


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("lots", "must be an integer MiB or JSON"),
        ("0", "must be >= 1"),
        ("[1, 2]", "non-empty JSON object"),
        ("{}", "non-empty JSON object"),
        ('{"warmup": 1}', "unknown phase 'warmup'"),
        ('{"rollout": -5}', "must be >= 0"),
        ('{"rollout": true}', "must be an integer"),
    ],
)
def test_bad_memory_annotation_says_what_is_wrong(raw: str, words: str) -> None:
    with pytest.raises(ObjectError, match=words.replace("[", r"\[")):
        parse_memory(raw)


def annotated(**notes: str) -> dict[str, Any]:
    obj = pod_object(pod("p").build())
    obj["metadata"]["annotations"].update(notes)
    return obj


@pytest.mark.parametrize(
    ("key", "raw", "field", "fallback"),
    [
        ("rlix.io/gpu-memory-mib", "x", "memory_mib", {}),
        ("rlix.io/gang-size", "0", "gang_size", 1),
        ("rlix.io/suspended", "maybe", "suspended", False),
        ("rlix.io/gpu-indices", "a,b", "gpu_indices", ()),
        ("rlix.io/priority", "high", "priority", 0),
    ],
)
def test_garbage_is_an_error_for_the_pod_being_scheduled_but_safe_for_residents(
    key: str, raw: str, field: str, fallback: Any
) -> None:
    obj = annotated(**{key: raw})
    obj["spec"].pop("priority")
    with pytest.raises(ObjectError, match=key):
        pod_to_workload(obj, strict=True)
    assert getattr(pod_to_workload(obj, strict=False), field) == fallback


def test_garbage_preemptible_on_a_resident_means_protected() -> None:
    obj = pod_object(pod("p").build())
    obj["metadata"]["labels"]["rlix.io/preemptible"] = "perhaps"
    assert pod_to_workload(obj, strict=False).preemptible is False
    with pytest.raises(ObjectError, match="preemptible"):
        pod_to_workload(obj, strict=True)


def test_absent_preemptible_follows_kubernetes_priority_rules() -> None:
    obj = pod_object(pod("p").build())
    del obj["metadata"]["labels"]["rlix.io/preemptible"]
    assert pod_to_workload(obj, strict=True).preemptible is True


def test_priority_from_spec_then_annotation() -> None:
    obj = pod_object(pod("p").priority(5).build())
    obj["metadata"]["annotations"]["rlix.io/priority"] = "9"
    assert pod_to_workload(obj, strict=True).priority == 5
    del obj["spec"]["priority"]
    assert pod_to_workload(obj, strict=True).priority == 9


def test_gpus_count_like_the_scheduler() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
            {"resources": {"requests": {"nvidia.com/gpu": 1}}},
        ],
        "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }
    assert pod_gpus({"spec": spec}) == 4
    spec["initContainers"] = []
    assert pod_gpus({"spec": spec}) == 3
    with pytest.raises(ObjectError, match=r"nvidia\.com/gpu"):
        pod_gpus({"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}})


@pytest.mark.parametrize("bad", [None, 7, {}, {"metadata": {}}, {"metadata": {"name": 3}}])
def test_objects_without_a_name_are_rejected(bad: Any) -> None:
    with pytest.raises(ObjectError):
        pod_to_workload(bad, strict=False)
    with pytest.raises(ObjectError):
        node_from_object(bad)


def test_node_falls_back_to_allocatable_and_survives_bad_labels() -> None:
    obj = {
        "metadata": {"name": "n", "labels": {"nvidia.com/gpu.memory": "lots"},
                     "annotations": {"rlix.io/gpus": "{broken"}},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    }  # fmt: skip
    n = node_from_object(obj)
    assert (n.gpu_count, n.gpu_memory_mib, n.gpus) == (4, 0, ())
