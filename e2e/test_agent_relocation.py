"""The node agent against the real API server: a trainer process stands in for a
pod's container, and relocation shows up on the real Pod object.

Only the proc tree that maps the trainer's PID to the pod's UID is the
harness's (there is no container runtime under kwok); the pod, its UID, the
agent's pod lookup and every annotation go through kube-apiserver.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import apply, get_json, pod, wait_for
from rlix.agent.testing import AgentProcess
from rlix.cli.main import main as rlix
from rlix.core.names import ANNOTATION_NODE_GPUS, ANNOTATION_PHASE, ANNOTATION_SUSPENDED
from rlix.devcluster.cluster import DevCluster, ExistingCluster
from tests.components.pod_processes import Trainer, wait_connected

pytest.importorskip("torch")

Cluster = DevCluster | ExistingCluster


def gpu_node(cluster: Cluster) -> str:
    nodes = get_json(cluster, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    assert nodes, "the cluster has no GPU node"
    return str(nodes[0]["metadata"]["name"])


def annotations(cluster: Cluster, *args: str) -> dict[str, Any]:
    return dict(get_json(cluster, *args)["metadata"].get("annotations") or {})


@pytest.fixture
def placed_pod(cluster: Cluster, namespace: str) -> Iterator[tuple[str, str, str]]:
    """A pod bound to a GPU node: (name, uid, node)."""
    node = gpu_node(cluster)
    body = pod("rollout-0")
    body["spec"]["nodeName"] = node  # placed directly: this test is about the agent
    apply(cluster, namespace, body)
    obj = get_json(cluster, "pod", "rollout-0", "-n", namespace)
    yield "rollout-0", str(obj["metadata"]["uid"]), node


def test_relocation_through_the_cli_is_visible_on_the_real_pod(
    cluster: Cluster, namespace: str, placed_pod: tuple[str, str, str], tmp_path: Path
) -> None:
    name, uid, node = placed_pod
    key = f"{namespace}/{name}"
    agent = AgentProcess(tmp_path, node=node, kubeconfig=Path(cluster.kubeconfig))
    with agent:
        trainer = Trainer(agent, uid)
        try:
            wait_connected(agent, trainer.proc.pid, uid=uid)
            before = trainer.ready["digest"]
            assert trainer.ask("phase rollout")["event"] == "in-phase"
            wait_for(
                "the phase annotation on the pod",
                lambda: (
                    annotations(cluster, "pod", name, "-n", namespace).get(ANNOTATION_PHASE)
                    == "rollout"
                ),
            )
            assert ANNOTATION_NODE_GPUS in annotations(cluster, "node", node)

            sock = f"--socket={agent.socket}"
            assert rlix(["agent", sock, "suspend", key, "--target", "host"]) == 0
            wait_for(
                "rlix.io/suspended on the pod",
                lambda: (
                    annotations(cluster, "pod", name, "-n", namespace).get(ANNOTATION_SUSPENDED)
                    == "true"
                ),
            )
            assert trainer.ask("live")["live"] == 0
            assert (agent.park_dir / uid / f"{trainer.proc.pid}.park").exists()

            assert rlix(["agent", sock, "resume", key]) == 0
            wait_for(
                "rlix.io/suspended cleared",
                lambda: (
                    ANNOTATION_SUSPENDED not in annotations(cluster, "pod", name, "-n", namespace)
                ),
            )
            assert trainer.ask("digest")["digest"] == before
        finally:
            trainer.close()
