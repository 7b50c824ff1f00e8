"""The workload model: what one RL post-training job asks of the cluster.

A job is a synchronous RL loop, by default colocated (the verl "hybrid engine"
layout: the rollout engine and the trainer share the same GPUs) or, with
``JobSpec.rollout_gpus``, disaggregated: a rollout pool and a trainer pool of
their own pods, each idle while the other works (docs/simulator.md). Every
iteration runs

1. **rollout** -- decode ``prompts x samples`` responses whose lengths are
   long-tailed (lognormal, capped at ``max_response``). Decode is HBM-bandwidth
   bound, one step per token, so a replica's time is its longest response. As
   responses finish, the active batch shrinks: the GPU is still "in rollout"
   but does little. We split rollout at the 75th percentile of the length
   distribution into a *bulk* segment and a *tail* segment, each with its
   time-averaged demand (active fraction of the batch).
2. **scoring** -- reference and old-policy log-probs: two forward passes.
3. **training** -- forward + backward + optimizer step over all tokens.
4. **weight sync** -- reshard trained weights into the rollout engine.

Durations come from the model size and hardware figures (``hardware``), not
from per-job constants, so they can be checked against published step times.
The only per-iteration randomness is the longest response, drawn once per
iteration from the job's own seeded stream, so every scheduler sees exactly the
same job.
"""

from __future__ import annotations

import bisect
import math
import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from statistics import NormalDist

from rlix.core.phases import Phase, shape_of
from rlix.core.sim import hardware as hw
from rlix.core.snapshot import PhaseLoad


@dataclass(frozen=True, slots=True)
class ModelSize:
    """Architecture facts that set memory and time (from the models' config.json)."""

    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    rollout_tp: int  # tensor parallel size of one rollout replica
    activations_gb: float  # per GPU, with activation checkpointing (estimate)

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16


# Qwen2.5 family config.json (Hugging Face): layers, KV heads, head dim. TP sizes
# are the ones verl's example scripts use for each size on 80-141 GB GPUs.
MODELS: dict[str, ModelSize] = {
    m.name: m
    for m in (
        ModelSize("1.5b", 1.54e9, 28, 2, 128, 1, 6.0),
        ModelSize("7b", 7.62e9, 28, 4, 128, 1, 12.0),
        ModelSize("14b", 14.7e9, 48, 8, 128, 2, 16.0),
        ModelSize("32b", 32.5e9, 64, 8, 128, 4, 20.0),
        ModelSize("72b", 72.7e9, 80, 8, 128, 8, 24.0),
    )
}

