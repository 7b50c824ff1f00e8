"""The local control plane is real: version, nodes, CRDs, both schedulers, GC.

These are the foundation every other real-cluster test stands on: a real
kube-apiserver serving CRDs, the real kube-scheduler calling an extender over
HTTP and obeying it, kube-controller-manager garbage-collecting, and kwok nodes
that look like NVIDIA GPU nodes.
"""

from __future__ import annotations

import json
from typing import Any

from e2e.extender_stand import ExtenderStand
from e2e.kube import apply, events_for, get_json, pod, pod_phase_and_node, wait_for
from rlix.core import names
from rlix.devcluster.cluster import DevCluster, wait_established
from rlix.devcluster.toolchain import versions


def _running(cluster: Any, namespace: str, name: str) -> str | None:
    phase, node = pod_phase_and_node(cluster, namespace, name)
    return node if phase == "Running" else None


def test_server_is_the_pinned_kubernetes(cluster: Any) -> None:
    """hack/versions.env is what runs: the server and our kubectl are that release."""
    pinned = versions()["K8S_VERSION"]
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == f"v{pinned}", version
    assert version["serverVersion"]["minor"] == pinned.split(".")[1]
    assert version["clientVersion"]["gitVersion"] == f"v{pinned}", version


def test_fake_gpu_nodes_follow_nvidia_conventions(local_cluster: DevCluster) -> None:
    wide = local_cluster.kubectl("get", "nodes", "-o", "wide").stdout
    nodes = get_json(local_cluster, "nodes", "-l", "type=kwok")["items"]
    assert len(nodes) == local_cluster.options.nodes
    for node in nodes:
        name = node["metadata"]["name"]
        assert name in wide
        assert node["status"]["allocatable"][names.GPU_RESOURCE] == "8"
        labels = node["metadata"]["labels"]
        assert labels[names.NODE_LABEL_GPU_COUNT] == "8"
        assert labels[names.NODE_LABEL_GPU_MEMORY_MIB] == "81920"
        assert labels[names.NODE_LABEL_GPU_PRODUCT].startswith("NVIDIA-")
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True"


def test_a_crd_is_applied_and_served(cluster: Any, namespace: str) -> None:
    group = "e2e.rlix.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    apply(cluster, namespace, crd)
    wait_established(cluster.kubectl, f"widgets.{group}")
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}}
    apply(cluster, namespace, {**widget, "spec": {"size": 3}})
    assert get_json(cluster, "widget", "w", "-n", namespace)["spec"]["size"] == 3
    # The schema is enforced by the real API server, not by us.
    bad = cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps({**widget, "spec": {"size": 0}}),
        check=False,
    )
    assert bad.returncode != 0 and "spec.size" in bad.stderr
    cluster.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


def test_default_scheduler_is_untouched(local_cluster: DevCluster, namespace: str) -> None:
    with ExtenderStand(local_cluster.extender_port) as stand:
        apply(local_cluster, namespace, pod("plain", gpus=1))
        node = wait_for(
            "default-scheduled pod to run", lambda: _running(local_cluster, namespace, "plain")
        )
        assert node.startswith("rlix-gpu-")
        assert stand.verbs_seen("plain") == set(), "default scheduler must not call the extender"


def test_rlix_scheduler_binds_gpu_pod_through_extender(
    local_cluster: DevCluster, namespace: str
) -> None:
    with ExtenderStand(local_cluster.extender_port) as stand:
        apply(local_cluster, namespace, pod("gpu", gpus=4, scheduler=names.SCHEDULER_NAME))
        node = wait_for(
            "rlix-scheduler pod to run", lambda: _running(local_cluster, namespace, "gpu")
        )
        assert node.startswith("rlix-gpu-")
        assert "filter" in stand.verbs_seen("gpu")
        obj = get_json(local_cluster, "pod", "gpu", "-n", namespace)
        assert obj["spec"]["schedulerName"] == names.SCHEDULER_NAME


def test_scheduler_obeys_extender_filter(local_cluster: DevCluster, namespace: str) -> None:
    with ExtenderStand(local_cluster.extender_port) as stand:
        stand.rule = lambda pod, nodes: {
            n: "test: only rlix-gpu-2" for n in nodes if n != "rlix-gpu-2"
        }
        for i in range(3):
            apply(
                local_cluster, namespace, pod(f"only2-{i}", gpus=1, scheduler=names.SCHEDULER_NAME)
            )
        for i in range(3):
            node = wait_for(
                "pod on the allowed node",
                lambda i=i: _running(local_cluster, namespace, f"only2-{i}"),
            )
            assert node == "rlix-gpu-2"


def test_extender_rejection_reason_is_readable(local_cluster: DevCluster, namespace: str) -> None:
    reason = "rlix test stand: no GPU has 90000 MiB free"
    with ExtenderStand(local_cluster.extender_port) as stand:
        stand.rule = lambda pod, nodes: dict.fromkeys(nodes, reason)
        apply(local_cluster, namespace, pod("nofit", gpus=1, scheduler=names.SCHEDULER_NAME))

        def failed_event() -> str | None:
            for ev in events_for(local_cluster, namespace, "nofit"):
                if ev["reason"] == "FailedScheduling" and reason in ev["message"]:
                    return str(ev["message"])
            return None

        message = wait_for("FailedScheduling event with the extender's reason", failed_event)
        assert "0/" in message  # "0/4 nodes are available: ..."
        phase, node = pod_phase_and_node(local_cluster, namespace, "nofit")
        assert (phase, node) == ("Pending", "")
        described = local_cluster.kubectl("describe", "pod", "nofit", "-n", namespace).stdout
        assert reason in described


def test_garbage_collector_removes_owned_pods(cluster: Any, namespace: str) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": pod("x")["spec"],
            },
        },
    }
    apply(cluster, namespace, deployment)
    cluster.kubectl("rollout", "status", "deployment/web", "-n", namespace, "--timeout=90s")

    def pods() -> list[Any]:
        return list(get_json(cluster, "pods", "-n", namespace, "-l", "app=web")["items"])

    assert len(pods()) == 2
    cluster.kubectl("delete", "deployment", "web", "-n", namespace, "--cascade=background")
    wait_for("owned pods to be garbage-collected", lambda: not pods() or None, timeout_s=90)

    # A plain ownerReference (no controller involved) is honoured as well.
    owner = get_json(
        cluster, "configmap", "-n", namespace, "--field-selector", "metadata.name=kube-root-ca.crt"
    )
    assert owner["items"], "namespace has its root CA config map"
    apply(
        cluster, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    )
    uid = get_json(cluster, "configmap", "owner", "-n", namespace)["metadata"]["uid"]
    child = pod("child")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    ]
    apply(cluster, namespace, child)
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(
        "pod owned by a deleted config map to go",
        lambda: (
            not get_json(
                cluster, "pods", "-n", namespace, "--field-selector", "metadata.name=child"
            )["items"]
            or None
        ),
        timeout_s=90,
    )


def test_daemonset_runs_on_every_gpu_node(local_cluster: DevCluster, namespace: str) -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    **pod("x")["spec"],
                    "nodeSelector": {names.NODE_LABEL_GPU_COUNT: "8"},
                },
            },
        },
    }
    apply(local_cluster, namespace, ds)
    local_cluster.kubectl("rollout", "status", "daemonset/agent", "-n", namespace, "--timeout=90s")
    status = get_json(local_cluster, "daemonset", "agent", "-n", namespace)["status"]
    assert status["numberReady"] == local_cluster.options.nodes
