"""The second kube-scheduler (profile ``rlix-scheduler``) as a local process.

Used by the local cluster and by the demo when it attaches to an existing
cluster (kind): extenders are global to a scheduler process, so RLix runs its
own process beside whatever default scheduler the cluster has.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from rlix.devcluster import manifests, processes


def command(bin_dir: Path, config_path: Path, port: int) -> list[str]:
    """The kube-scheduler command line for ``config_path`` (also what the throughput
    benchmark runs its no-extender baseline with, so only the config differs)."""
    return [
        str(bin_dir / "kube-scheduler"),
        f"--config={config_path}",
        "--bind-address=127.0.0.1",
        f"--feature-gates={manifests.FEATURE_GATES}",
        f"--secure-port={port}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--v=2",
    ]


def start(
    *, bin_dir: Path, kubeconfig: Path, extender_url: str, workdir: Path, leader_elect: bool
) -> tuple[int, int]:
    """Start it detached, wait until healthy, and return ``(pid, https port)``."""
    port = processes.free_port()
    config = manifests.rlix_scheduler_config(kubeconfig=str(kubeconfig), extender_url=extender_url)
    config["leaderElection"]["leaderElect"] = leader_elect
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "rlix-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = workdir / "logs" / "rlix-scheduler.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    pid = processes.spawn_detached(command(bin_dir, config_path, port), log=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not processes.pid_alive(pid):
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"rlix-scheduler exited during start:\n{tail}")
        if processes.url_ok(f"https://127.0.0.1:{port}/healthz"):
            return pid, port
        time.sleep(0.2)
    processes.stop_process_group(pid)
    raise RuntimeError(f"rlix-scheduler not healthy after 60s; see {log}")
