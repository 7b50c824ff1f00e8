"""The one reader of Pod and Node facts: the rules every component now shares."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlix.core.objects import ObjectError, read_node, read_pod
from rlix.core.objects.metadata import is_uid
from rlix.core.phases import Phase
from rlix.core.snapshot import GPU, Node, Workload


def pod(**notes: Any) -> dict[str, Any]:
    labels = notes.pop("labels", {"rlix.io/job": "j", "rlix.io/role": "rollout"})
    spec = notes.pop("spec", {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]})
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": labels,
                     "annotations": notes},
        "spec": spec,
    }  # fmt: skip


def test_a_full_pod_reads_as_its_workload() -> None:
    obj = pod(**{
        "rlix.io/gpu-memory-mib": '{"rollout": 100, "Training": "200"}',
        "rlix.io/phase": "rollout", "rlix.io/priority": "7", "rlix.io/gang-size": "4",
        "rlix.io/suspended": "true", "rlix.io/gpu-indices": "3, 5",
    })  # fmt: skip
    obj["metadata"]["labels"]["rlix.io/preemptible"] = "false"
    obj["spec"]["nodeName"] = "n"
    facts = read_pod(obj)
    assert facts.errors == ()
    assert facts.workload == Workload(
        name="ns/p", job="ns/j", role="rollout", gpus=2,
        memory_mib={Phase.ROLLOUT: 100, Phase.TRAINING: 200}, priority=7, preemptible=False,
        phase=Phase.ROLLOUT, node="n", gpu_indices=(3, 5), suspended=True, gang_size=4,
    )  # fmt: skip
    assert facts.uid == "u1" and not facts.finished


def test_one_number_of_mib_means_every_working_phase() -> None:
    memory = read_pod(pod(**{"rlix.io/gpu-memory-mib": "40000"})).workload.memory_mib
    assert memory == {p: 40000 for p in Phase if p is not Phase.IDLE}


def test_absent_preemptible_follows_kubernetes_and_a_bad_one_protects() -> None:
    assert read_pod(pod()).workload.preemptible is True
    bad = pod()
    bad["metadata"]["labels"]["rlix.io/preemptible"] = "perhaps"
    facts = read_pod(bad)
    assert facts.workload.preemptible is False
    assert "rlix.io/preemptible" in str(facts.errors[0])


def test_the_rlix_priority_wins_over_the_kubernetes_priority() -> None:
    # The API server's Priority admission fills spec.priority on every pod (0
    # without a PriorityClass), so "spec.priority when set" would hide the
    # annotation the operator writes from the RLJob's priority.
    obj = pod(**{"rlix.io/priority": "9"})
    obj["spec"]["priority"] = 0
    assert read_pod(obj).workload.priority == 9
    del obj["metadata"]["annotations"]["rlix.io/priority"]
    obj["spec"]["priority"] = 5
    assert read_pod(obj).workload.priority == 5


def test_gpus_count_like_the_scheduler() -> None:
    spec: dict[str, Any] = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "2"}}},
            {"resources": {"requests": {"nvidia.com/gpu": 1}}},
        ],
        "initContainers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    }
    assert read_pod(pod(spec=spec)).workload.gpus == 4
    spec["initContainers"] = []
    assert read_pod(pod(spec=spec)).workload.gpus == 3
    bad = read_pod(pod(spec={"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}))
    assert bad.workload.gpus == 0 and "nvidia.com/gpu" in str(bad.errors[0])


@pytest.mark.parametrize("bad", [None, 7, {}, {"metadata": {}}, {"metadata": {"name": 3}},
                                 {"metadata": {"name": "x" * 254}}])  # fmt: skip
def test_objects_without_a_usable_name_are_refused_whole(bad: Any) -> None:
    with pytest.raises(ObjectError, match=r"metadata\.name|JSON object"):
        read_pod(bad)
    with pytest.raises(ObjectError):
        read_node(bad)


def node(labels: dict[str, str], allocatable: str | None = None, **notes: str) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "n", "labels": labels, "annotations": notes}}
    if allocatable is not None:
        obj["status"] = {"allocatable": {"nvidia.com/gpu": allocatable}}
    return obj


def test_time_sliced_nodes_count_physical_gpus() -> None:
    # GPU feature discovery: 8 GPUs, 4 replicas each; the device plugin offers 32.
    sliced = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "4"}
    assert read_node(node(sliced, "32")).node.gpu_count == 8
    # Without the count label, allocatable is divided by the replicas.
    assert read_node(node({"nvidia.com/gpu.replicas": "4"}, "32")).node.gpu_count == 8
    assert read_node(node({}, "4")).node.gpu_count == 4


def test_a_node_reads_whole_and_bad_labels_degrade_alone() -> None:
    good = read_node(node(
        {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "1000",
         "nvidia.com/gpu.product": "H200", "rlix.io/nvlink-domain": "rack"},
        **{"rlix.io/gpus": '[{"index": 0, "memoryMiB": 1000, "usedMiB": 10, "utilization": 0.5}]'},
    ))  # fmt: skip
    assert good.errors == ()
    assert dataclasses.replace(good.node, labels=()) == Node(
        name="n", gpu_count=2, gpu_memory_mib=1000, product="H200", nvlink_domain="rack",
        gpus=(GPU(index=0, memory_mib=1000, used_mib=10, utilization=0.5),),
    )  # fmt: skip
    bad = read_node(node({"nvidia.com/gpu.memory": "lots"}, "4", **{"rlix.io/gpus": "{broken"}))
    assert (bad.node.gpu_count, bad.node.gpu_memory_mib, bad.node.gpus) == (4, 0, ())
    assert [e.where for e in bad.errors] == [
        "label nvidia.com/gpu.memory",
        "annotation rlix.io/gpus",
    ]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=10,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([
    "rlix.io/gpu-memory-mib", "rlix.io/priority", "rlix.io/gang-size", "rlix.io/phase",
    "rlix.io/suspended", "rlix.io/gpu-indices", "rlix.io/admitted-node", "rlix.io/preemptible",
    "rlix.io/job", "rlix.io/gpus", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
]), json_values | st.text()), json_values)  # fmt: skip
def test_any_values_give_a_reading_never_another_exception(
    values: dict[str, Any], spec: Any
) -> None:
    obj = {"metadata": {"name": "x", "labels": values, "annotations": values}, "spec": spec,
           "status": values}  # fmt: skip
    for facts in (read_pod(obj), read_node(obj)):
        for error in facts.errors:
            assert isinstance(error, ObjectError) and error.where


def test_node_reader_keeps_labels_and_the_taints_that_keep_pods_off() -> None:
    from rlix.core.objects.nodes import read_node
    from rlix.core.snapshot import Taint

    body = {
        "metadata": {"name": "n1", "labels": {"pool": "a", "bad": 7}},
        "spec": {
            "taints": [
                {"key": "gpu", "value": "x", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": 5, "effect": "NoExecute"},
                "junk",
            ]
        },
    }
    node = read_node(body).node
    assert node.labels == (("pool", "a"),)
    assert node.taints == (Taint("gpu", "x", "NoSchedule"),)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("0b3c2a9e-1111-4c1e-9a55-7f1f00000001", True),  # what the API server gives
        ("0B3C2A9E-1111-4C1E-9A55-7F1F00000001", False),  # never generated uppercase
        ("0b3c2a9e\n", False),  # a line end is not part of a file name
        ("../../etc/passwd", False),
        ("", False),
        ("a" * 65, False),
    ],
)
def test_a_uid_is_what_the_api_server_gives_and_nothing_that_names_another_path(
    text: str, ok: bool
) -> None:
    assert is_uid(text) is ok
