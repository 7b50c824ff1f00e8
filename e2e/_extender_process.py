"""Run the real RLix extender (``python -m rlix.extender``) as a subprocess.

A subprocess, not an in-process app, because the tests that use it are about
the deployed shape: the real kube-scheduler calls it over HTTP, it learns the
cluster from its own watch, and the outage tests stop it and start it again
exactly as a crashed or redeployed extender would.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlix.devcluster.processes import Component, port_in_use, url_ok, wait_until

ROOT = Path(__file__).resolve().parent.parent


class ExtenderProcess:
    """``python -m rlix.extender --port PORT --kubeconfig KUBECONFIG``, started on demand."""

    def __init__(
        self,
        port: int,
        kubeconfig: str | Path,
        *,
        log: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.port = port
        self.kubeconfig = str(kubeconfig)
        self.extra_args = extra_args
        if log is None:
            fd, name = tempfile.mkstemp(prefix="rlix-extender-", suffix=".log")
            os.close(fd)
            log = Path(name)
        self.log = log
        self.component: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout_s: float = 60) -> None:
        # Another listener on the port (a test stand someone forgot) would answer
        # the scheduler instead of us: refuse rather than test the wrong thing.
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is already in use; cannot start the extender")
        cmd = [
            sys.executable, "-m", "rlix.extender",
            "--port", str(self.port),
            "--kubeconfig", self.kubeconfig,
            "--log-level", "warning",
            *self.extra_args,
        ]  # fmt: skip
        self.component = Component("extender", cmd, self.log, cwd=ROOT, grace_s=15)
        self.component.start()
        try:
            wait_until("extender", self.component, lambda: url_ok(f"{self.url}/readyz"), timeout_s)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL if it lingers; the port is free after."""
        if self.component is not None:
            self.component.stop()
        self.component = None

    def snapshot(self) -> dict[str, Any]:
        """The extender's cache, as ``GET /debug/snapshot`` serves it."""
        with urllib.request.urlopen(f"{self.url}/debug/snapshot", timeout=5) as response:
            doc: dict[str, Any] = json.loads(response.read())
        return doc

    def wait_for_cache(
        self, what: str, check: Callable[[dict[str, Any]], bool], *, timeout_s: float = 60
    ) -> dict[str, Any]:
        """Poll /debug/snapshot until ``check`` holds: the watch has caught up."""
        deadline = time.monotonic() + timeout_s
        doc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            doc = self.snapshot()
            if check(doc):
                return doc
            time.sleep(0.2)
        raise AssertionError(f"extender cache never showed {what} within {timeout_s}s")

    def wait_for_pods(self, namespace: str, *names: str, timeout_s: float = 60) -> dict[str, Any]:
        """Wait until the cache holds every named pod, bound to a node."""
        wanted = {f"{namespace}/{n}" for n in names}

        def seen(doc: dict[str, Any]) -> bool:
            bound = {w["name"] for w in doc["workloads"] if w.get("node")}
            return wanted <= bound

        return self.wait_for_cache(f"pods {sorted(wanted)}", seen, timeout_s=timeout_s)

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_extender(cluster: Any) -> Iterator[ExtenderProcess]:
    """The real extender on the cluster's extender port, stopped (and its log removed) after."""
    extender = ExtenderProcess(cluster.extender_port, cluster.kubeconfig)
    try:
        extender.start()
        yield extender
    except BaseException:
        # The log is the only record of what the extender saw: show it on failure.
        print(f"\n[extender log]\n{extender.tail()}", file=sys.stderr)
        raise
    finally:
        extender.stop()
        extender.log.unlink(missing_ok=True)
