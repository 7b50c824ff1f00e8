#!/usr/bin/env python3
"""GPU check for in-place preemption (tier 5): run on a machine with NVIDIA GPUs.

    make gpu-check            # or: .venv/bin/python hack/gpu-check.py [--sizes-gb 1 16 64]

Prints one table:
  * the floor: a plain copy of N bytes between HBM and a preallocated pinned
    host buffer, each way (what no offload can beat);
  * rlix suspend/resume of N bytes of torch tensors (TorchOffload: pinned pool,
    fingerprints before and after, allocator cache emptied), its bandwidth
    against the floor, and NVML seeing the memory freed and retaken;
  * relocation through the node agent's real protocol: a real agent process
    (backend nvml, park dir in /dev/shm when it has room, else on disk) and a
    pod process with CUDA tensors registered with rlix; suspend-pod with
    target "host" and "gpu:1" (gpu:0, the same GPU, when there is only one)
    takes the pod's memory through CUDA IPC, the pod's process must hold
    nothing (rlix and NVML agree) and, for a GPU target, the agent must hold
    the copy in that GPU's HBM; resume-pod must bring it back bit for bit;
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

# The agent harness lives with the tests (tests/support.agent_fakes).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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


# ------------------------------------------------------------------ relocation
# The agent's real protocol, end to end: a node agent process (backend nvml)
# and a "pod" process that registered its CUDA tensors with rlix; the agent
# takes the pod's memory through CUDA IPC into its park file (and for gpu:<i>
# into HBM of GPU i), the pod frees it, and resume-pod brings it back.
RELOCATE_UID = "9c0c0000-0000-4000-8000-00000000c0de"
RELOCATE_POD = "gpu-check/trainer"
PARK_HEADROOM = 1.2  # park file plus slack, on the park dir's filesystem
CONTEXT_BYTES = GIB  # a CUDA context and allocator slack, per process and GPU
SHM_DIR = Path("/dev/shm")

POD_CHILD = r"""
import hashlib, json, sys
import torch
import rlix
from rlix.client.checksums import fingerprint