# Mixed-precision Adam: bf16 weights + bf16 grads + fp32 master, m, v = 16 B/param
# (ZeRO paper, Rajbhandari et al. 2020), sharded over the job's GPUs (FSDP/ZeRO-3).
TRAIN_BYTES_PER_PARAM = 16
WEIGHT_BYTES_PER_PARAM = 2
VLLM_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs: concurrent sequences per replica
# verl's default rollout gpu_memory_utilization: weights + KV cache of the rollout
# engine may take at most half of the GPU. A batch that needs more KV than this
# queues inside vLLM; we keep the decode time and cap the memory (optimistic).
ROLLOUT_MEMORY_FRACTION = 0.5
BULK_QUANTILE = 0.75  # where the rollout "tail" begins
WEIGHT_SYNC_FIXED_S = 1.0  # NCCL/IPC handshake per sync (verl logs: ~1 s)
ITERATION_PHASES: tuple[Phase, ...] = (
    Phase.ROLLOUT,  # bulk
    Phase.ROLLOUT,  # tail
    Phase.SCORING,
    Phase.TRAINING,
    Phase.WEIGHT_SYNC,
)
SEGMENTS_PER_ITERATION = len(ITERATION_PHASES)
TAIL_SEGMENT = 1
# Quantiles of the longest response the declared load profile averages over
# (docs/simulator.md, rule 5's phase-load-aware form).
PROFILE_QUANTILES = 16
# Pod roles. Colocated: verl's hybrid worker, one pod per node doing every
# phase. Disaggregated: a rollout pool (the inference engine) and a trainer
# pool ("actor": reference/old log-probs and the update), each its own pods.
COLOCATED_ROLE = "actor-rollout-ref"
ROLLOUT_ROLE = "rollout"
TRAINER_ROLE = "actor"
# Which segments (index within an iteration) each disaggregated role works in:
# the rollout pool decodes (bulk, tail) and receives weights; the trainer pool
# scores, trains and sends weights. In every other segment the pool is idle.
ROLE_ACTIVE: dict[str, tuple[bool, ...]] = {
    ROLLOUT_ROLE: (True, True, False, False, True),
    TRAINER_ROLE: (False, False, True, True, True),
}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One RLJob as submitted. ``arrival_s`` is seconds since the run began."""

    name: str
    model: str
    gpus: int
    iterations: int
    arrival_s: float
    priority: int = 0
    preemptible: bool = True
    tenant: str = "default"
    prompts: int = 128
    samples: int = 8
    prompt_tokens: int = 512
    response_median: int = 2000
    response_sigma: float = 1.0
    max_response: int = 16384
    env_wait: float = 0.0  # agentic: fraction of rollout time spent waiting on tools
    ckpt_every: int = 10  # iterations between checkpoints (verl save_freq)
    index: int = 0  # position in the mix; seeds the job's random stream
    # vLLM's gpu_memory_utilization: 0 sizes the rollout's KV cache to the
    # batch (what the job needs; optimistic); a fraction in (0, 1) makes the
    # rollout engine take that share of the GPU up front, as vLLM does (it
    # preallocates weights + KV to the fraction whatever the batch needs).
    gpu_memory_utilization: float = 0.0
    # Layout: 0 = colocated (every pod does every phase); n > 0 = disaggregated,
    # a rollout pool of n GPUs and a trainer pool of the other gpus - n, each
    # split into equal pods of at most 8 GPUs.
    rollout_gpus: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.gpu_memory_utilization < 1.0:
            raise ValueError(
                f"job {self.name!r}: gpu_memory_utilization {self.gpu_memory_utilization} "
                "is not in [0, 1)"
            )
        if self.rollout_gpus == 0:
            return
        if not 0 < self.rollout_gpus < self.gpus:
            raise ValueError(
                f"job {self.name!r}: rollout_gpus {self.rollout_gpus} must lie in "
                f"[1, gpus - 1] = [1, {self.gpus - 1}] (0: colocated)"
            )
        tp = MODELS[self.model].rollout_tp if self.model in MODELS else 1
        if self.rollout_gpus % tp:
            raise ValueError(
                f"job {self.name!r}: rollout_gpus {self.rollout_gpus} is not a multiple of "
                f"model {self.model}'s rollout tensor-parallel size {tp}"
            )
        pools = (("rollout_gpus", self.rollout_gpus), ("gpus - rollout_gpus", self.trainer_gpus))
        for field_name, n in pools:
            if n % _pods_of(n):
                raise ValueError(
                    f"job {self.name!r}: {field_name} {n} does not split into equal pods "
                    "of at most 8 GPUs"
                )

    @property
    def disaggregated(self) -> bool:
        return self.rollout_gpus > 0

    @property
    def trainer_gpus(self) -> int:
        """GPUs that score and train: the trainer pool, or all of a colocated job's."""
        return self.gpus - self.rollout_gpus

    @property
    def pods(self) -> int:
        if self.rollout_gpus:
            return _pods_of(self.rollout_gpus) + _pods_of(self.trainer_gpus)
        return max(1, -(-self.gpus // 8))

    @property
    def gpus_per_pod(self) -> int:
        """GPUs of a pod (the smallest pod where a disaggregated job's pools differ)."""
        if self.rollout_gpus:
            return min(self.pod_gpus)
        return self.gpus // self.pods

    @property
    def pod_roles(self) -> tuple[str, ...]:
        """Each pod's role, rollout pods first."""
        if not self.rollout_gpus:
            return (COLOCATED_ROLE,) * self.pods
        return (ROLLOUT_ROLE,) * _pods_of(self.rollout_gpus) + (TRAINER_ROLE,) * _pods_of(
            self.trainer_gpus
        )

    @property
    def pod_gpus(self) -> tuple[int, ...]:
        if not self.rollout_gpus:
            return (self.gpus_per_pod,) * self.pods
        r, t = _pods_of(self.rollout_gpus), _pods_of(self.trainer_gpus)
        return (self.rollout_gpus // r,) * r + (self.trainer_gpus // t,) * t

    @property
    def min_nodes(self) -> int:
        """Fewest 8-GPU nodes the job's pods can fit on."""
        return max(1, -(-self.gpus // 8))


def _pods_of(gpus: int) -> int:
    return max(1, -(-gpus // 8))


@dataclass(frozen=True)
class JobProfile:
    """Per-job derived costs (seconds, bytes, MiB), computed once from a spec."""

    spec: JobSpec

    @cached_property
    def size(self) -> ModelSize:
        return MODELS[self.spec.model]

    @cached_property
    def _lengths(self) -> NormalDist:
        return NormalDist(math.log(self.spec.response_median), self.spec.response_sigma)

    def length_quantile(self, u: float) -> float:
        u = min(max(u, 1e-12), 1 - 1e-12)
        return min(math.exp(self._lengths.inv_cdf(u)), float(self.spec.max_response))

    @cached_property
    def _quadrature(self) -> tuple[float, ...]:
        """Response lengths at 400 equal-probability points (for expectations)."""
        n = 400
        return tuple(self.length_quantile((i + 0.5) / n) for i in range(n))

    @cached_property
    def mean_response(self) -> float:
        return sum(self._quadrature) / len(self._quadrature)

    @cached_property
    def bulk_tokens(self) -> float:
        return self.length_quantile(BULK_QUANTILE)

    @cached_property
    def bulk_demand(self) -> float:
        """Mean active fraction of the batch during the bulk segment."""
        q = self.bulk_tokens
        return sum(min(x, q) for x in self._quadrature) / len(self._quadrature) / q

    @cached_property
    def tail_excess_tokens(self) -> float:
        """E[(L - q)+]: decode steps that tail sequences still owe, per sequence."""
        q = self.bulk_tokens
        return sum(max(x - q, 0.0) for x in self._quadrature) / len(self._quadrature)

    @property
    def rollout_gpus(self) -> int:
        """GPUs that decode: the rollout pool, or all of a colocated job's."""
        return self.spec.rollout_gpus or self.spec.gpus

    @property
    def replicas(self) -> int:
        return max(1, self.rollout_gpus // self.size.rollout_tp)

    @property
    def sequences(self) -> int:
        return self.spec.prompts * self.spec.samples

    @property
    def tokens(self) -> float:
        return self.sequences * (self.spec.prompt_tokens + self.mean_response)

    @cached_property
    def kv_budget_bytes(self) -> float:
        """Most KV cache the rollout engine may hold on one GPU."""
        weights = self.size.params * WEIGHT_BYTES_PER_PARAM / self.size.rollout_tp
        fraction = self.spec.gpu_memory_utilization or ROLLOUT_MEMORY_FRACTION
        budget = fraction * hw.H200_MEMORY_MIB * hw.MIB - weights
        return max(0.0, budget - hw.CUDA_CONTEXT_BYTES)

    @property
    def batch_per_replica(self) -> int:
        """Sequences a replica decodes concurrently (vLLM's max_num_seqs caps it)."""
        return min(VLLM_MAX_NUM_SEQS, -(-self.sequences // self.replicas))

    @cached_property
    def kv_bytes_per_gpu(self) -> float:
        """Resident KV cache: the whole budget when the engine preallocates
        (gpu_memory_utilization set), else the concurrent batch at mean context."""
        if self.spec.gpu_memory_utilization:
            return self.kv_budget_bytes
        context = self.spec.prompt_tokens + self.mean_response
        wanted = self.batch_per_replica * context * self.size.kv_bytes_per_token
        return min(wanted / self.size.rollout_tp, self.kv_budget_bytes)

    def decode_step_s(self, active: float, context: float) -> float:
        """One decode step with ``active`` of the batch still decoding at mean ``context``.

        A step reads this GPU's weights once and the KV cache of the sequences
        still decoding (finished ones are freed), so it shrinks as the batch
        empties, down to the weight read: a tail of 3 sequences steps faster
        than a full batch, though not 40x faster.
        """
        weights = self.size.params * WEIGHT_BYTES_PER_PARAM / self.size.rollout_tp
        kv = active * self.batch_per_replica * context * self.size.kv_bytes_per_token
        traffic = weights + min(kv / self.size.rollout_tp, self.kv_budget_bytes)
        return traffic / (hw.H200_HBM_BYTES_PER_S * hw.DECODE_BW_EFFICIENCY)

    @cached_property
    def step_s(self) -> float:
        """A full-batch decode step at mean context halfway through decoding."""
        return self.decode_step_s(1.0, self.spec.prompt_tokens + self.mean_response / 2)

    @cached_property
    def scoring_s(self) -> float:
        flops = 2 * 2 * self.size.params * self.tokens  # two forward passes
        return flops / (self.spec.trainer_gpus * hw.H200_BF16_FLOPS * hw.SCORE_MFU)

    @cached_property
    def training_s(self) -> float:
        flops = 6 * self.size.params * self.tokens
        return flops / (self.spec.trainer_gpus * hw.H200_BF16_FLOPS * hw.TRAIN_MFU)

    @cached_property
    def weight_sync_s(self) -> float:
        per_gpu = self.size.params * WEIGHT_BYTES_PER_PARAM / self.size.rollout_tp
        if not self.spec.disaggregated:
            return WEIGHT_SYNC_FIXED_S + per_gpu / hw.NVLINK_ONE_WAY_BYTES_PER_S
        # Trainer pool -> rollout pool, between pods (assumed on different
        # nodes: the placement decides, the profile cannot know). Each rollout
        # GPU receives its weights/TP shard; the trainer GPUs together send
        # every replica a full copy, replicas x weights / trainer GPUs each.
        sent = self.replicas * self.size.params * WEIGHT_BYTES_PER_PARAM / self.spec.trainer_gpus
        return WEIGHT_SYNC_FIXED_S + max(per_gpu, sent) / hw.NODE_TO_NODE_BYTES_PER_S

    @cached_property
    def memory_bytes(self) -> dict[Phase, float]:
        """Per-GPU resident bytes in each phase (the framework offloads the rest)."""
        s, g = self.size, self.spec.gpus
        ctx = hw.CUDA_CONTEXT_BYTES
        weights_tp = s.params * WEIGHT_BYTES_PER_PARAM / s.rollout_tp
        weights_sharded = s.params * WEIGHT_BYTES_PER_PARAM / g
        train = s.params * TRAIN_BYTES_PER_PARAM / g + s.activations_gb * hw.GB
        return {
            Phase.ROLLOUT: ctx + weights_tp + self.kv_bytes_per_gpu,
            Phase.SCORING: ctx + 2 * weights_sharded + s.activations_gb * hw.GB,
            Phase.TRAINING: ctx + train,
            Phase.WEIGHT_SYNC: ctx + weights_tp + weights_sharded,
        }

    @cached_property
    def memory_mib(self) -> dict[Phase, int]:
        """Per-GPU MiB by phase; for a disaggregated job, the larger pod's (its peak)."""
        if self.spec.disaggregated:
            peak = max(self.role_memory_mib.values())
            return dict.fromkeys(ITERATION_PHASES, peak)
        return {p: hw.mib(b) for p, b in self.memory_bytes.items()}

    @cached_property
    def role_memory_mib(self) -> dict[str, int]:
        """Per-GPU MiB a disaggregated pod holds in *every* phase, by role.

        Nothing is offloaded between phases in that layout: a rollout pod keeps
        its engine (CUDA context, weights/TP, KV cache), a trainer pod its
        training state (16 B/param over the trainer pool) and activations
        (scoring's bf16 weights and activations fit inside that).
        """
        s, ctx = self.size, hw.CUDA_CONTEXT_BYTES
        weights_tp = s.params * WEIGHT_BYTES_PER_PARAM / s.rollout_tp
        trainer = s.params * TRAIN_BYTES_PER_PARAM / self.spec.trainer_gpus
        return {
            ROLLOUT_ROLE: hw.mib(ctx + weights_tp + self.kv_bytes_per_gpu),
            TRAINER_ROLE: hw.mib(ctx + trainer + s.activations_gb * hw.GB),
        }

    @cached_property
    def min_mib(self) -> int:
        """The least per-GPU MiB any pod of the job holds in any phase."""
        if self.spec.disaggregated:
            return min(self.role_memory_mib.values())
        return min(self.memory_mib.values())

    def pod_memory_mib(self, role: str) -> dict[Phase, int]:
        """What a pod of ``role`` declares: a disaggregated pod lists the phases it
        works in and idle, all at its constant resident memory."""
        if role == COLOCATED_ROLE:
            return self.memory_mib
        mib = self.role_memory_mib[role]
        phases = {ITERATION_PHASES[i] for i, on in enumerate(ROLE_ACTIVE[role]) if on}
        return {p: mib for p in (*ITERATION_PHASES, Phase.IDLE) if p in phases or p is Phase.IDLE}

    def pod_peak_mib(self, role: str) -> int:
        """The most per-GPU MiB a pod of ``role`` holds in any phase."""
        return self._pod_peaks[role]

    @cached_property
    def _pod_peaks(self) -> dict[str, int]:
        # Asked on every rate and gate decision where the gate parks: worked
        # out once per profile, not per call.
        return {role: max(self.pod_memory_mib(role).values()) for role in set(self.spec.pod_roles)}

    @cached_property
    def active_gpus(self) -> tuple[int, ...]:
        """GPUs working in each segment of an iteration (all of a colocated job's)."""
        if not self.spec.disaggregated:
            return (self.spec.gpus,) * SEGMENTS_PER_ITERATION
        r, t = self.spec.rollout_gpus, self.spec.trainer_gpus
        return tuple(
            (r if ROLE_ACTIVE[ROLLOUT_ROLE][i] else 0) + (t if ROLE_ACTIVE[TRAINER_ROLE][i] else 0)
            for i in range(SEGMENTS_PER_ITERATION)
        )

    def pod_load_profile(self, role: str) -> tuple[PhaseLoad, ...]:
        """A pod's segments: the job's, with those its role does not work in idle."""
        if role == COLOCATED_ROLE:
            return self.load_profile
        return self._role_profiles[role]

    @cached_property
    def _role_profiles(self) -> dict[str, tuple[PhaseLoad, ...]]:
        return {
            role: tuple(
                seg if on else PhaseLoad(Phase.IDLE, seg.share, 0.0)
                for seg, on in zip(self.load_profile, ROLE_ACTIVE[role], strict=True)
            )
            for role in ROLE_ACTIVE
        }

    @property
    def first_load_s(self) -> float:
        """First start: fixed start cost plus reading the bf16 weights from storage.

        Colocated: each GPU reads its 1/G shard. Disaggregated: a rollout GPU
        reads its weights/TP, a trainer GPU its 1/G_trainer shard, in parallel.
        """
        weights = self.size.params * WEIGHT_BYTES_PER_PARAM
        if self.spec.disaggregated:
            per_gpu = max(weights / self.size.rollout_tp, weights / self.spec.trainer_gpus)
        else:
            per_gpu = weights / self.spec.gpus
        return hw.RESTART_FIXED_S + per_gpu / hw.CHECKPOINT_READ_BYTES_PER_S

    @property
    def restart_bytes(self) -> tuple[float, float]:
        """(slowest GPU's bytes, all bytes) read to restart after an eviction:
        the checkpoint on the trainer GPUs, and (disaggregated) weights/TP on
        each rollout GPU."""
        ckpt = self.checkpoint_bytes_per_gpu
        if not self.spec.disaggregated:
            return ckpt, ckpt * self.spec.gpus
        weights_tp = self.size.params * WEIGHT_BYTES_PER_PARAM / self.size.rollout_tp
        total = ckpt * self.spec.trainer_gpus + weights_tp * self.spec.rollout_gpus
        return max(ckpt, weights_tp), total

    @cached_property
    def checkpoint_bytes_per_gpu(self) -> float:
        """Per trainer GPU (all of a colocated job's GPUs)."""
        return self.size.params * TRAIN_BYTES_PER_PARAM / self.spec.trainer_gpus

    @property
    def sequences_per_replica(self) -> int:
        return max(1, -(-self.sequences // self.replicas))

    @cached_property
    def _tail_pressure_table(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Fraction of replicas still decoding, averaged over [q, longest], on a grid.

        A replica holds its GPUs until its own longest response ends, so
        ``1 - F(s)^m`` of them (m sequences each) are running at step s. This is
        the pressure a rollout tail puts on a co-runner: a replica decoding one
        sequence still reads all its weights every step.
        """
        q, cap, m = self.bulk_tokens, float(self.spec.max_response), self.sequences_per_replica
        if cap <= q:
            return (q,), (1.0,)
        grid = [q + (cap - q) * i / 32 for i in range(33)]
        running = [1.0 - self._lengths.cdf(math.log(s)) ** m for s in grid]
        running[-1] = 0.0  # nothing decodes past the cap
        xs, ys, area = [grid[0]], [1.0], 0.0
        for i in range(1, len(grid)):
            area += (running[i - 1] + running[i]) / 2 * (grid[i] - grid[i - 1])
            xs.append(grid[i])
            ys.append(min(1.0, area / (grid[i] - q)))
        return tuple(xs), tuple(ys)

    def tail_pressure(self, longest: float) -> float:
        xs, ys = self._tail_pressure_table
        if longest <= xs[0]:
            return ys[0]
        i = min(bisect.bisect_left(xs, longest), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (longest - x0) / (x1 - x0) if x1 > x0 else y1

    def rollout_segments(self, longest: float) -> tuple[float, float, float, float]:
        """(bulk_s, bulk_demand, tail_s, tail_demand) for an iteration's longest response."""
        stretch = 1.0 / (1.0 - self.spec.env_wait)  # tool waits stretch wall time
        q, prompt = self.bulk_tokens, self.spec.prompt_tokens
        longest = max(longest, q)
        keep = 1.0 - self.spec.env_wait
        tail_demand = min(1.0, self.tail_excess_tokens / (longest - q)) if longest > q else 0.0
        # Steps shrink with the active batch (decode_step_s): the bulk at its
        # mean active fraction and mid-bulk context, the tail at its own.
        bulk_s = q * self.decode_step_s(self.bulk_demand, prompt + q / 2) * stretch
        tail_step = self.decode_step_s(tail_demand, prompt + (q + longest) / 2)
        tail_s = (longest - q) * tail_step * stretch
        return bulk_s, self.bulk_demand * keep, tail_s, tail_demand * keep

    def tail_lend_share(self, demand: float) -> float:
        """The part of a tail's rollout GPU-seconds that moving it onto fewer
        replicas frees, net of the kept replicas' slower steps (docs/simulator.md,
        "Tail lending"); ``demand`` is the tail segment's (as ``timeline`` sets it).

        A share ``d`` of the sequences still works (``demand`` over the time not
        spent on tools); at R replicas a step reads each replica's weights and
        the working sequences' KV, and their longest response follows from ``d``
        as in ``rollout_segments``. Moved onto a share k of the replicas (at
        least one, at least ``d``, and enough KV budget for the moved cache), the
        tail needs k x its steps of weight reads but the same KV reads, which
        now fall on fewer GPUs, so their steps are slower and the tail longer:
        the GPU-seconds freed are (1 - k) of the weight reads only, the share of
        a step at ``d`` that ``decode_step_s`` at no working sequence takes.
        Best case otherwise: the move is free and k shrinks as the tail empties.
        """
        keep = 1.0 - self.spec.env_wait
        if keep <= 0 or demand <= 0:
            return 0.0
        d = min(1.0, demand / keep)
        q, prompt = self.bulk_tokens, self.spec.prompt_tokens
        longest = min(q + self.tail_excess_tokens / d, float(self.spec.max_response))
        context = prompt + (q + longest) / 2
        kept = max(1.0 / self.replicas, d)
        if self.kv_budget_bytes > 0:  # the moved cache must fit the kept replicas
            full_kv = self.batch_per_replica * context * self.size.kv_bytes_per_token
            kept = max(kept, d * full_kv / self.size.rollout_tp / self.kv_budget_bytes)
        if kept >= 1.0:
            return 0.0
        return (1.0 - kept) * self.decode_step_s(0.0, context) / self.decode_step_s(d, context)

    @cached_property
    def _expected_segments(self) -> tuple[tuple[Phase, float, float], ...]:
        """(phase, expected alone seconds, duration-weighted pressure) per segment,
        averaged over ``PROFILE_QUANTILES`` equal-probability quantiles of the
        iteration's longest response (the distribution ``timeline`` draws from)."""
        n, keep = self.sequences, 1.0 - self.spec.env_wait
        bulk = tail = tail_pressure = 0.0
        for k in range(PROFILE_QUANTILES):
            longest = self.length_quantile(((k + 0.5) / PROFILE_QUANTILES) ** (1.0 / n))
            bulk_s, _, tail_s, tail_d = self.rollout_segments(longest)
            bulk += bulk_s / PROFILE_QUANTILES
            tail += tail_s / PROFILE_QUANTILES
            tail_pressure += tail_s * max(self.tail_pressure(longest) * keep, tail_d)
        tail_pressure = tail_pressure / (tail * PROFILE_QUANTILES) if tail > 0 else keep
        return (
            (Phase.ROLLOUT, bulk, keep),
            (Phase.ROLLOUT, tail, tail_pressure),
            (Phase.SCORING, self.scoring_s, 1.0),
            (Phase.TRAINING, self.training_s, 1.0),
            (Phase.WEIGHT_SYNC, self.weight_sync_s, 1.0),
        )

    @cached_property
    def iteration_s(self) -> float:
        """Expected alone seconds of one iteration (what ``load_profile``'s shares divide)."""
        return sum(d for _, d, _ in self._expected_segments)

    @cached_property
    def load_profile(self) -> tuple[PhaseLoad, ...]:
        """The iteration's segments as the sharing rules weigh them (``PhaseLoad``).

        Expected alone durations and duration-weighted pressures over the
        longest response's distribution (``_expected_segments``): what the
        job's declared shape implies, never what a run did.
        """
        total = self.iteration_s
        return tuple(
            PhaseLoad(phase, d / total, min(max(p, 0.0), 1.0))
            for phase, d, p in self._expected_segments
        )

    def timeline(self, seed: int) -> Timeline:
        """Every segment of every iteration; identical for every scheduler."""
        rng = random.Random(f"{seed}/{self.spec.index}/rollout")
        n = self.sequences
        durations = array("d")
        demands = array("d")
        pressures = array("d")
        keep = 1.0 - self.spec.env_wait
        for _ in range(self.spec.iterations):
            # The longest of n i.i.d. lengths has CDF F^n: one draw per iteration.
            longest = self.length_quantile(rng.random() ** (1.0 / n))
            bulk_s, bulk_d, tail_s, tail_d = self.rollout_segments(longest)
            durations.extend((bulk_s, tail_s, self.scoring_s, self.training_s))
            durations.append(self.weight_sync_s)
            demands.extend((bulk_d, tail_d, 1.0, 1.0, 1.0))
            # A segment cannot deliver more than its running kernels occupy:
            # pressure >= demand (the sharing bound in metrics.py relies on it).
            tail_p = max(self.tail_pressure(longest) * keep, tail_d)
            pressures.extend((keep, tail_p, 1.0, 1.0, 1.0))
        return Timeline.build(durations, demands, pressures)


_DERIVED = (
    "size", "_lengths", "_quadrature", "mean_response", "bulk_tokens", "bulk_demand",
    "tail_excess_tokens", "kv_budget_bytes", "kv_bytes_per_gpu", "step_s", "scoring_s",
    "training_s", "weight_sync_s", "memory_bytes", "memory_mib", "checkpoint_bytes_per_gpu",
    "_tail_pressure_table", "load_profile", "role_memory_mib", "min_mib", "active_gpus",
    "_role_profiles",
)  # fmt: skip
_PROFILES: dict[JobSpec, JobProfile] = {}


def profile_for(spec: JobSpec) -> JobProfile:
    """A JobProfile whose costs are shared with every job of the same shape.

    Thousands of jobs differ only in name, arrival, iterations and priority;
    the quadratures behind their costs are identical, so compute them once.
    (A pure memo: the result depends on the spec alone.)
    """
    key = replace(spec, name="", arrival_s=0.0, iterations=1, index=0, priority=0,
                  preemptible=True, tenant="", ckpt_every=1)  # fmt: skip
    base = _PROFILES.get(key)
    if base is None:
        base = _PROFILES[key] = JobProfile(key)
    profile = JobProfile(spec)
    for attr in _DERIVED:
        profile.__dict__[attr] = getattr(base, attr)
    return profile


@dataclass(frozen=True, slots=True)
class Timeline:
    """Segments of a job laid end to end, in seconds of running alone."""

    durations: array[float]
    # Share of the GPUs' throughput the segment uses (the active batch fraction
    # in rollout): what the idle metric counts.
    demands: array[float]
    # Share of the GPUs the segment occupies with running kernels (replicas
    # still decoding): what slows a co-runner down.
    pressures: array[float]
    ends: array[float]  # cumulative end of each segment
    # Last segment of the run of segments that share shape, demand and pressure
    # (scoring then training): nobody's rate changes inside such a run, so a
    # job sharing GPUs needs an event only at its end.
    group_end: array[int]

    @classmethod
    def build(
        cls, durations: array[float], demands: array[float], pressures: array[float]
    ) -> Timeline:
        ends = array("d")
        total = 0.0
        for d in durations:
            total += d
            ends.append(total)
        n = len(durations)
        group_end = array("i", range(n))
        for i in range(n - 2, -1, -1):
            same = (
                shape_of(ITERATION_PHASES[i % SEGMENTS_PER_ITERATION])
                == shape_of(ITERATION_PHASES[(i + 1) % SEGMENTS_PER_ITERATION])
                and demands[i] == demands[i + 1]
                and pressures[i] == pressures[i + 1]
            )
            if same:
                group_end[i] = group_end[i + 1]
        return cls(durations, demands, pressures, ends, group_end)

    @property
    def total_s(self) -> float:
        return self.ends[-1] if self.ends else 0.0

    def busy_gpu_s(self, skip_network: bool = False) -> float:
        """Demand-weighted seconds per GPU (the work an exclusive GPU does).

        ``skip_network`` leaves out weight-sync segments: copies overlap with
        kernels almost freely, so the sharing bound counts only the rest.
        """
        sync = SEGMENTS_PER_ITERATION - 1
        return sum(
            d * w
            for i, (d, w) in enumerate(zip(self.durations, self.demands, strict=True))
            if not (skip_network and i % SEGMENTS_PER_ITERATION == sync)
        )

    def busy_gpus_s(self, gpus: tuple[int, ...], skip_network: bool = False) -> float:
        """Demand-weighted GPU-seconds when segment i works on ``gpus[i % 5]`` GPUs."""
        sync = SEGMENTS_PER_ITERATION - 1
        return sum(
            d * w * gpus[i % SEGMENTS_PER_ITERATION]
            for i, (d, w) in enumerate(zip(self.durations, self.demands, strict=True))
            if not (skip_network and i % SEGMENTS_PER_ITERATION == sync)
        )

    def idle_pool_gpu_s(self, gpus: tuple[int, ...], total: int) -> float:
        """Alone-seconds x GPUs of a job's pools that idle while its other pool works."""
        return sum(
            d * (total - gpus[i % SEGMENTS_PER_ITERATION]) for i, d in enumerate(self.durations)
        )

    def lendable_gpu_s(self, rollout_gpus: int, share: Callable[[float], float]) -> float:
        """GPU-seconds the rollout tails could lend at best (docs/simulator.md,
        "Tail lending"): each iteration's tail times its rollout GPUs times
        ``share(demand)``, the part of them a consolidated tail frees
        (``JobProfile.tail_lend_share``)."""
        if rollout_gpus <= 0:
            return 0.0
        return sum(
            self.durations[i] * rollout_gpus * share(self.demands[i])
            for i in range(TAIL_SEGMENT, len(self.durations), SEGMENTS_PER_ITERATION)
        )

    def iteration_start(self, iteration: int) -> float:
        return self.ends[iteration * SEGMENTS_PER_ITERATION - 1] if iteration > 0 else 0.0
