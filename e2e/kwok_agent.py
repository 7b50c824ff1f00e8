"""A node agent process for one of the session's kwok nodes, against the real API server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e.kube import get_json
from rlix.core import names
from rlix.core.suspension import ANNOTATION_AGENT_HEARTBEAT
from tests.support.agent_fakes import AgentProcess


@contextmanager
def agent_on_kwok_node(
    cluster: Any, root: Path, *, metrics_port: int = 0, extra_args: tuple[str, ...] = ()
) -> Iterator[AgentProcess]:
    """The agent (simulated GPUs as the node's labels say) on the first kwok
    node; killed afterwards, and its node annotations taken back, since the
    session's other tests place on that node."""
    node = get_json(cluster, "nodes", "-l", "type=kwok")["items"][0]
    labels = node["metadata"]["labels"]
    started = AgentProcess(
        root,
        node=node["metadata"]["name"],
        kubeconfig=Path(cluster.kubeconfig),
        sim_gpus=int(labels[names.NODE_LABEL_GPU_COUNT]),
        sim_gpu_memory_mib=int(labels[names.NODE_LABEL_GPU_MEMORY_MIB]),
        metrics_port=metrics_port,
        extra_args=extra_args,
    ).start()
    try:
        yield started
    finally:
        started.kill()
        cluster.kubectl(
            "annotate", "node", started.node,
            f"{names.ANNOTATION_NODE_GPUS}-", f"{ANNOTATION_AGENT_HEARTBEAT}-", check=False,
        )  # fmt: skip
