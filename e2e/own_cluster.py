"""A control plane of a module's own, with one GPU node and no device plugin.

For the tests whose node must be driven by RLix's DRA devices (so the session's
whole-GPU nodes keep their meaning for every other test). Named under the e2e
prefix, so a session killed before its teardown is reaped by the next.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e.kube import get_json, wait_for
from rlix.core import names
from rlix.devcluster import manifests, processes
from rlix.devcluster.cluster import ClusterOptions, DevCluster, default_workdir
from rlix.devcluster.toolchain import bin_dir
from tests.support.agent_fakes import AgentProcess


@contextmanager
def gpu_node_cluster(tag: str, node: str, *, gpus: int, gpu_mib: int) -> Iterator[DevCluster]:
    """``rlix-e2e-<tag>-<pid>`` up with ``node`` Ready; torn down after."""
    options = ClusterOptions(
        name=f"rlix-e2e-{tag}-{os.getpid()}",
        nodes=0,
        extender_port=processes.free_port(),
        workdir=default_workdir(),
    )
    cluster = DevCluster(options, bin_dir())
    try:
        cluster.up()
        spec = manifests.GPUNodeSpec(
            name=node, gpus=gpus, gpu_memory_mib=gpu_mib, device_plugin=False
        )
        cluster.apply([manifests.gpu_node(spec)])
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=120s")
        yield cluster
    finally:
        cluster.down()


@contextmanager
def dra_agent_cluster(
    tag: str,
    node: str,
    root: Path,
    *,
    gpus: int,
    gpu_mib: int,
    ready: tuple[str, str],
    extra_args: tuple[str, ...] = (),
) -> Iterator[tuple[DevCluster, AgentProcess]]:
    """``gpu_node_cluster`` whose GPUs reach the scheduler only as the
    ``gpu.rlix.io`` ResourceSlice a real node agent (simulated backend, state
    under ``root``) publishes; yielded once the agent has written the node
    annotation ``ready`` (key, value)."""
    key, value = ready
    with gpu_node_cluster(tag, node, gpus=gpus, gpu_mib=gpu_mib) as cluster:
        agent = AgentProcess(
            root,
            node=node,
            kubeconfig=Path(cluster.kubeconfig),
            sim_gpus=gpus,
            sim_gpu_memory_mib=gpu_mib,
            dra=True,
            extra_args=extra_args,
        ).start()
        try:
            wait_for(
                f"{node} annotated {key}={value} by its agent",
                lambda: (
                    (get_json(cluster, "node", node)["metadata"].get("annotations") or {}).get(key)
                    == value
                ),
            )
            yield cluster, agent
        finally:
            agent.kill()


@contextmanager
def claims_agent_cluster(
    tag: str, node: str, root: Path, *, gpus: int, gpu_mib: int
) -> Iterator[DevCluster]:
    """``dra_agent_cluster`` once the agent says the node's GPUs are DRA claims."""
    ready = (names.ANNOTATION_NODE_GPU_CLAIMS, "true")
    with dra_agent_cluster(tag, node, root, gpus=gpus, gpu_mib=gpu_mib, ready=ready) as (
        cluster,
        _,
    ):
        yield cluster


@contextmanager
def headroom_agent_cluster(
    tag: str, node: str, root: Path, *, gpus: int, gpu_mib: int, overcommit: str
) -> Iterator[tuple[DevCluster, AgentProcess]]:
    """``dra_agent_cluster`` whose agent publishes ``overcommit`` x physical
    memory (headroom for parked memory), once the node says so."""
    with dra_agent_cluster(
        tag,
        node,
        root,
        gpus=gpus,
        gpu_mib=gpu_mib,
        ready=(names.ANNOTATION_NODE_MEMORY_OVERCOMMIT, overcommit),
        extra_args=(f"--memory-overcommit={overcommit}",),
    ) as both:
        yield both
