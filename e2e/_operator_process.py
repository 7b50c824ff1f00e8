"""Run the real operator (``python -m rlix.operator``) as a subprocess for e2e tests.

A subprocess, not an in-process task, so a test can SIGKILL it mid-reconcile
exactly as a node failure would, and restart it from nothing but the cluster.
"""

from __future__ import annotations

import os
import signal
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlix.devcluster.cluster import wait_established
from rlix.devcluster.processes import Component, free_ports, url_ok, wait_until

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "crds" / "rlix.io_rljobs.yaml"


class OperatorProcess:
    def __init__(
        self,
        cluster: Any,
        workdir: Path,
        *,
        backoff_base_s: float = 0.5,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.cluster = cluster
        self.extra_args = extra_args
        self.workdir = workdir
        # e.g. --no-webhook, --leader-elect: a webhook-less operator is ready once live.
        self.extra_args = extra_args
        self.webhook = "--no-webhook" not in extra_args
        self.webhook_port, self.metrics_port, self.liveness_port = free_ports(3)
        self.backoff_base_s = backoff_base_s
        self.log = workdir / "operator.log"
        self.component: Component | None = None

    def start(self, *, timeout_s: float = 60) -> None:
        cmd = [
            sys.executable, "-m", "rlix.operator",
            "--kubeconfig", str(self.cluster.kubeconfig),
            "--webhook-port", str(self.webhook_port),
            "--cert-dir", str(self.workdir / "certs"),
            "--metrics-port", str(self.metrics_port),
            "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz",
            "--backoff-base-seconds", str(self.backoff_base_s),
            *self.extra_args,
        ]  # fmt: skip
        self.component = Component("operator", cmd, self.log, cwd=ROOT, grace_s=15)
        self.component.start()
        wait_until("operator", self.component, self._ready, timeout_s)

    def _ready(self) -> bool:
        live = url_ok(f"http://127.0.0.1:{self.liveness_port}/healthz")
        return live and (not self.webhook or self._webhook_registered())

    def _webhook_registered(self) -> bool:
        result = self.cluster.kubectl(
            "get", "validatingwebhookconfiguration", "rlix.io",
            "-o", "jsonpath={.webhooks[0].clientConfig.url}", check=False,
        )  # fmt: skip
        return f":{self.webhook_port}/" in result.stdout

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets but answers nothing (a hung operator)."""
        assert self.component is not None and self.component.proc is not None
        os.kill(self.component.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.component is not None and self.component.proc is not None
        os.kill(self.component.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no cleanup handler runs, as when the node dies."""
        if self.component is not None:
            self.component.kill()

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_operator(
    cluster: Any, workdir: Path, *, extra_args: tuple[str, ...] = ()
) -> Iterator[OperatorProcess]:
    """CRD installed, operator up with its webhook; webhook config removed after."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(cluster.kubectl, "rljobs.rlix.io")
    operator = OperatorProcess(cluster, workdir, extra_args=extra_args)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            cluster.kubectl("delete", kind, "rlix.io", "--ignore-not-found", check=False)


# The H200 measurement the shipped chart points at: what an operator "given a
# matrix" decides with in these tests.
MATRIX = Path(__file__).resolve().parent.parent / "bench" / "results" / "gpu_interference.json"


def operator_with_extender(
    cluster: Any,
    workdir: Path,
    *,
    extra_args: tuple[str, ...] = (),
    extender_args: tuple[str, ...] = (),
) -> Iterator[OperatorProcess]:
    """Body of a module-scoped fixture: operator + the real extender so pods bind
    (``extra_args`` the operator's, ``extender_args`` the extender's)."""
    import pytest

    from e2e._extender_process import ExtenderProcess

    port = int(getattr(cluster, "extender_port", 0))
    if not port:
        pytest.skip("needs the session's local control plane (extender port on 127.0.0.1)")
    extender = ExtenderProcess(
        port, cluster.kubeconfig, log=workdir / "extender.log", extra_args=extender_args
    )
    extender.start()
    try:
        with running_operator(cluster, workdir, extra_args=extra_args) as operator:
            yield operator
    finally:
        extender.stop()


def operator_with_matrix(
    cluster: Any, workdir: Path, *extra_args: str
) -> Iterator[OperatorProcess]:
    """``operator_with_extender`` with ``--interference MATRIX`` (and ``extra_args``)."""
    yield from operator_with_extender(
        cluster, workdir, extra_args=("--interference", str(MATRIX), *extra_args)
    )
