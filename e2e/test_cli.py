"""`rlix top`, `rlix describe` and the kubectl plugin read a real API server.

No operator runs here: the test writes an RLJob, its status (through the status
subresource, as the operator does) and a labelled pod, then checks what the CLI
prints. The operator's own tests cover how that status comes about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import apply, pod, wait_for
from rlix.core import names
from rlix.devcluster.cluster import wait_established

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "crds" / "rlix.io_rljobs.yaml"


def _rlix(
    cluster: Any, *args: str, plugin: bool = False, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig or cluster.kubeconfig),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "COLUMNS": "200",
    }
    if plugin:  # kubectl finds kubectl-rlix on PATH
        cmd = [str(cluster.bin_dir / "kubectl"), "rlix", *args]
    else:
        cmd = [sys.executable, "-m", "rlix.cli.main", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=60)


def _job(cluster: Any, namespace: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(CRD))
    wait_established(cluster.kubectl, "rljobs.rlix.io")
    apply(
        cluster,
        namespace,
        {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {"name": "grpo"},
            "spec": {
                "priority": 10,
                "roles": [
                    {
                        "name": "policy",
                        "kind": "trainer",
                        "replicas": 1,
                        "gpusPerReplica": 2,
                        "image": "trainer:1",
                        "gpuMemoryMiB": {"training": 60000},
                    }
                ],
            },
        },
    )
    status = {
        "status": {
            "state": "Running",
            "phase": "training",
            "iterations": 3,
            "gpus": 2,
            "roles": [
                {"name": "policy", "phase": "training", "bound": 1, "ready": 1, "replicas": 1}
            ],
        }
    }
    cluster.kubectl(
        "patch",
        "rljob",
        "grpo",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    p = pod("grpo-policy-0", gpus=2, labels={names.LABEL_JOB: "grpo", names.LABEL_ROLE: "policy"})
    p["metadata"]["annotations"] = {
        names.ANNOTATION_PHASE: "training",
        names.ANNOTATION_SUSPENDED: "true",
        names.ANNOTATION_GPU_MEMORY_MIB: '{"training": 60000}',
    }
    apply(cluster, namespace, p)


def test_top_and_describe_read_the_cluster(cluster: Any, namespace: str) -> None:
    _job(cluster, namespace)
    top = _rlix(cluster, "top", "--once", "-n", namespace)
    assert top.returncode == 0, top.stderr
    line = next(x for x in top.stdout.splitlines() if " grpo " in x)
    assert "Running" in line and "training" in line and "policy:training" in line
    assert "suspended pods 1" in top.stdout
    assert "parked ~117.2 GiB" in top.stdout  # 60000 MiB x 2 GPUs

    described = _rlix(cluster, "describe", "rljob", "grpo", "-n", namespace)
    assert described.returncode == 0, described.stderr
    assert "Iterations:         3" in described.stdout
    assert "grpo-policy-0" in described.stdout

    plugin = _rlix(cluster, "top", "--once", "-n", namespace, plugin=True)
    assert plugin.returncode == 0, plugin.stderr
    assert "grpo" in plugin.stdout


def test_describe_missing_job_says_so(cluster: Any, namespace: str) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(CRD))
    out = _rlix(cluster, "describe", "rljob", "nope", "-n", namespace)
    assert out.returncode == 1
    assert f"rljob {namespace}/nope: Not Found" in out.stderr


def _kubeconfig_in(cluster: Any, namespace: str, tmp_path: Path) -> Path:
    """The cluster's kubeconfig with the current context set to ``namespace``
    (what `kubectl config set-context --current --namespace=...` writes)."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    current = config["current-context"]
    for entry in config["contexts"]:
        if entry["name"] == current:
            entry["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_namespaces_and_output_formats_as_kubectl(
    cluster: Any, namespace: str, tmp_path: Path
) -> None:
    _job(cluster, namespace)
    here = _kubeconfig_in(cluster, namespace, tmp_path)

    def jobs(*args: str) -> list[tuple[str, str]]:
        out = _rlix(cluster, "top", "-o", "json", *args, kubeconfig=here)
        assert out.returncode == 0, out.stderr
        return [(j["namespace"], j["name"]) for j in json.loads(out.stdout)["rljobs"]]

    assert jobs() == [(namespace, "grpo")]  # the context's namespace
    assert (namespace, "grpo") in jobs("-A")
    assert jobs("-n", "default") == []
    # Other tests' namespaces are deleted without waiting, so their RLJobs may
    # vanish between two listings: compare until two back-to-back ones agree
    # (a CI run once saw one job fewer in the second).
    wait_for(
        "--all-namespaces to list what -A lists",
        lambda: jobs("--all-namespaces") == jobs("-A") or None,
    )

    as_yaml = _rlix(cluster, "describe", "rljob", "grpo", "-o", "yaml", kubeconfig=here)
    assert as_yaml.returncode == 0, as_yaml.stderr
    described = yaml.safe_load(as_yaml.stdout)
    assert described["rljob"]["metadata"]["namespace"] == namespace
    assert described["rljob"]["status"]["iterations"] == 3
    assert "grpo-policy-0" in [p["name"] for p in described["pods"]]

    wide = _rlix(cluster, "top", "--once", "-o", "wide", kubeconfig=here)
    assert wide.returncode == 0, wide.stderr
    assert "PARKED" in wide.stdout and " grpo " in wide.stdout


def test_the_views_pod_patches_say_when_the_pod_is_gone(cluster: Any, namespace: str) -> None:
    """The demo patches pods it listed a moment ago; one deleted since is gone,
    not an error (a chaos run stopped on that 404)."""
    from rlix.views.kube import Kube

    apply(cluster, namespace, pod("p"))
    kube = Kube(str(cluster.kubeconfig))
    note = {"metadata": {"annotations": {names.ANNOTATION_GPU_INDICES: "0"}}}
    assert kube.patch_pod(namespace, "p", note)
    assert kube.patch_pod_status(namespace, "p", {"status": {"phase": "Running"}})
    cluster.kubectl("delete", "pod", "p", "-n", namespace, "--wait=true", "--grace-period=0")
    assert not kube.patch_pod(namespace, "p", note)
    assert not kube.patch_pod_status(namespace, "p", {"status": {"phase": "Succeeded"}})
