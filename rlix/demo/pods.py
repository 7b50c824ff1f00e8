"""The demo's stand-ins for a kubelet's container runtime and the GPU device plugin.

kwok marks pods Running without running anything; this module runs a simulated
trainer process for each bound role pod, maps its PID to the pod for the node
agent (a cgroup file under a private proc root, the way a container's cgroup
names its pod), assigns physical GPU indices like a device plugin, and reports
the process's exit as the pod's phase, as a kubelet would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlix.core.snapshot import Workload
from rlix.demo.workload import DemoJob


@dataclass
class RunningPod:
    namespace: str
    name: str
    uid: str
    node: str
    gpus: list[int]
    proc: subprocess.Popen[bytes]


def cgroup_line(uid: str) -> str:
    """/proc/PID/cgroup of a container of pod ``uid`` (cgroup v2, systemd driver)."""
    slug = uid.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{slug}.slice/cri-containerd-{uid.replace('-', '')}.scope\n"
    )


@dataclass
class PodRuntime:
    workdir: Path
    sockets: dict[str, Path]
    jobs: dict[str, DemoJob]
    gpus_per_node: dict[str, int]
    running: dict[str, RunningPod] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    held: dict[str, set[int]] = field(default_factory=dict)  # node -> GPU indices in use
    # Pods bound but not started yet (a baseline gang still forming): uid -> (node, GPUs).
    reserved: dict[str, tuple[str, list[int]]] = field(default_factory=dict)

    @property
    def proc_root(self) -> Path:
        return self.workdir / "proc"

    def _assign_gpus(self, node: str, count: int) -> list[int] | None:
        used = self.held.setdefault(node, set())
        free = [i for i in range(self.gpus_per_node.get(node, 0)) if i not in used]
        if len(free) < count:
            return None
        chosen = free[:count]
        used.update(chosen)
        return chosen

    def reserve(self, uid: str, workload: Workload) -> list[int] | None:
        """Give a bound pod its GPUs now, before its process starts (None: none free)."""
        if uid in self.reserved:
            return self.reserved[uid][1]
        if workload.node is None or workload.node not in self.sockets:
            return None
        gpus = self._assign_gpus(workload.node, workload.gpus)
        if gpus is not None:
            self.reserved[uid] = (workload.node, gpus)
        return gpus

    def start(self, pod: dict[str, Any], workload: Workload) -> RunningPod | None:
        """Start the pod's process; ``workload`` is the pod as the core reader reads it."""
        meta = pod["metadata"]
        node, uid = workload.node, meta["uid"]
        job = self.jobs.get(workload.job.split("/", 1)[-1])
        role = next((r for r in job.roles if r.name == workload.role), None) if job else None
        if job is None or role is None or node is None or node not in self.sockets:
            return None
        # A pod with a pinned claim runs on the GPUs its claim names (the
        # operator's plan); others get free GPUs, as a device plugin would give
        # (already at bind for a pod that waited for its gang: ``reserve``).
        reserved = self.reserved.pop(uid, None)
        gpus = (
            list(workload.gpu_indices)
            or (reserved[1] if reserved else None)
            or self._assign_gpus(node, workload.gpus)
        )
        if workload.gpu_indices:
            self.held.setdefault(node, set()).update(workload.gpu_indices)
        if gpus is None:
            return None
        ready = self.workdir / "ready" / uid
        ready.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "RLIX_AGENT_SOCKET": str(self.sockets[node]),
            "RLIX_DEMO_READY": str(ready),
        }
        log = self.workdir / "logs" / "pods" / f"{meta['name']}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "rlix.demo.trainer",
            "--kind",
            role.kind,
            "--iterations",
            str(job.iterations),
            "--phase-seconds",
            json.dumps(job.phase_seconds),
            "--memory",
            json.dumps(role.memory_mib),
            "--gpu-indices",
            ",".join(map(str, gpus)),
            "--seed",
            str(zlib.crc32(meta["name"].encode()) % 10_000),
        ]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        entry = self.proc_root / str(proc.pid)
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "cgroup").write_text(cgroup_line(uid))
        ready.touch()
        running = RunningPod(meta["namespace"], meta["name"], uid, node, gpus, proc)
        self.running[uid] = running
        return running

    def release(self, uid: str) -> None:
        reserved = self.reserved.pop(uid, None)
        if reserved is not None:
            self.held.get(reserved[0], set()).difference_update(reserved[1])
        pod = self.running.pop(uid, None)
        if pod is None:
            return
        if pod.proc.poll() is None:
            pod.proc.terminate()
            try:
                pod.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pod.proc.kill()
                pod.proc.wait()
        self.held.get(pod.node, set()).difference_update(pod.gpus)

    def exited(self) -> list[tuple[RunningPod, int]]:
        done = []
        for uid, pod in list(self.running.items()):
            rc = pod.proc.poll()
            if rc is not None:
                done.append((pod, rc))
                self.finished.add(uid)
                self.release(uid)
        return done

    def stop_all(self) -> None:
        for uid in list(self.running):
            self.release(uid)
