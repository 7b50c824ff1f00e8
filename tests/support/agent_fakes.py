"""Run a real agent process against a fake proc tree (tests and benchmarks).

Like ``kopf.testing``: the agent under test is the real ``rlix-node-agent``
program, started as a subprocess with ``--no-kube`` and the simulated backend.
Only the proc root is fake, so peer authentication still starts from the
kernel's ``SO_PEERCRED``: the harness writes ``<proc>/<pid>/cgroup`` for the
real PIDs it wants the agent to see as pods (or as host processes).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from rlix.agent.publishing import read_published
from rlix.core import agent_protocol as proto
from rlix.devcluster.processes import free_port

# The real agent program, but it asks the kernel (prctl PR_SET_PDEATHSIG = 1)
# to SIGTERM it when the test or benchmark that started it dies, so a killed
# run leaves no agent behind.
_BOOT = (
    "import ctypes, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
    "from rlix.agent.main import main; sys.exit(main(sys.argv[1:]))"
)
HOST_CGROUP = "0::/user.slice/user-0.slice/session-1.scope\n"


def pod_cgroup(uid: str, *, driver: str = "systemd") -> str:
    """A cgroup v2 file as the kubelet would lay it out for a pod's container."""
    if driver == "systemd":
        slice_uid = uid.replace("-", "_")
        return (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-0123abcd.scope\n"
        )
    return f"0::/kubepods/burstable/pod{uid}/0123abcd\n"


class AgentProcess:
    def __init__(
        self,
        root: Path,
        *,
        pods: dict[str, str] | None = None,
        sim_gpus: int = 2,
        sim_gpu_memory_mib: int = 81920,
        suspend_timeout_s: float = 30.0,
        node: str = "node-a",
        backend: str = "simulated",
        park_dir: Path | None = None,
        control_pod_uid: str = "",
        kubeconfig: Path | None = None,
        metrics_port: int = 0,
        dra: bool = False,
        extra_args: tuple[str, ...] = (),
        nofile: int | None = None,
    ) -> None:
        self.root = root
        self._nofile = nofile  # the agent's RLIMIT_NOFILE (None: inherited)
        self.metrics_port = metrics_port
        self.proc = root / "proc"
        self.state_dir = root / "state"
        self.park_dir = park_dir or root / "parked"
        self.socket = root / "run" / "agent.sock"
        self.node = node
        self._pods = dict(pods or {})
        # backend="nvml" runs the real-GPU agent (hack/gpu-check.py); only the
        # proc tree that maps PIDs to pods is still the harness's.
        sim = [f"--sim-gpus={sim_gpus}", f"--sim-gpu-memory-mib={sim_gpu_memory_mib}"]
        # With a kubeconfig the agent names pods and publishes through that API
        # server (the e2e tier); without one, --pod-map and published.jsonl.
        kube = (
            [f"--kubeconfig={kubeconfig}"]
            if kubeconfig is not None
            else ["--no-kube", f"--pod-map={root / 'pods.json'}"]
        )
        # Publishing gpu.rlix.io slices marks the node as shared by claims, which
        # changes how the operator places every later test's pods on it: only a
        # test of DRA itself (on its own cluster) asks for it.
        if kubeconfig is not None and not dra:
            kube.append("--no-dra")
        self._args = [
            *kube,
            f"--backend={backend}",
            *(sim if backend == "simulated" else []),
            f"--socket={self.socket}",
            f"--state-dir={self.state_dir}",
            f"--park-dir={self.park_dir}",
            f"--proc-root={self.proc}",
            f"--node-name={node}",
            f"--suspend-timeout={suspend_timeout_s}",
            f"--control-pod-uid={control_pod_uid}",
            "--publish-interval=0.2",
            "--overrun-interval=0.3",
            "--log-level=WARNING",
            "--metrics-host=127.0.0.1",
        ]
        self._extra_args = extra_args  # after --metrics-port, which start() adds
        self.popen: subprocess.Popen[bytes] | None = None
        self.log = root / "agent.log"
        self.set_cgroup(os.getpid(), HOST_CGROUP)  # the test itself is a host process

    def set_cgroup(self, pid: int, text: str) -> None:
        d = self.proc / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(text)

    def put_in_pod(self, pid: int, uid: str, *, driver: str = "systemd") -> None:
        self.set_cgroup(pid, pod_cgroup(uid, driver=driver))

    def start(self, timeout: float = 30.0, *, port_tries: int = 3) -> AgentProcess:
        (self.root / "pods.json").write_text(json.dumps(self._pods))
        logged = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOT,
                    *self._args,
                    f"--metrics-port={self.metrics_port}",
                    *self._extra_args,
                ],
                stdout=log,
                stderr=log,
            )
        if self._nofile is not None:  # applies to every descriptor it opens from now on
            limit = (self._nofile, self._nofile)
            resource.prlimit(self.popen.pid, resource.RLIMIT_NOFILE, limit)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                # The metrics port was free when chosen, but another process on
                # the machine (a second test session) may bind it first: choose
                # again rather than fail on a race the test is not about.
                since = self.log.read_bytes()[logged:]
                if self.metrics_port and port_tries > 1 and b"Address already in use" in since:
                    self.metrics_port = free_port()
                    return self.start(timeout, port_tries=port_tries - 1)
                raise RuntimeError(f"agent exited with {self.popen.returncode}: {self.log_text()}")
            try:
                self.control(proto.OP_STATUS, timeout=1.0)
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"agent did not come up: {self.log_text()}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Say what it was doing (faulthandler on SIGUSR1), then make sure
                # it is gone, so one hung agent fails one test, not the next too.
                self.popen.send_signal(signal.SIGUSR1)
                time.sleep(1.0)
                self.popen.kill()
                self.popen.wait()
                self.popen = None
                raise AssertionError(
                    f"agent did not exit within 30 s of signal {sig}: {self.log_text()}"
                ) from None
        self.popen = None

    def control(self, op: str, *, timeout: float = 60.0, **args: Any) -> proto.Reply:
        """One request/reply on a fresh connection, as a controller would."""
        return exchange(self.socket, proto.encode_request(1, op, **args), timeout=timeout)

    def metrics(self) -> str:
        """The agent's /metrics page (needs ``metrics_port``)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def published(self) -> dict[tuple[str, str], dict[str, str]]:
        return read_published(self.state_dir / "published.jsonl")

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill(signal.SIGTERM)


def exchange(path: Path, line: bytes, *, timeout: float = 10.0) -> proto.Reply:
    """Send one raw line and read one reply (raw lines let tests send garbage)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(line)
        with sock.makefile("rb") as reader:
            reply = proto.decode(reader.readline())
    if not isinstance(reply, proto.Reply):
        raise AssertionError(f"expected a reply, got {reply!r}")
    return reply
