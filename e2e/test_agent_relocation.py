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
from prometheus_client.parser import text_string_to_metric_families

from e2e.kube import apply, get_json, pod, wait_for
from rlix.cli.main import main as rlix
from rlix.core.names import (
    ANNOTATION_NODE_GPUS,
    ANNOTATION_PHASE,
    ANNOTATION_SUSPENDED,
    NODE_LABEL_GPU_COUNT,
    NODE_LABEL_GPU_MEMORY_MIB,
)
from rlix.devcluster.cluster import DevCluster, ExistingCluster
from rlix.devcluster.processes import free_ports
from tests.components.pod_processes import Trainer, wait_connected
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")

Cluster = DevCluster | ExistingCluster


def gpu_node(cluster: Cluster) -> dict[str, Any]:
    """The last GPU node: the session's other tests place on the first ones."""
    nodes = get_json(cluster, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    assert nodes, "the cluster has no GPU node"
    return dict(sorted(nodes, key=lambda n: n["metadata"]["name"])[-1])


def annotations(cluster: Cluster, *args: str) -> dict[str, Any]:
    return dict(get_json(cluster, *args)["metadata"].get("annotations") or {})


@pytest.fixture
def placed_pod(cluster: Cluster, namespace: str) -> Iterator[tuple[str, str, str]]:
    """A pod bound to a GPU node: (name, uid, node)."""
    node = gpu_node(cluster)
    name = str(node["metadata"]["name"])
    body = pod("rollout-0")
    body["spec"]["nodeName"] = name  # placed directly: this test is about the agent
    apply(cluster, namespace, body)
    obj = get_json(cluster, "pod", "rollout-0", "-n", namespace)
    yield "rollout-0", str(obj["metadata"]["uid"]), name


@pytest.fixture
def node_agent(
    cluster: Cluster, placed_pod: tuple[str, str, str], tmp_path: Path
) -> Iterator[AgentProcess]:
    """A kube-mode agent whose simulated GPUs are the node's, and which leaves the
    node as it found it: the extender reads rlix.io/gpus, and the session's
    other tests place pods on these nodes."""
    node = get_json(cluster, "node", placed_pod[2])
    labels = node["metadata"]["labels"]
    agent = AgentProcess(
        tmp_path,
        node=placed_pod[2],
        kubeconfig=Path(cluster.kubeconfig),
        sim_gpus=int(labels[NODE_LABEL_GPU_COUNT]),
        sim_gpu_memory_mib=int(labels[NODE_LABEL_GPU_MEMORY_MIB]),
        metrics_port=free_ports(1)[0],
    )
    try:
        with agent:
            yield agent
    finally:
        cluster.kubectl("annotate", "node", placed_pod[2], f"{ANNOTATION_NODE_GPUS}-")


def test_relocation_through_the_cli_is_visible_on_the_real_pod(
    cluster: Cluster, namespace: str, placed_pod: tuple[str, str, str], node_agent: AgentProcess
) -> None:
    name, uid, node = placed_pod
    key = f"{namespace}/{name}"
    sock = f"--socket={node_agent.socket}"

    def pod_annotations() -> dict[str, Any]:
        return annotations(cluster, "pod", name, "-n", namespace)

    trainer = Trainer(node_agent, uid)
    try:
        wait_connected(node_agent, trainer.proc.pid, uid=uid)
        before = trainer.ready["digest"]
        assert trainer.ask("phase rollout")["event"] == "in-phase"
        wait_for(
            "the phase annotation on the pod",
            lambda: pod_annotations().get(ANNOTATION_PHASE) == "rollout",
        )
        assert ANNOTATION_NODE_GPUS in annotations(cluster, "node", node)

        assert rlix(["agent", sock, "suspend", key, "--target", "host"]) == 0
        wait_for(
            "rlix.io/suspended on the pod",
            lambda: pod_annotations().get(ANNOTATION_SUSPENDED) == "true",
        )
        assert trainer.ask("live")["live"] == 0
        assert (node_agent.park_dir / uid / f"{trainer.proc.pid}.park").exists()

        assert rlix(["agent", sock, "resume", key]) == 0
        wait_for(
            "rlix.io/suspended cleared",
            lambda: ANNOTATION_SUSPENDED not in pod_annotations(),
        )
        assert trainer.ask("digest")["digest"] == before
    finally:
        trainer.close()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one series ``name`` with these labels on a /metrics page."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def _scrape_once(agent: AgentProcess, series: str, pod: dict[str, str], phase: str) -> str | None:
    """The agent's /metrics text once ``series`` is 1 for ``pod`` in ``phase``, else None."""
    text = agent.metrics()
    return text if sample(text, series, **pod, phase=phase) == 1.0 else None


def test_agent_metrics_follow_phases_suspensions_and_parked_bytes(
    cluster: Cluster, namespace: str, placed_pod: tuple[str, str, str], node_agent: AgentProcess
) -> None:
    """Scraped from the agent's /metrics while a real pod's trainer works through it."""
    name, uid, node = placed_pod
    key, sock = f"{namespace}/{name}", f"--socket={node_agent.socket}"
    pod = {"node": node, "namespace": namespace, "pod": name}
    labels = get_json(cluster, "node", node)["metadata"]["labels"]
    first = node_agent.metrics()
    total = sample(first, "rlix_agent_gpu_memory_total_bytes", node=node, gpu="0")
    assert total == int(labels[NODE_LABEL_GPU_MEMORY_MIB]) * 2**20
    assert sample(first, "rlix_agent_gpu_idle", node=node, gpu="0") == 1.0
    assert sample(first, "rlix_agent_pod_phase", **pod, phase="rollout") is None

    trainer = Trainer(node_agent, uid)
    try:
        wait_connected(node_agent, trainer.proc.pid, uid=uid)
        assert trainer.ask("phase rollout")["event"] == "in-phase"
        # The client reports a phase without waiting for the agent to record it
        # (a phase switch must not block training), so the series follows shortly.
        rollout = wait_for(
            "the rollout phase in the agent's metrics",
            lambda: _scrape_once(node_agent, "rlix_agent_pod_phase", pod, "rollout"),
        )
        assert sample(rollout, "rlix_agent_suspensions_total", reason="preemption") is None

        args = ["--reason", "preemption"]
        assert rlix(["agent", sock, "suspend", key, "--target", "host", *args]) == 0
        parked = node_agent.metrics()
        ok = {"node": node, "reason": "preemption"}
        assert (
            sample(parked, "rlix_agent_suspensions_total", **ok, outcome="ok", target="host") == 1
        )
        assert sample(parked, "rlix_agent_suspend_seconds_count", **ok, target="host") == 1
        held = sample(parked, "rlix_agent_parked_bytes", **pod, place="host")
        assert held is not None and held > 0
        # A second suspend of a suspended pod is refused, and counted as failed.
        assert rlix(["agent", sock, "suspend", key, *args]) != 0
        failed = sample(
            node_agent.metrics(), "rlix_agent_suspensions_total", **ok, outcome="failed"
        )
        assert failed == 1

        assert rlix(["agent", sock, "resume", key, *args]) == 0
        resumed = node_agent.metrics()
        assert sample(resumed, "rlix_agent_resumes_total", **ok, outcome="ok") == 1
        assert sample(resumed, "rlix_agent_resume_seconds_count", **ok) == 1
        assert sample(resumed, "rlix_agent_parked_bytes", **pod) is None

        assert trainer.ask("phase training")["event"] == "in-phase"
        training = wait_for(
            "the training phase in the agent's metrics",
            lambda: _scrape_once(node_agent, "rlix_agent_pod_phase", pod, "training"),
        )
        assert sample(training, "rlix_agent_pod_phase", **pod, phase="rollout") is None
        spent = sample(training, "rlix_agent_pod_phase_seconds_total", **pod, phase="rollout")
        assert spent is not None and spent > 0
    finally:
        trainer.close()
