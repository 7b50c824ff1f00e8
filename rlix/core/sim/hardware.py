"""Hardware figures the simulator's cost model is built from, each with its source.

They are deliberately few: every simulated duration is derived from these and
from a job's model size, never typed in per job, so a reader can check one
table (docs/simulator.md, "Parameters") instead of hundreds of numbers.
"""

from __future__ import annotations

from typing import Final

GB: Final = 1e9
MIB: Final = 1 << 20

# NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s. GPU feature discovery
# labels it nvidia.com/gpu.memory=143771 (MiB), which is what the filter sees.
H200_MEMORY_MIB: Final = 143771
H200_HBM_BYTES_PER_S: Final = 4.8e12
# H200 SXM datasheet: 1,979 TFLOPS BF16 *with sparsity*; dense is half.
H200_BF16_FLOPS: Final = 989e12

# Achieved fractions of peak. Training MFU of 30-40% is what verl / Megatron
# report for dense 7-70B models (verl perf tuning guide; Megatron-LM paper);
# scoring is a forward pass over whole sequences (prefill-like), a little
# higher. Decode reads the weights and KV cache once per step; vLLM reaches
# roughly 50-70% of HBM bandwidth at moderate batch sizes.
TRAIN_MFU: Final = 0.35
SCORE_MFU: Final = 0.45
DECODE_BW_EFFICIENCY: Final = 0.6

# Host link floors measured on PCIe Gen5 x16 with pinned host memory.
PCIE_D2H_BYTES_PER_S: Final = 53 * GB
PCIE_H2D_BYTES_PER_S: Final = 40 * GB  # midpoint of the measured 35-50 GB/s
# NVLink 4 on H100/H200: 900 GB/s both directions together, 450 GB/s each way.
NVLINK_ONE_WAY_BYTES_PER_S: Final = 450 * GB
# Published suspend tools' throughput: cuda-checkpoint 6-8 GB/s, vLLM sleep
# level 1 about 1.5-2 GB/s. Used by the "slow suspend" sensitivity run.
CUDA_CHECKPOINT_BYTES_PER_S: Final = 7 * GB
VLLM_SLEEP_BYTES_PER_S: Final = 2 * GB

# Moving a parked pod's host copy to another node: one 200 Gb/s NIC per pod
# (25 GB/s; H200 nodes usually carry 400 Gb/s per GPU for collectives, but a
# host-to-host copy of the park file goes through one host NIC). An assumption:
# RLix's agent relocates within a node today, not across nodes.
NODE_TO_NODE_BYTES_PER_S: Final = 25 * GB

# Restart after eviction (baseline b). Reading a sharded checkpoint from a
# parallel file system at ~2 GB/s per GPU (typical Lustre/NFS-over-RDMA per
# client stream; LEAST CERTAIN of the link figures), plus a fixed start cost:
# pod scheduling, container start with a cached image, NCCL init, and vLLM
# engine start with CUDA-graph capture, which verl/vLLM logs put at 1-3 min.
CHECKPOINT_READ_BYTES_PER_S: Final = 2 * GB
RESTART_FIXED_S: Final = 120.0

# Per-process CUDA context and allocator slack kept on every GPU a pod uses.
CUDA_CONTEXT_BYTES: Final = 1 * GB


def mib(nbytes: float) -> int:
    """Bytes to whole MiB, rounded up (a filter must never under-ask)."""
    return -(-int(nbytes) // MIB)
