#!/usr/bin/env python3
"""GPU check for in-place preemption (tier 5): run on a machine with NVIDIA GPUs.

    make gpu-check            # or: .venv/bin/python hack/gpu-check.py [--sizes-gb 1 16 64]

Prints one table:
  * the floor: a plain copy of N bytes between HBM and a preallocated pinned
    host buffer, each way (what no offload can beat);
  * rlix suspend/resume of N bytes of torch tensors (TorchOffload: pinned pool,
    fingerprints before and after, allocator cache emptied), its bandwidth
    against the floor, and NVML seeing the memory freed and retaken;
  * relocation through CUDA IPC by a second process (the agent's role): to
    spare HBM of another GPU (skipped with one GPU) and to pinned host memory;
  * the CUDA driver checkpoint of a whole process by PID, where supported.

Exits 77 (the conventional "skipped") with the reason when there is no GPU,
so it can run anywhere without pretending to have checked something.
Stays under ten minutes on an H200 node: sizes that do not fit the free device
or host memory are skipped with a note.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GB = 10**9
GIB = 1 << 30
SKIPPED_EXIT = 77
CHUNK_BYTES = 512 * (1 << 20)  # tensors of 512 MiB, like large parameter shards


@dataclass(frozen=True)
class Row:
    check: str
    size_gb: float | None
    seconds: float | None
    gbps: float | None
    vs_floor: float | None
    result: str


def gbps(nbytes: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return nbytes / GB / seconds


def mem_available_bytes(meminfo: str) -> int:
    """MemAvailable from /proc/meminfo text, in bytes."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"unexpected unit {unit!r} in {line!r}")
            return int(value) * 1024
    raise ValueError("no MemAvailable line in meminfo")


def plan_sizes(
    sizes_gb: Sequence[float], *, free_device: int, free_host: int
) -> list[tuple[float, str | None]]:
    """Each size with None (run it) or the reason it is skipped.

    A suspend needs the tensors on the device plus fingerprint scratch (10 %
    headroom), and the same bytes pinned on the host plus room for the process
    (20 % headroom).
    """
    out: list[tuple[float, str | None]] = []
    for gb in sizes_gb:
        n = int(gb * GB)
        if n * 1.1 > free_device:
            out.append(
                (gb, f"needs {n * 1.1 / GIB:.1f} GiB on the GPU, {free_device / GIB:.1f} free")
            )
        elif n * 1.2 > free_host:
            out.append(
                (gb, f"needs {n * 1.2 / GIB:.1f} GiB host memory, {free_host / GIB:.1f} free")
            )
        else:
            out.append((gb, None))
    return out


