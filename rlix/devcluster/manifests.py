"""Pure builders for the objects a local RLix cluster needs.

Kept apart from process management so tests can check them without a cluster
and so `rlix cluster up` and the e2e fixture build byte-identical objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlix.core import dra, names

# kwok's controller only manages nodes carrying this annotation (kwokctl starts it
# with --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


# Consumable capacity (KEP-5075: several claims share one device's memory) is
# alpha behind this gate in 1.34-1.35 and on by default from 1.36; every
# control-plane component that validates or allocates claims needs it. A gate
# that went GA is still accepted (locked on) for several releases.
FEATURE_GATES = "DRAConsumableCapacity=true"


def bootstrap_objects() -> list[dict[str, Any]]:
    """Cluster-wide objects RLix needs beside its nodes: the gpu.rlix.io DeviceClass."""
    return [dra.device_class()]


@dataclass(frozen=True, slots=True)
class GPUNodeSpec:
    """What one fake GPU node looks like to the scheduler."""

    name: str
    gpus: int = 8
    gpu_memory_mib: int = 81920
    product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "96"
    memory: str = "1Ti"
    pods: int = 110
    # False: no nvidia.com/gpu (no device plugin); the GPUs reach the scheduler
    # only as DRA devices a node agent publishes.
    device_plugin: bool = True


def gpu_node(spec: GPUNodeSpec) -> dict[str, Any]:
    """A kwok-managed Node that advertises GPUs the way NVIDIA's device plugin does."""
    capacity = {
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": str(spec.pods),
    }
    if spec.device_plugin:
        capacity[names.GPU_RESOURCE] = str(spec.gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": spec.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
                "type": "kwok",
                names.NODE_LABEL_GPU_PRODUCT: spec.product,
                names.NODE_LABEL_GPU_MEMORY_MIB: str(spec.gpu_memory_mib),
                names.NODE_LABEL_GPU_COUNT: str(spec.gpus),
                names.NODE_LABEL_GPU_PRESENT: "true" if spec.gpus > 0 else "false",
            },
        },
        "spec": {},
        "status": {
            "allocatable": dict(capacity),
            "capacity": dict(capacity),
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
            },
        },
    }


def gpu_nodes(
    count: int, *, prefix: str = "rlix-gpu", gpus: int = 8, gpu_memory_mib: int = 81920
) -> list[dict[str, Any]]:
    """``count`` identical GPU nodes named ``<prefix>-0`` .. ``<prefix>-<count-1>``."""
    if count < 0 or gpus < 0 or gpu_memory_mib <= 0:
        raise ValueError("node count and GPUs must be >= 0 and GPU memory > 0")
    return [
        gpu_node(GPUNodeSpec(name=f"{prefix}-{i}", gpus=gpus, gpu_memory_mib=gpu_memory_mib))
        for i in range(count)
    ]


def rlix_scheduler_config(*, kubeconfig: str, extender_url: str) -> dict[str, Any]:
    """KubeSchedulerConfiguration for the second scheduler, profile ``rlix-scheduler``.

    Extenders are global to a kube-scheduler process, not per profile, so the
    extender goes into a scheduler process of its own; the default scheduler
    stays untouched. nodeCacheCapable sends node names only (with full Node
    objects a known regression makes resource-fit scoring see every node idle,
    kubernetes#141781), and a filter error fails the attempt (ignorable: false),
    so pods wait rather than land where the policy never looked. No prioritize
    verb: the filter passes on only the nodes RLix scores best (ties kept), so a
    prioritize call would score them all alike; kube-scheduler's own plugins
    break the tie, and with one node left it skips scoring altogether.
    """
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": 200, "burst": 400},
        "leaderElection": {
            "leaderElect": True,
            "resourceName": names.SCHEDULER_NAME,
            "resourceNamespace": "kube-system",
        },
        "profiles": [{"schedulerName": names.SCHEDULER_NAME}],
        "extenders": [
            {
                "urlPrefix": extender_url.rstrip("/"),
                "filterVerb": "filter",
                "preemptVerb": "preempt",
                "enableHTTPS": False,
                "nodeCacheCapable": True,
                "ignorable": False,
                "httpTimeout": "5s",
            }
        ],
    }
