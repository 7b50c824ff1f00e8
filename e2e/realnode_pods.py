"""Pods for the real node: our own image, never pulled, tolerating the node's taint."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlix.core import names
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster


def real_pod(node: realnode.RealNode, name: str, command: list[str]) -> dict[str, Any]:
    """A pod that runs ``command`` in the node image on the real node, once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {realnode.NODE_LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": node.node_image,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
        },
    }


@contextmanager
def advertised_gpus(cluster: DevCluster, *, gpus: int, memory_mib: int) -> Iterator[None]:
    """The real node advertises ``gpus`` simulated GPUs, then stops.

    What NVIDIA's device plugin (``nvidia.com/gpu`` capacity, which the
    kube-scheduler counts) and GPU feature discovery (the labels the extender
    and the operator read) publish on a GPU node; the node has no GPU, so
    nothing else would. Taken back afterwards, so that the session's later
    tests see the node as it was.
    """
    node = realnode.NODE_NAME
    labels = {
        names.NODE_LABEL_GPU_PRESENT: "true",
        names.NODE_LABEL_GPU_PRODUCT: "NVIDIA-H200-simulated",
        names.NODE_LABEL_GPU_MEMORY_MIB: str(memory_mib),
        names.NODE_LABEL_GPU_COUNT: str(gpus),
    }
    capacity = names.GPU_RESOURCE
    cluster.kubectl("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"capacity": {capacity: str(gpus)}}}),
    )  # fmt: skip
    try:
        yield
    finally:
        cluster.kubectl("label", "node", node, *(f"{k}-" for k in labels), check=False)
        cluster.kubectl(
            "patch", "node", node, "--subresource=status", "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"}]),
            check=False,
        )  # fmt: skip
        cluster.kubectl("annotate", "node", node, f"{names.ANNOTATION_NODE_GPUS}-", check=False)


def helm(
    cluster: DevCluster,
    *args: str,
    input: str | None = None,
    timeout_s: float = 120,
    binary: str = "helm",
) -> str:
    """The toolchain's helm (``binary``: helm, helm3 or helm4) on the cluster; its stdout.

    Raises with helm's stderr on failure.
    """
    try:
        result = subprocess.run(
            [str(cluster.bin_dir / binary), "--kubeconfig", str(cluster.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"helm {' '.join(args[:2])} ran past {timeout_s}s") from exc
    if result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args[:2])} failed: {result.stderr}")
    return result.stdout
