"""The agent's annotation publisher against the real API server: a deleted pod ends retries.

Issue 18.6: after a pod was deleted the agent retried its annotation patch
(404) every second without end. The component tests prove the rule with a
404 they raise themselves; here the 404 is the API server's own answer to a
patch of a pod that was really deleted. The publisher and its Kubernetes port
are the agent's own; only a thin counter sits between them, to see how often
the API server was asked.
"""

from __future__ import annotations

from typing import Any

from e2e.kube import apply, get_json, pod
from rlix.agent.kube_publishing import KubePublisher, core_v1_api
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.publishing import Annotations
from rlix.core.names import ANNOTATION_PHASE


class Counted:
    """The real port, counting the patches it sends per pod."""

    def __init__(self, port: KubePublisher) -> None:
        self.port = port
        self.pod_patches: dict[str, int] = {}

    def patch_node_annotations(self, *, node: str, annotations: Annotations) -> None:
        self.port.patch_node_annotations(node=node, annotations=annotations)

    def patch_pod_annotations(self, *, namespace: str, name: str, annotations: Annotations) -> None:
        key = f"{namespace}/{name}"
        self.pod_patches[key] = self.pod_patches.get(key, 0) + 1
        self.port.patch_pod_annotations(namespace=namespace, name=name, annotations=annotations)


def test_a_patch_of_a_deleted_pod_is_dropped_not_retried(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, pod("worker"))
    port = Counted(KubePublisher(core_v1_api(str(cluster.kubeconfig))))
    # A short retry period: a retried patch would show many times over.
    publisher = BackgroundPublisher(port, retry_s=0.05)
    key = f"{namespace}/worker"
    try:
        publisher.pod(namespace, "worker", {ANNOTATION_PHASE: "rollout"})
        assert publisher.flush(timeout=30)
        notes = get_json(cluster, "pod", "worker", "-n", namespace)["metadata"]["annotations"]
        assert notes[ANNOTATION_PHASE] == "rollout"
        assert port.pod_patches[key] == 1

        cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--grace-period=0", "--force")
        gone = cluster.kubectl("get", "pod", "worker", "-n", namespace, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stderr
        publisher.pod(namespace, "worker", {ANNOTATION_PHASE: "training"})
        # flush() returns only once nothing is pending or in flight: a 404
        # put back for a retry would keep it pending, and it would time out.
        assert publisher.flush(timeout=30), f"still retrying: {port.pod_patches[key]} patches"
        assert port.pod_patches[key] == 2  # the one patch the API server answered 404

        # The publisher is still alive for everything else.
        apply(cluster, namespace, pod("other"))
        publisher.pod(namespace, "other", {ANNOTATION_PHASE: "training"})
        assert publisher.flush(timeout=30)
        notes = get_json(cluster, "pod", "other", "-n", namespace)["metadata"]["annotations"]
        assert notes[ANNOTATION_PHASE] == "training"
        assert port.pod_patches[key] == 2
    finally:
        publisher.stop()
