"""The Kubernetes publishing port sends merge patches on metadata only (the real
API server round trip is the cluster tier's job)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rlix.agent.identities import PodIdentity
from rlix.agent.kube_publishing import KubePodDirectory, KubePublisher
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.publishing import ObjectGoneError


class _Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.pods: list[Any] = []

    def patch_node(self, *args: Any, **kw: Any) -> None:
        self.calls.append(("patch_node", args, kw))

    def patch_namespaced_pod(self, *args: Any, **kw: Any) -> None:
        self.calls.append(("patch_namespaced_pod", args, kw))

    def list_pod_for_all_namespaces(self, **kw: Any) -> Any:
        self.calls.append(("list", (), kw))
        return SimpleNamespace(items=self.pods)


def _pod(uid: str, ns: str, name: str) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(uid=uid, namespace=ns, name=name))


def test_patches_are_metadata_merge_patches_and_none_deletes() -> None:
    api = _Api()
    pub = KubePublisher(api)
    pub.patch_node_annotations(node="n1", annotations={"rlix.io/gpus": "[]"})
    pub.patch_pod_annotations(namespace="ns", name="p", annotations={"rlix.io/suspended": None})
    assert api.calls == [
        ("patch_node", ("n1", {"metadata": {"annotations": {"rlix.io/gpus": "[]"}}}), {}),
        (
            "patch_namespaced_pod",
            ("p", "ns", {"metadata": {"annotations": {"rlix.io/suspended": None}}}),
            {},
        ),
    ]


def test_directory_lists_this_nodes_pods_only_on_a_miss() -> None:
    api = _Api()
    api.pods = [_pod("u1", "ns", "a")]
    directory = KubePodDirectory(api, node="n1")
    assert directory("u1") == PodIdentity("u1", "ns", "a")
    assert directory("u1") == PodIdentity("u1", "ns", "a")  # cached
    assert directory("u2") is None  # a miss lists again
    lists = [c for c in api.calls if c[0] == "list"]
    assert len(lists) == 2
    assert lists[0][2] == {"field_selector": "spec.nodeName=n1"}


class _GoneError(Exception):
    """What kubernetes.client.ApiException looks like for a deleted object."""

    status = 404


class _DeletedPods(_Api):
    def patch_namespaced_pod(self, *args: Any, **kw: Any) -> None:
        self.calls.append(("patch_namespaced_pod", args, kw))
        raise _GoneError("pods 'p' not found")


def test_a_deleted_pod_ends_the_retries_for_its_annotations() -> None:
    """Issue 18.6: a 404 is final; the publisher does not retry it every second."""
    api = _DeletedPods()
    with pytest.raises(ObjectGoneError, match="pod ns/p not found"):
        KubePublisher(api).patch_pod_annotations(namespace="ns", name="p", annotations={})
    publisher = BackgroundPublisher(KubePublisher(api), retry_s=0.01)
    try:
        publisher.pod("ns", "p", {"rlix.io/phase": "rollout"})
        publisher.node("n1", {"rlix.io/gpus": "[]"})
        assert publisher.flush(timeout=10)  # nothing left pending: dropped, not retried
    finally:
        publisher.stop()
    pod_patches = [c for c in api.calls if c[0] == "patch_namespaced_pod"]
    assert len(pod_patches) == 2  # the direct call above, and one from the publisher
    assert ("patch_node", ("n1", {"metadata": {"annotations": {"rlix.io/gpus": "[]"}}}), {}) in (
        api.calls
    )