nbytes, chunk, dev = int(sys.argv[1]), int(sys.argv[2]), torch.device(sys.argv[3])
ts = []
for i, off in enumerate(range(0, nbytes, chunk)):
    size = min(chunk, nbytes - off)
    if i % 2 and size % 4 == 0:
        ts.append(torch.randint(-(2**31), 2**31 - 1, (size // 4,), dtype=torch.int32, device=dev))
    else:
        ts.append(torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev))
if dev.type == "cuda":
    torch.cuda.synchronize()

def out(**kw):
    print(json.dumps(kw), flush=True)

def digest():
    h = hashlib.sha256()
    for t in ts:
        h.update(fingerprint(t.view(torch.uint8)).encode())
    return h.hexdigest()

def live():
    return sum(t.untyped_storage().nbytes() for t in ts)

sys.stdin.readline()  # wait until the check has put this PID in the pod
# reserve_bytes=0: relocation needs no pinned pool in the pod (the agent holds the copy)
rlix.register_torch(tensors=ts, name="gpu-check", reserve_bytes=0)
out(event="ready", digest=digest(), live=live(), pieces=len(ts))
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd == "digest":
            out(event="digest", digest=digest())
        elif cmd == "live":
            out(event="live", live=live())
        elif cmd == "bye":
            break
        else:
            out(event="error", error=f"unknown command {cmd!r}")
    except Exception as exc:
        out(event="error", error=f"{type(exc).__name__}: {exc}")
"""


@dataclass(frozen=True)
class Target:
    name: str  # what suspend-pod is sent: "host" or "gpu:<i>"
    label: str  # what the table says
    gpu: int | None  # the GPU that holds the agent's HBM copy


def relocation_targets(device_count: int) -> list[Target]:
    """Host memory, and HBM of another GPU (the same one when there is only one)."""
    if device_count > 1:
        gpu = Target("gpu:1", "gpu:1", 1)
    else:
        gpu = Target("gpu:0", "gpu:0 (same GPU: only one here)", 0)
    return [Target("host", "host", None), gpu]


def free_bytes(path: Path) -> int | None:
    """Free space for an unprivileged writer on path's filesystem (None: no such path)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def choose_park_base(
    nbytes: int, *, shm_dir: Path, shm_free: int | None, disk_dir: Path, disk_free: int | None
) -> tuple[Path | None, str]:
    """Where the agent's park dir goes for nbytes, and how the results name it.

    /dev/shm (host memory, as a node agent's tmpfs hostPath would be) when it
    has room for PARK_HEADROOM x nbytes, else a temp dir on disk; (None, why)
    when neither has room.
    """
    need = nbytes * PARK_HEADROOM
    if shm_free is not None and shm_free >= need:
        return shm_dir, f"park in {shm_dir} (host memory)"
    if disk_free is not None and disk_free >= need:
        shm = "absent" if shm_free is None else f"{shm_free / GIB:.1f} GiB free"
        return disk_dir, f"park on disk in {disk_dir} ({shm_dir}: {shm})"
    return None, (
        f"park dir needs {need / GIB:.1f} GiB: {shm_dir} has "
        f"{'none' if shm_free is None else f'{shm_free / GIB:.1f} GiB'}, {disk_dir} "
        f"{'none' if disk_free is None else f'{disk_free / GIB:.1f} GiB'}"
    )


def device_skip_reason(nbytes: int, target: Target, free_device: Sequence[int]) -> str | None:
    """Why relocating nbytes to target does not fit the GPUs' free memory (None: it fits).

    GPU 0 holds the pod's tensors (plus fingerprint scratch), its CUDA context
    and the agent's (the agent opens the pod's memory there); a gpu:<i> target
    also needs the agent's copy on GPU i (and the pod's memory stays until the
    agent holds the copy, so on one GPU both are there at once).
    """
    need = [0.0] * len(free_device)
    need[0] += nbytes * 1.1 + 2 * CONTEXT_BYTES
    if target.gpu is not None:
        if not 0 <= target.gpu < len(free_device):
            return f"no GPU {target.gpu} on this machine"
        need[target.gpu] += nbytes * 1.05 + (CONTEXT_BYTES if target.gpu else 0)
    for i, (n, free) in enumerate(zip(need, free_device, strict=True)):
        if n > free:
            return f"needs {n / GIB:.1f} GiB on GPU {i}, {free / GIB:.1f} free"
    return None


@dataclass(frozen=True)
class Relocated:
    """What one relocation round trip measured (NVML fields None: not measured)."""

    nbytes: int
    live_before: int  # the pod's storage bytes (rlix's count) before the suspend
    live_suspended: int  # ... while relocated
    live_resumed: int  # ... after the resume
    digest_same: bool
    pod_nvml_before: int | None = None  # the pod's process on GPU 0, NVML
    pod_nvml_suspended: int | None = None
    agent_nvml_before: int | None = None  # the agent's process on the target GPU
    agent_nvml_suspended: int | None = None


def suspend_verdict(m: Relocated, target: Target, park: str) -> str:
    """ok / NOT FREED / NOT HELD, with what was seen."""
    n = m.nbytes
    notes = [f"pod live {m.live_suspended / GIB:.1f} GiB"]
    bad: list[str] = []
    if m.live_suspended:
        bad.append("NOT FREED")
    if m.pod_nvml_before is None or m.pod_nvml_suspended is None:
        notes.append("NVML unavailable")
    elif m.pod_nvml_before < 0.9 * n:
        notes.append(
            f"NVML does not attribute the pod's memory to its PID "
            f"({m.pod_nvml_before / GIB:.1f} GiB seen): not checked"
        )
    else:
        freed = m.pod_nvml_before - m.pod_nvml_suspended
        notes.append(
            f"NVML pod {m.pod_nvml_before / GIB:.1f} -> {m.pod_nvml_suspended / GIB:.1f} GiB"
        )
        if freed < 0.9 * n and "NOT FREED" not in bad:
            bad.append("NOT FREED")
    if target.gpu is not None:
        if m.agent_nvml_before is None or m.agent_nvml_suspended is None:
            notes.append(f"agent on GPU {target.gpu}: not measured")
        else:
            grew = m.agent_nvml_suspended - m.agent_nvml_before
            notes.append(f"agent on GPU {target.gpu} +{grew / GIB:.1f} GiB")
            pod_visible = m.pod_nvml_before is not None and m.pod_nvml_before >= 0.9 * n
            if grew < 0.9 * n and pod_visible:
                bad.append("NOT HELD")
    head = " ".join(bad) if bad else "ok"
    return f"{head}: {', '.join(notes)}; {park}"


def resume_verdict(m: Relocated) -> str:
    """bit for bit / CHECKSUM MISMATCH, and SIZE MISMATCH if storages did not regrow."""
    head = "bit for bit" if m.digest_same else "CHECKSUM MISMATCH"
    if m.live_resumed != m.live_before:
        head += (
            f", SIZE MISMATCH: pod live {m.live_resumed / GIB:.2f} GiB after resume, "
            f"{m.live_before / GIB:.2f} before"
        )
    return head


def relocation_rows(
    target: Target, gb: float, m: Relocated, *, suspend_s: float, resume_s: float, park: str
) -> list[Row]:
    n = m.nbytes
    return [
        Row(
            f"relocate -> {target.label} (suspend)",
            gb,
            suspend_s,
            gbps(n, suspend_s),
            None,
            suspend_verdict(m, target, park),
        ),
        Row(
            f"relocate -> {target.label} (resume)",
            gb,
            resume_s,
            gbps(n, resume_s),
            None,
            resume_verdict(m),
        ),
    ]


def one_line_tail(text: str, limit: int = 600) -> str:
    """The end of a log, on one line (for a table cell)."""
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else "..." + flat[-limit:]


def is_failure(result: str) -> bool:
    return (
        "MISMATCH" in result
        or "NOT FREED" in result
        or "NOT HELD" in result
        or result.startswith("FAILED")
    )


class PodChild:
    """The pod's process: CUDA tensors registered with rlix, answering JSON lines."""

    def __init__(self, socket_path: Path, nbytes: int, device: str = "cuda:0") -> None:
        import subprocess

        self.ready: dict[str, Any] = {}  # its ready line: digest and live bytes
        env = {**os.environ, "RLIX_AGENT_SOCKET": str(socket_path)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", POD_CHILD, str(nbytes), str(CHUNK_BYTES), device],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 120.0) -> dict[str, Any]:
        import json
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"the pod process said nothing for {timeout:.0f}s")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(f"the pod process exited with {self.proc.wait()}")
        doc: dict[str, Any] = json.loads(line)
        if doc.get("event") == "error":
            raise RuntimeError(f"the pod process: {doc.get('error')}")
        return doc

    def ask(self, cmd: str, timeout: float = 120.0) -> dict[str, Any]:
        self.say(cmd)
        return self.read(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def wait_connected(agent: Any, pid: int, timeout: float = 60.0) -> None:
    """Until the agent's status shows pid connected and with its hooks announced."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent.control("status").body
        if status.get("connected", {}).get(RELOCATE_UID, {}).get(str(pid)):
            return
        time.sleep(0.1)
    raise TimeoutError(f"pid {pid} never connected to the agent with its hooks")


def _nvml_settled(read: Callable[[], int], ok: Callable[[int], bool], timeout: float = 10.0) -> int:
    """NVML's per-process numbers lag a little: read until ok or timeout."""
    deadline = time.monotonic() + timeout
    value = read()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = read()
    return value


def _relocate_once(
    agent: Any, pod: PodChild, target: Target, gb: float, *, park: str, nvml: Nvml | None
) -> list[Row]:
    """suspend-pod to target, look, resume-pod, compare: two rows."""
    n = int(gb * GB)
    agent_pid = agent.popen.pid
    pod_before = nvml.process_used(pod.pid, 0) if nvml else None
    agent_before = (
        nvml.process_used(agent_pid, target.gpu) if nvml and target.gpu is not None else None
    )
    t_s, reply = timed(
        functools.partial(
            agent.control, "suspend-pod", pod_uid=RELOCATE_UID, target=target.name, timeout=900
        )
    )
    if not reply.ok:
        raise RuntimeError(f"suspend-pod: {reply.error_code}: {reply.error_message}")
    live_suspended = int(pod.ask("live")["live"])
    pod_suspended = (
        _nvml_settled(
            lambda: nvml.process_used(pod.pid, 0),
            # Wait only where NVML attributes the pod's memory to its PID at all.
            lambda v: pod_before is None or pod_before < 0.9 * n or pod_before - v >= 0.9 * n,
        )
        if nvml
        else None
    )
    agent_suspended = (
        nvml.process_used(agent_pid, target.gpu) if nvml and target.gpu is not None else None
    )
    t_r, reply = timed(
        functools.partial(agent.control, "resume-pod", pod_uid=RELOCATE_UID, timeout=900)
    )
    if not reply.ok:
        raise RuntimeError(f"resume-pod: {reply.error_code}: {reply.error_message}")
    m = Relocated(
        nbytes=n,
        live_before=int(pod.ready["live"]),
        live_suspended=live_suspended,
        live_resumed=int(pod.ask("live")["live"]),
        digest_same=pod.ask("digest", timeout=300)["digest"] == pod.ready["digest"],
        pod_nvml_before=pod_before,
        pod_nvml_suspended=pod_suspended,
        agent_nvml_before=agent_before,
        agent_nvml_suspended=agent_suspended,
    )
    return relocation_rows(target, gb, m, suspend_s=t_s, resume_s=t_r, park=park)


def check_relocation(
    gb: float,
    targets: Sequence[Target],
    *,
    park_base: Path,
    park: str,
    nvml: Nvml | None,
    backend: str = "nvml",
    device: str = "cuda:0",
) -> list[Row]:
    """One agent and one pod process for this size; each target in turn.

    ``backend``/``device`` exist for the CPU test of this orchestration
    (simulated agent, host tensors, memfd exports); the check uses the defaults.
    """
    import shutil
    import signal
    import subprocess
    import tempfile

    from tests.support.agent_fakes import AgentProcess  # the repo root is on sys.path

    n = int(gb * GB)
    root = Path(tempfile.mkdtemp(prefix="rlix-gpu-check-"))
    park_dir = root / "no-park-dir"  # replaced below; rmtree of a missing path is a no-op
    agent: AgentProcess | None = None
    pod: PodChild | None = None
    rows: list[Row] = []
    todo = list(targets)
    try:
        try:
            park_dir = Path(tempfile.mkdtemp(prefix="rlix-gpu-check-park-", dir=park_base))
            agent = AgentProcess(
                root,
                pods={RELOCATE_UID: RELOCATE_POD},
                backend=backend,
                park_dir=park_dir,
                suspend_timeout_s=600,
            )
            agent.start(timeout=180)
            pod = PodChild(agent.socket, n, device)
            agent.put_in_pod(pod.pid, RELOCATE_UID)
            pod.say("go")
            pod.ready = pod.read(timeout=600)
            if pod.ready.get("event") != "ready":
                raise RuntimeError(f"the pod process said {pod.ready!r}")
            wait_connected(agent, pod.pid)
            while todo:
                rows += _relocate_once(agent, pod, todo[0], gb, park=park, nvml=nvml)
                todo.pop(0)
        except Exception as exc:
            tail = agent.log_text() if agent is not None and agent.log.exists() else ""
            print(f"relocation {gb:g} GB failed: {exc}\nagent log tail:\n{tail}", file=sys.stderr)
            for i, target in enumerate(todo):
                why = (
                    f"FAILED: {type(exc).__name__}: {exc}; agent log: {one_line_tail(tail)}"
                    if i == 0
                    else "skipped: an earlier step failed"
                )
                rows.append(Row(f"relocate -> {target.label}", gb, None, None, None, why))
    finally:
        try:
            if pod is not None:
                pod.close()
        finally:
            try:
                if agent is not None:
                    try:
                        agent.kill(signal.SIGTERM)
                    except subprocess.TimeoutExpired:
                        agent.kill(signal.SIGKILL)
            finally:
                shutil.rmtree(park_dir, ignore_errors=True)  # on /dev/shm: host memory
                shutil.rmtree(root, ignore_errors=True)
    return rows


def run_relocation(
    relocate_gb: Sequence[float], free_device: Sequence[int], nvml: Nvml | None
) -> list[Row]:
    import tempfile

    targets = relocation_targets(len(free_device))
    disk_dir = Path(tempfile.gettempdir())
    rows: list[Row] = []
    for gb in relocate_gb:
        n = int(gb * GB)
        park_base, park = choose_park_base(
            n,
            shm_dir=SHM_DIR,
            shm_free=free_bytes(SHM_DIR),
            disk_dir=disk_dir,
            disk_free=free_bytes(disk_dir),
        )
        runnable: list[Target] = []
        for target in targets:
            skip = device_skip_reason(n, target, free_device)
            if park_base is None:
                skip = park
            if skip is not None:
                rows.append(
                    Row(f"relocate -> {target.label}", gb, None, None, None, f"skipped: {skip}")
                )
            else:
                runnable.append(target)
        if runnable and park_base is not None:
            rows += check_relocation(gb, runnable, park_base=park_base, park=park, nvml=nvml)
    return rows


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
    free_devs = [int(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())]
    rows += run_relocation(relocate_gb, free_devs, nvml)
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
    bad = [r for r in rows if is_failure(r.result)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
