"""Start and stop RLix's own processes (operator, extender, node agents) for the demo.

They run as the same entry points the images run, as subprocesses whose output
goes to log files under the demo's work directory.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlix.core.policy.placement.rules_file import Source
from rlix.devcluster import processes
from rlix.devcluster.processes import Component, url_ok, wait_until


def rules_args(interference: Source | None) -> list[str]:
    """The sharing flags the chart gives the extender and the operator
    (``sharing.builtinMatrix``, or a file as from ``sharing.interferenceConfigMap``;
    ``--no-phase-gate``: the demo's node agents run no phase gate, unlike the
    chart's by default, since its trainers sleep through their phases and lose
    nothing where they overlap); none: rules 1-3."""
    return [] if interference is None else ["--interference", str(interference), "--no-phase-gate"]


@dataclass
class Components:
    workdir: Path
    kubeconfig: Path
    started: list[Component] = field(default_factory=list)

    def _py(self, module: str, *args: str) -> list[str]:
        return [sys.executable, "-m", module, *args]

    def extender(self, port: int, interference: Source | None = None) -> Component:
        c = Component(
            "extender",
            self._py(
                "rlix.extender",
                "--port",
                str(port),
                "--kubeconfig",
                str(self.kubeconfig),
                *rules_args(interference),
            ),
            self.workdir / "logs" / "extender.log",
        )
        c.start()
        self.started.append(c)
        wait_until("extender", c, lambda: url_ok(f"http://127.0.0.1:{port}/readyz"))
        return c

    def operator(self, interference: Source | None = None) -> Component:
        live, webhook, metrics = processes.free_ports(3)
        c = Component(
            "operator",
            self._py(
                "rlix.operator",
                "--kubeconfig",
                str(self.kubeconfig),
                "--webhook-port",
                str(webhook),
                "--cert-dir",
                str(self.workdir / "certs"),
                "--metrics-port",
                str(metrics),
                "--liveness",
                f"http://127.0.0.1:{live}/healthz",
                "--backoff-base-seconds",
                "1",
                *rules_args(interference),
            ),
            self.workdir / "logs" / "operator.log",
        )
        c.start()
        self.started.append(c)
        wait_until("operator", c, lambda: url_ok(f"http://127.0.0.1:{live}/healthz"), 90)
        return c

    def agent(
        self,
        node: str,
        *,
        gpus: int,
        gpu_memory_mib: int,
        proc_root: Path,
        dra: bool = True,
        overcommit: float = 1.0,
    ) -> Path:
        """A simulated node agent; ``dra=False`` (the exclusive baseline) publishes no slice.

        ``overcommit`` > 1 publishes headroom a waiting job is admitted into when
        lower-priority rollouts park for it (docs/conductor.md)."""
        socket = self.workdir / "agents" / f"{node}.sock"
        socket.parent.mkdir(parents=True, exist_ok=True)
        c = Component(
            f"agent/{node}",
            self._py(
                "rlix.agent",
                "--backend",
                "simulated",
                "--node-name",
                node,
                "--socket",
                str(socket),
                "--state-dir",
                str(self.workdir / "state" / node),
                "--park-dir",
                str(self.workdir / "parked" / node),
                "--kubeconfig",
                str(self.kubeconfig),
                "--proc-root",
                str(proc_root),
                "--sim-gpus",
                str(gpus),
                "--sim-gpu-memory-mib",
                str(gpu_memory_mib),
                "--publish-interval",
                "1",
                *((f"--memory-overcommit={overcommit:g}",) if dra else ("--no-dra",)),
            ),
            self.workdir / "logs" / f"agent-{node}.log",
        )
        c.start()
        self.started.append(c)
        wait_until(f"agent on {node}", c, socket.exists)
        return socket

    def stop_all(self) -> None:
        for c in reversed(self.started):
            c.stop()
        self.started.clear()
