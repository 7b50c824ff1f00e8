"""A device-side fingerprint of a byte tensor, to prove a restore is bit for bit.

Why not a host hash (CRC, BLAKE2): hashing 64 GB on one CPU core takes tens of
seconds, longer than the copy it checks. This fingerprint is computed with
tensor ops where the bytes live (HBM bandwidth on a GPU), twice: before the
memory is parked and after it is restored. Two position-weighted sums over the
bytes viewed as 32-bit words catch flipped bits, lost chunks and reordered
words; it is an integrity check against bugs and bad copies, not a defence
against an adversary (the data never leaves the pod's own process).

Host tensors (CPU-only runs and tests) use BLAKE2b instead: there the bytes
are already where the hash runs. The prefix names the algorithm, so two
fingerprints of different kinds can never compare equal by accident.
"""

from __future__ import annotations

import ctypes
from typing import Any

from rlix.core.digests import host_digest

CHUNK_WORDS = 1 << 24  # 64 MiB of 32-bit words per step bounds the temporaries
_MASK = (1 << 64) - 1


def fingerprint(data: Any, *, algorithm: str | None = None) -> str:
    """Fingerprint of a flat, contiguous ``torch.uint8`` tensor (any device).

    ``algorithm`` is "b2b" (host only) or "ws64"; by default the device picks.
    """
    import torch

    if data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous():
        raise ValueError("fingerprint() takes a flat, contiguous uint8 tensor")
    if algorithm is None:
        algorithm = "b2b" if data.device.type == "cpu" else "ws64"
    if algorithm == "b2b":
        if data.device.type != "cpu":
            raise ValueError("b2b fingerprints host memory only")
        return _host_digest(data)
    if algorithm != "ws64":
        raise ValueError(f"unknown fingerprint algorithm {algorithm!r}")
    n = int(data.numel())
    words = n // 4
    s1 = 0
    s2 = 0
    if words:
        body = data[: words * 4].view(torch.int32)
        weights = torch.arange(
            1, min(words, CHUNK_WORDS) + 1, dtype=torch.int64, device=data.device
        )
        # Accumulate where the data lives and read the sums back once: a host
        # round trip per chunk would stall the GPU a thousand times for 64 GB.
        # int64 arithmetic wraps, i.e. it is exact modulo 2**64 on every device.
        acc1 = torch.zeros((), dtype=torch.int64, device=data.device)
        acc2 = torch.zeros((), dtype=torch.int64, device=data.device)
        for start in range(0, words, CHUNK_WORDS):
            chunk = body[start : start + CHUNK_WORDS].to(torch.int64)
            csum = chunk.sum()
            acc1 += csum
            # Offset the weights by the chunk's position so equal chunks in
            # different places do not cancel out.
            acc2 += (chunk * weights[: chunk.numel()]).sum() + csum * start
        s1, s2 = int(acc1), int(acc2)
    tail = data[words * 4 :]
    for i, b in enumerate(tail.tolist()):
        s1 += b
        s2 += (words + i + 1) * b
    return f"ws64:{n}:{s1 & _MASK:016x}:{s2 & _MASK:016x}"


def _host_digest(data: Any) -> str:
    """Host memory: a real hash, read in place (no copy) through the buffer protocol."""
    n = int(data.numel())
    if n == 0:
        return host_digest(b"")
    return host_digest((ctypes.c_char * n).from_address(int(data.data_ptr())))
