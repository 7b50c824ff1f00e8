"""Names every RLix component shares: API group, labels, annotations, scheduler name.

They live in the pure core so the operator, extender, node agent, client library
and CLI cannot drift apart: each imports the constant instead of spelling it.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "rlix.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "RLJob"
PLURAL: Final = "rljobs"
SINGULAR: Final = "rljob"
SHORT_NAME: Final = "rlj"

LABEL_JOB: Final = f"{GROUP}/job"
LABEL_ROLE: Final = f"{GROUP}/role"
ANNOTATION_PHASE: Final = f"{GROUP}/phase"
ANNOTATION_PHASE_SINCE: Final = f"{GROUP}/phase-since"

SCHEDULER_NAME: Final = "rlix-scheduler"

# NVIDIA's own conventions for GPU nodes (device plugin + GPU feature discovery).
GPU_RESOURCE: Final = "nvidia.com/gpu"
NODE_LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"
NODE_LABEL_GPU_MEMORY_MIB: Final = "nvidia.com/gpu.memory"
NODE_LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
NODE_LABEL_GPU_PRESENT: Final = "nvidia.com/gpu.present"
# Set by NVIDIA's GPU feature discovery under time-slicing: allocatable
# nvidia.com/gpu is then gpu.count x gpu.replicas.
NODE_LABEL_GPU_REPLICAS: Final = "nvidia.com/gpu.replicas"

# What a pod declares to the extender (written by the operator from the RLJob,
# or by hand); the formats are documented in docs/objects.md.
ANNOTATION_GPU_MEMORY_MIB: Final = f"{GROUP}/gpu-memory-mib"  # JSON {phase: MiB} or one MiB
ANNOTATION_PRIORITY: Final = f"{GROUP}/priority"  # integer; spec.priority wins when set
LABEL_PREEMPTIBLE: Final = f"{GROUP}/preemptible"  # "true"/"false" (label or annotation)
ANNOTATION_GANG_SIZE: Final = f"{GROUP}/gang-size"  # pods of the job that must run together
ANNOTATION_SUSPENDED: Final = f"{GROUP}/suspended"  # "true" while memory is parked off-GPU
ANNOTATION_GPU_INDICES: Final = f"{GROUP}/gpu-indices"  # "0,1": GPUs the pod holds
# Where the operator's admission planned a pod that is not bound yet.
ANNOTATION_ADMITTED_NODE: Final = f"{GROUP}/admitted-node"
# What a node agent publishes on its Node: JSON list of
# {"index", "memoryMiB", "usedMiB", "utilization"}.
ANNOTATION_NODE_GPUS: Final = f"{GROUP}/gpus"
LABEL_NVLINK_DOMAIN: Final = f"{GROUP}/nvlink-domain"
