"""The Kubernetes publishing port sends merge patches on metadata only (the real
API server round trip is the cluster tier's job)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rlix.agent.identities import PodIdentity
from rlix.agent.kube_publishing import KubePodDirectory, KubePublisher


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
