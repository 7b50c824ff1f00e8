"""The rlix-node-agent command line, and the transparent-suspend feature probe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlix.agent.driver_checkpoint import CheckpointUnsupportedError, CudaDriverCheckpointer
from rlix.agent.main import main


def test_help_teaches_every_option() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlix.agent", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for option in (
        "--socket",
        "--state-dir",
        "--backend",
        "--node-name",
        "--kubeconfig",
        "--no-kube",
        "--memory-overcommit",
        "--no-dra",
        "--kubelet-plugin",
        "--kubelet-dir",
        "--cdi-dir",
        "--proc-root",
        "--phase-gate",
        "--phase-gate-max-wait",
        "--interference",
        "{nvml,simulated}",
        "SO_PEERCRED",
        "examples:",
    ):
        assert option in out, option


def test_node_name_is_required(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(["--no-kube", "--backend=simulated", "--node-name=", f"--state-dir={tmp_path}"]) == 2
    )
    assert "--node-name" in capsys.readouterr().err


def test_pod_map_needs_no_kube(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pods = tmp_path / "pods.json"
    pods.write_text("{}")
    assert main(["--node-name=n", f"--pod-map={pods}"]) == 2
    assert "only applies with --no-kube" in capsys.readouterr().err


def test_bad_pod_map_entry_is_named(tmp_path: Path) -> None:
    pods = tmp_path / "pods.json"
    pods.write_text('{"abc": "no-slash"}')
    args = [
        "--no-kube",
        "--backend=simulated",
        "--node-name=n",
        f"--pod-map={pods}",
        f"--state-dir={tmp_path}",
        f"--socket={tmp_path / 's.sock'}",
    ]
    with pytest.raises(SystemExit, match="'abc' must map to 'namespace/name'"):
        main(args)


def test_kubeconfig_and_no_kube_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--no-kube", "--kubeconfig=/x", "--node-name=n"])
    assert "not allowed with" in capsys.readouterr().err


def test_driver_checkpoint_reports_why_it_is_unsupported_here() -> None:
    ckpt = CudaDriverCheckpointer()
    reason = ckpt.unsupported_reason()
    if reason is None:
        pytest.skip("this machine has a driver that can checkpoint processes")
    assert "driver" in reason or "cuda" in reason.lower()
    with pytest.raises(CheckpointUnsupportedError, match=r"driver|cuda"):
        ckpt.suspend(1)


def test_an_overcommit_below_one_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--node-name=n", "--no-kube", "--memory-overcommit=0.5"]) == 2
    assert "--memory-overcommit must be >= 1, got 0.5" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["--no-kube", "--no-dra"])
def test_the_kubelet_plugin_needs_kube_and_dra(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--node-name=n", "--kubelet-plugin", mode]) == 2
    assert "--kubelet-plugin needs the API server and DRA" in capsys.readouterr().err