def format_table(rows: Sequence[Row]) -> str:
    head = ("check", "size GB", "seconds", "GB/s", "vs floor", "result")
    cells = [
        (
            r.check,
            "" if r.size_gb is None else f"{r.size_gb:g}",
            "" if r.seconds is None else f"{r.seconds:.3f}",
            "" if r.gbps is None else f"{r.gbps:.1f}",
            "" if r.vs_floor is None else f"{r.vs_floor:.0%}",
            r.result,
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    fmt = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    lines = [fmt.format(*head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [fmt.format(*c) for c in cells]
    return "\n".join(lines)


def gpu_unavailable_reason() -> str | None:
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc}); install rlix[test-torch]"
    try:
        if not torch.cuda.is_available():
            return "torch sees no CUDA device (no NVIDIA GPU or driver on this machine)"
    except Exception as exc:
        return f"CUDA initialisation failed: {exc}"
    return None


# --------------------------------------------------------------------------- GPU
class Nvml:
    """Device memory as NVML sees it (what the node agent publishes)."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self.nvml: Any = pynvml

    def used(self, index: int = 0) -> int:
        h = self.nvml.nvmlDeviceGetHandleByIndex(index)
        return int(self.nvml.nvmlDeviceGetMemoryInfo(h).used)

    def process_used(self, pid: int, index: int = 0) -> int:
        h = self.nvml.nvmlDeviceGetHandleByIndex(index)
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(h):
            if int(p.pid) == pid and isinstance(p.usedGpuMemory, int):
                return int(p.usedGpuMemory)
        return 0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def check_suspend(gb: float, nvml: Nvml | None) -> list[Row]:
    import torch

    from rlix.client.torch_offload import PinnedPool, TorchOffload

    n = int(gb * GB)
    dev = torch.device("cuda:0")
    tensors = [
        torch.randint(
            -(2**31), 2**31 - 1, (min(CHUNK_BYTES, n - off) // 4,), dtype=torch.int32, device=dev
        )
        for off in range(0, n, CHUNK_BYTES)
    ]
    nbytes = sum(t.nbytes for t in tensors)
    pool = PinnedPool(PinnedPool.size_for(t.nbytes for t in tensors))
    # Floor: the same pinned buffer, one tensor at a time, no fingerprints.
    host = [pool.take(t.nbytes) for t in tensors]

    def d2h() -> None:
        for t, h in zip(tensors, host, strict=True):
            h.copy_(t.view(torch.uint8), non_blocking=True)
        torch.cuda.synchronize()

    def h2d() -> None:
        for t, h in zip(tensors, host, strict=True):
            t.view(torch.uint8).copy_(h, non_blocking=True)
        torch.cuda.synchronize()

    d2h()  # warm-up (first touch of pinned pages)
    floor_out, _ = timed(d2h)
    floor_in, _ = timed(h2d)
    pool.reset()
    rows = [
        Row("floor: pinned copy HBM->host", gb, floor_out, gbps(nbytes, floor_out), None, "ok"),
        Row("floor: pinned copy host->HBM", gb, floor_in, gbps(nbytes, floor_in), None, "ok"),
    ]
    hook = TorchOffload("check", tensors=tensors, pool=pool)
    used0 = nvml.used() if nvml else 0
    t_off, parked = timed(hook.offload)
    freed = used0 - nvml.used() if nvml else 0
    t_on, restored = timed(hook.restore)
    retaken = nvml.used() - (used0 - freed) if nvml else 0
    ok = restored == {k: c for k, (_, c) in parked.items()}
    nv = f", NVML freed {freed / GIB:.1f} GiB, retook {retaken / GIB:.1f} GiB" if nvml else ""
    rows.append(
        Row(
            "rlix suspend (offload+fingerprint)",
            gb,
            t_off,
            gbps(nbytes, t_off),
            gbps(nbytes, t_off) / rows[0].gbps if rows[0].gbps else None,
            ("ok" if freed >= 0.9 * nbytes or not nvml else "NOT FREED") + nv,
        )
    )
    rows.append(
        Row(
            "rlix resume (restore+verify)",
            gb,
            t_on,
            gbps(nbytes, t_on),
            gbps(nbytes, t_on) / rows[1].gbps if rows[1].gbps else None,
            "bit for bit" if ok else "CHECKSUM MISMATCH",
        )
    )
    return rows  # the tensors and the pool go with this frame


def _ipc_child(conn: Any, nbytes: int) -> None:
    """The "pod": exports a buffer through CUDA IPC, frees it, gets it back."""
    import torch

    from rlix.client.checksums import fingerprint

    t = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda:0")
    before = fingerprint(t)
    conn.send(t)  # torch.multiprocessing shares CUDA tensors as IPC handles
    conn.recv()  # the agent has copied it: now we may free
    t.untyped_storage().resize_(0)
    torch.cuda.empty_cache()
    conn.send("freed")
    conn.recv()  # resume: fresh buffer, exported for the agent to fill
    fresh = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0")
    conn.send(fresh)
    conn.recv()
    conn.send(fingerprint(fresh) == before)
    conn.recv()


def check_relocation(gb: float, target: str, nvml: Nvml | None) -> Row:
    import torch
    import torch.multiprocessing as mp

    from rlix.agent.relocation import Relocator

    n = int(gb * GB)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_ipc_child, args=(child, n))
    proc.start()
    pid = proc.pid
    assert pid is not None
    try:
        relocator = Relocator()
        imported = parent.recv()
        t_park, parked = timed(functools.partial(relocator.park, [imported], target))
        del imported
        used_before_free = nvml.process_used(pid) if nvml else 0
        parent.send("copied")
        assert parent.recv() == "freed"
        freed = used_before_free - (nvml.process_used(pid) if nvml else 0)
        fresh = parent.recv()
        t_back, _ = timed(functools.partial(relocator.unpark, parked, [fresh]))
        del fresh
        parent.send("filled")
        same = parent.recv()
        parent.send("bye")
        proc.join(60)
        del parked
        torch.cuda.empty_cache()
        nv = f"; NVML: pod freed {freed / GIB:.1f} GiB" if nvml else ""
        return Row(
            f"relocate via CUDA IPC -> {target} (park)",
            gb,
            t_park,
            gbps(n, t_park),
            None,
            f"back in {t_back:.3f}s ({gbps(n, t_back):.1f} GB/s), "
            f"{'bit for bit' if same else 'CHECKSUM MISMATCH'}{nv}",
        )
    finally:
        if proc.is_alive():
            proc.kill()


def _checkpoint_child(conn: Any, nbytes: int) -> None:
    import torch

    from rlix.client.checksums import fingerprint

    t = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda:0")
    conn.send(fingerprint(t))
    conn.recv()  # parent checkpointed and restored us meanwhile
    conn.send(fingerprint(t))


def check_driver_checkpoint(gb: float, nvml: Nvml | None) -> Row:
    import torch.multiprocessing as mp

    from rlix.agent.driver_checkpoint import CudaDriverCheckpointer

    ckpt = CudaDriverCheckpointer()
    reason = ckpt.unsupported_reason()
    if reason is not None:
        return Row("driver checkpoint by PID", gb, None, None, None, f"unsupported: {reason}")
    n = int(gb * GB)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_checkpoint_child, args=(child, n))
    proc.start()
    pid = proc.pid
    assert pid is not None
    try:
        before = parent.recv()
        used = nvml.process_used(pid) if nvml else 0
        t_off, _ = timed(lambda: ckpt.suspend(pid))
        after = nvml.process_used(pid) if nvml else 0
        t_on, _ = timed(lambda: ckpt.resume(pid))
        parent.send("go")
        same = parent.recv() == before
        proc.join(60)
        nv = f"; NVML {used / GIB:.1f} -> {after / GIB:.1f} GiB" if nvml else ""
        return Row(
            "driver checkpoint by PID",
            gb,
            t_off,
            gbps(n, t_off),
            None,
            f"restore {t_on:.3f}s, {'bit for bit' if same else 'MISMATCH'}{nv}",
        )
    except Exception as exc:
        return Row("driver checkpoint by PID", gb, None, None, None, f"FAILED: {exc}")
    finally:
        if proc.is_alive():
            proc.kill()


def run(sizes_gb: Sequence[float], relocate_gb: Sequence[float]) -> list[Row]:
    import torch

    try:
        nvml: Nvml | None = Nvml()
    except Exception as exc:
        print(f"note: NVML unavailable ({exc}); freed/retaken columns omitted")
        nvml = None
    free_dev, _ = torch.cuda.mem_get_info(0)
    free_host = mem_available_bytes(Path("/proc/meminfo").read_text())
    rows: list[Row] = []
    for gb, skip in plan_sizes(sizes_gb, free_device=free_dev, free_host=free_host):
        if skip:
            rows.append(Row("rlix suspend/resume", gb, None, None, None, f"skipped: {skip}"))
            continue
        rows += check_suspend(gb, nvml)
        torch.cuda.empty_cache()
    targets = ["host"] + (["cuda:1"] if torch.cuda.device_count() > 1 else [])
    for gb in relocate_gb:
        for target in targets:
            rows.append(check_relocation(gb, target, nvml))
    if torch.cuda.device_count() < 2:
        rows.append(
            Row(
                "relocate via CUDA IPC -> cuda:1",
                None,
                None,
                None,
                None,
                "skipped: only one GPU on this machine",
            )
        )
    rows.append(check_driver_checkpoint(1, nvml))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-gb", type=float, nargs="+", default=[1, 16, 64])
    ap.add_argument("--relocate-gb", type=float, nargs="+", default=[1, 16])
    args = ap.parse_args(argv)
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"gpu-check: SKIPPED: {reason}")
        return SKIPPED_EXIT
    import torch

    print(
        f"gpu-check on {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, "
        f"torch {torch.__version__}, pid {os.getpid()}"
    )
    t0 = time.perf_counter()
    rows = run(args.sizes_gb, args.relocate_gb)
    print(format_table(rows))
    print(f"total {time.perf_counter() - t0:.0f}s")
    bad = [
        r
        for r in rows
        if "MISMATCH" in r.result or "NOT FREED" in r.result or r.result.startswith("FAILED")
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
