"""The session fixture cleans up after failures, Ctrl-C, SIGTERM and SIGKILL.

Each case runs a child pytest session that starts its own cluster (the same
fixture every e2e test uses), then fails or is interrupted; afterwards no
process of that cluster may run and its API server port must be free.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from e2e.kube import wait_for
from e2e.probe_session import start_probe_session
from rlix.devcluster import processes
from rlix.devcluster.cluster import default_workdir, reap_stale_clusters
from rlix.devcluster.toolchain import bin_dir

PROBE = Path(__file__).parent / "probes" / "probe_hold.py"


def _cluster_pids(cluster_dir: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cluster_dir in cmdline and state != "Z":
            pids.append(int(proc.name))
    return pids


def _api_port(cluster_dir: str) -> int:
    config = yaml.safe_load((Path(cluster_dir) / "kubeconfig.yaml").read_text())
    server: str = config["clusters"][0]["cluster"]["server"]
    return int(server.rsplit(":", 1)[1])


def _start_probe(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], dict[str, str], int]:
    child, info = start_probe_session(
        PROBE,
        tmp_path,
        what="probe session to start its cluster",
        timeout_s=180,
        env={"RLIX_PROBE_MODE": mode},
    )
    port = _api_port(info["dir"])
    assert _cluster_pids(info["dir"]), "the probe's cluster should be running"
    (tmp_path / "probe.go").touch()  # let the probe go on (to fail, or to wait)
    return child, info, port


def _assert_gone(info: dict[str, str], port: int) -> None:
    # An exiting process can hide its cmdline while it still holds its sockets:
    # wait for both to be gone rather than checking once.
    wait_for(
        "cluster processes to exit and the API port to be free",
        lambda: (not _cluster_pids(info["dir"]) and not processes.port_in_use(port)) or None,
        timeout_s=60,
    )
    assert not Path(info["dir"]).exists(), "cluster state directory left behind"


@pytest.mark.parametrize(
    ("mode", "sig"),
    [("fail", None), ("hold", signal.SIGINT), ("hold", signal.SIGTERM)],
    ids=["test-fails", "ctrl-c", "sigterm"],
)
def test_session_teardown(tmp_path: Path, mode: str, sig: signal.Signals | None) -> None:
    child, info, port = _start_probe(tmp_path, mode)
    if sig is not None:
        time.sleep(0.5)
        os.kill(child.pid, sig)
    rc = child.wait(timeout=120)
    assert rc != 0
    _assert_gone(info, port)


def test_sigkilled_session_is_reaped_by_the_next(tmp_path: Path) -> None:
    child, info, port = _start_probe(tmp_path, "hold")
    os.killpg(child.pid, signal.SIGKILL)  # no teardown can run
    child.wait(timeout=30)
    # kwokctl's components are daemons of their own: they survive the kill.
    assert _cluster_pids(info["dir"])
    reaped = reap_stale_clusters(default_workdir(), bin_dir(), prefix=info["name"])
    assert reaped == 1
    _assert_gone(info, port)
