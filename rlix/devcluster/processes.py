"""Small helpers for the processes a local cluster runs beside kwokctl's own,
and for RLix's own programs run as subprocesses (demo, e2e tier)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def spawn_detached(argv: list[str], *, log: Path) -> int:
    """Start ``argv`` in a new session with output appended to ``log``; return its pid.

    No Popen object is kept: the process is meant to outlive the caller (``rlix
    cluster up`` exits while the scheduler runs on), and is stopped by pid.
    """
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now.

    Why not ``bind(0)``: the kernel then picks from the ephemeral range, the same
    range every outgoing connection takes its source port from. Between our
    choice and the component's own bind, any of the session's many client
    connections (to etcd, the API server) could take the port; CI saw exactly
    that ("address already in use" for the extender). Ports below the ephemeral
    range are never handed out that way. All candidates are held open together
    until every one is chosen, so no number is returned twice in one call, and
    no port this process handed out before is offered again while others are
    left (``_HANDED_OUT``).
    """
    low, _ = _ephemeral_range()
    span = range(_FIRST_PORT, max(low, _FIRST_PORT + 1000))
    fresh = [p for p in span if p not in _HANDED_OUT]
    try:
        chosen = _bind_free(fresh, count)
    except RuntimeError:
        if len(fresh) == len(span):
            raise
        # Too few left that were never handed out: start the round again
        # (those handed out long ago are bound by now, or given back).
        _HANDED_OUT.clear()
        chosen = _bind_free(list(span), count)
    _HANDED_OUT.update(chosen)
    return chosen


# Ports free_ports() handed out in this process. A port is bound by its
# component some time after it is chosen (an e2e extender's only after its
# cluster is up, and the cluster picks six ports of its own in between);
# until then it looks free and could be handed out again. CI saw an extender
# find its port taken when it started.
_HANDED_OUT: set[int] = set()


def _bind_free(candidates: list[int], count: int) -> list[int]:
    """``count`` of ``candidates``, at random, each bound (free) at the moment."""
    rng = random.Random()
    sockets: list[socket.socket] = []
    try:
        for port in rng.sample(candidates, len(candidates)):
            if len(sockets) == count:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
        if len(sockets) < count:
            top = max(candidates, default=0) + 1
            raise RuntimeError(f"only {len(sockets)} of {count} free ports below {top}")
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


_FIRST_PORT = 20000  # above the well-known and most registered service ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    # Reap it first if it is our own exited child, so it does not linger as a zombie.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still "exists" for kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def stop_process_group(pid: int, *, grace_s: float = 5.0) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL what remains."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def url_ok(url: str, *, timeout_s: float = 1.0) -> bool:
    """True when ``url`` (http or https) answers 200; self-signed certificates are
    accepted, which is fine for the loopback endpoints this is used on."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class Component:
    """One of RLix's own programs run as a subprocess in its own process group,
    output to a log file (the demo and the e2e tier start them this way)."""

    name: str
    argv: list[str]
    log: Path
    cwd: Path | None = None
    grace_s: float = 5.0  # between SIGTERM and SIGKILL on stop
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.cwd,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL what lingers; the ports are free after."""
        if self.proc is None:
            return
        stop_process_group(self.proc.pid, grace_s=self.grace_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL the group: no cleanup handler runs, as when the node dies."""
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def wait_until(
    what: str, component: Component, probe: Callable[[], object], timeout_s: float = 60
) -> None:
    """Poll ``probe`` until truthy; fail at once, with the log, if the component exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not component.alive():
            raise RuntimeError(f"{component.name} exited while starting:\n{component.tail()}")
        if probe():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {timeout_s:.0f}s:\n{component.tail()}")
