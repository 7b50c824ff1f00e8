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
# How many times the pod's process has left `training`, as its node agent
# counted (from the agent's start): a job's iterations survive a phase that
# came and went between two publications or two reconciles.
ANNOTATION_ITERATIONS: Final = f"{GROUP}/iterations"
# The phase a process of the pod waits at its node's phase gate to enter (its
# turn on a GPU it shares); absent while none of its processes waits.
ANNOTATION_WAITING_FOR_TURN: Final = f"{GROUP}/waiting-for-turn"

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
# "true": the pod's processes allocate GPU memory first inside rlix.loading()
# (the role's loadsThroughGate), so a parking gate may pair it by turns.
ANNOTATION_LOADS_THROUGH_GATE: Final = f"{GROUP}/loads-through-gate"
# JSON {phase: seconds} of one iteration as the pod lives it ("idle": waiting
# on the job's other roles): what the sharing rules weigh a pair by.
ANNOTATION_PHASE_SECONDS: Final = f"{GROUP}/phase-seconds"
# Where the operator's admission planned a pod that is not bound yet.
ANNOTATION_ADMITTED_NODE: Final = f"{GROUP}/admitted-node"
# What a node agent publishes on its Node: JSON list of
# {"index", "memoryMiB", "usedMiB", "utilization"}.
ANNOTATION_NODE_GPUS: Final = f"{GROUP}/gpus"
# Written by a node agent that publishes the node's GPUs as gpu.rlix.io DRA
# devices whose memory is consumable capacity (the API server kept it): pods
# there get GPUs through ResourceClaims the operator pins. Absent: whole GPUs.
ANNOTATION_NODE_GPU_CLAIMS: Final = f"{GROUP}/gpu-claims"
# Beside it: the factor the agent publishes each GPU's memory with (>= 1). Above
# 1 the published headroom is where a waiting job is admitted into memory that
# lower-priority pods parked (docs/conductor.md, "What parking frees").
ANNOTATION_NODE_MEMORY_OVERCOMMIT: Final = f"{GROUP}/memory-overcommit"
# GPUs a pod holds through its RLix ResourceClaim (it requests no nvidia.com/gpu).
ANNOTATION_CLAIMED_GPUS: Final = f"{GROUP}/claimed-gpus"
LABEL_NVLINK_DOMAIN: Final = f"{GROUP}/nvlink-domain"
LABEL_REPLICA_INDEX: Final = f"{GROUP}/replica-index"

# The node agent's socket: the chart's nodeAgent.socketDir is handed to both the
# agent DaemonSet (--socket <dir>/agent.sock) and the operator
# (--agent-socket-dir <dir>), which mounts <dir> into every role pod by hostPath
# at the same path and points RLIX_AGENT_SOCKET at the socket.
AGENT_SOCKET_DIR: Final = "/run/rlix"
AGENT_SOCKET_FILE: Final = "agent.sock"
AGENT_SOCKET_VOLUME: Final = "rlix-agent-socket"

# Environment every role container gets (docs/rljob.md, "Environment"). RLix
# sets them; a template that sets one is refused, so no pod ever sees two values.
ENV_AGENT_SOCKET: Final = "RLIX_AGENT_SOCKET"
ENV_JOB: Final = "RLIX_JOB"
ENV_ROLE: Final = "RLIX_ROLE"
ENV_REPLICA_INDEX: Final = "RLIX_REPLICA_INDEX"
ENV_REPLICAS: Final = "RLIX_REPLICAS"
ENV_HEAD: Final = "RLIX_HEAD_ADDR"
ENV_MASTER_ADDR: Final = "MASTER_ADDR"
ENV_MASTER_PORT: Final = "MASTER_PORT"
ENV_WORLD_SIZE: Final = "WORLD_SIZE"
ENV_RANK: Final = "RANK"
ENV_NODE_RANK: Final = "NODE_RANK"
# Per-GPU device memory (MiB) the role declared for its peak phase, what its GPU
# claim consumes; set only on roles that declare gpuMemoryMiB. The client reads
# it as the process's budget (rlix.memory_budget_mib, rlix.cap_torch_memory).
ENV_GPU_MEMORY_MIB: Final = "RLIX_GPU_MEMORY_MIB"
OWNED_ENV: Final = (
    ENV_AGENT_SOCKET,
    ENV_JOB,
    ENV_ROLE,
    ENV_REPLICA_INDEX,
    ENV_REPLICAS,
    ENV_HEAD,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_WORLD_SIZE,
    ENV_RANK,
    ENV_NODE_RANK,
    ENV_GPU_MEMORY_MIB,
)
# torchrun's default rendezvous port; the head pod listens on it.
MASTER_PORT: Final = 29500

# RLJob priority -> pod spec.priority: one PriorityClass per priority value in
# use, named by the value (docs/rljob.md, "Priority").
PRIORITY_CLASS_PREFIX: Final = "rlix-priority-"
# The default tolerations of GPU role pods: GPU nodes are commonly tainted so
# that only pods asking for GPUs land there (NVIDIA GPU operator, GKE, EKS).
GPU_TOLERATION: Final = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
