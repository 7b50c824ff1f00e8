"""``helm install`` of the chart on the real node (issue 17, item 2).

The images come from ``make images`` (hack/images.sh: operator, extender, node
agent and the cluster's kube-scheduler as OCI archives, no registry), imported
into the node's containerd, ``imagePullPolicy: Never``. Every component is
pinned to the real node, so every Deployment and the DaemonSet run as real
containers and become Ready through the chart's own probes (the node agent's
through the exec probe values.yaml suggests). An RLJob then runs to Succeeded
through the installed operator, scheduler and extender, and ``helm upgrade``
(a changed value) and ``helm uninstall`` leave nothing of the release behind.

The departures from a real cluster (no kube-proxy on the test node) are in
e2e/probes/real_node_post_render.py, applied as helm's post-renderer.

Run with ``make test-node`` (marker ``realnode``; root).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kube import apply, get_json, wait_for
from e2e.realnode_pods import advertised_gpus, helm
from rlix.core import names
from rlix.devcluster import component_images, realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

# Installs, waits for real containers and runs a job: longer than the default timeout.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "rlix"
POST_RENDER = Path(__file__).parent / "probes" / "real_node_post_render.py"
RELEASE = "rlix-images"  # unique to this branch's tests
LOCAL_REGISTRY = "rlix.local"
GPUS, GPU_MIB = 8, 143_771
COMPONENTS = ("operator", "extender", "scheduler", "node-agent")
RELEASE_LABEL = f"app.kubernetes.io/instance={RELEASE}"
# The trainer finishes after a few seconds: its success is the job's.
TRAINER = ["python3", "-c", "import time; time.sleep(5)"]


@pytest.fixture(scope="module")
def dev(cluster: DevCluster | ExistingCluster, real_node: realnode.RealNode) -> DevCluster:
    """The session's local cluster (``real_node`` has skipped on any other)."""
    assert isinstance(cluster, DevCluster)
    return cluster


@pytest.fixture(scope="module")
def images(dev: DevCluster, real_node: realnode.RealNode) -> dict[str, str]:
    """``make images``' archives imported into the real node: repository -> tag."""
    result = subprocess.run(
        [str(ROOT / "hack" / "images.sh"), str(ROOT / "build" / "images")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "RLIX_TOOLCHAIN_BIN": str(dev.bin_dir), "PYTHON": sys.executable},
    )
    assert result.returncode == 0, f"hack/images.sh failed:\n{result.stderr[-4000:]}"
    tags = {}
    for line in result.stdout.splitlines():
        repository, tag, archive = line.split()
        registry = "registry.k8s.io" if repository == "kube-scheduler" else LOCAL_REGISTRY
        base = f"{registry}/{repository}"
        imported = real_node.ctr("images", "import", "--base-name", base, archive)
        assert imported.returncode == 0, imported.stderr
        listed = real_node.ctr("images", "ls", "-q").stdout.split()
        assert f"{base}:{tag}" in listed, (imported.stdout, imported.stderr)
        tags[repository] = tag
    return tags


def _values(tags: dict[str, str], *, extender_weight: int = 5) -> dict[str, Any]:
    pin = {
        "nodeSelector": {realnode.NODE_LABEL: "true"},
        "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
    }
    values: dict[str, Any] = {}
    for key, image in component_images.COMPONENTS.items():
        values[key] = {
            "image": {
                "registry": LOCAL_REGISTRY,
                "repository": image.repository,
                "tag": tags[image.repository],
                "pullPolicy": "Never",
            },
            **pin,
        }
    # The scheduler keeps the chart's default image, registry.k8s.io/kube-scheduler
    # at the cluster's version: the archive was imported under that very name.
    values["scheduler"] = {
        "image": {"pullPolicy": "Never"},
        "extenderWeight": extender_weight,
        **pin,
    }
    # The exec probe values.yaml suggests: the agent answers on its socket.
    probe = {"exec": {"command": ["rlix", "agent", "--socket", "/run/rlix/agent.sock", "status"]}}
    values["nodeAgent"] |= {
        "backend": "simulated",
        "publishInterval": 1,
        # In the node's private /run (tmpfs): nothing lands on the machine.
        "parkDir": "/run/rlix-agent-parked",
        "readinessProbe": {**probe, "periodSeconds": 5, "timeoutSeconds": 10},
        "livenessProbe": {**probe, "periodSeconds": 20, "timeoutSeconds": 10},
    }
    return values


def _helm_release(dev: DevCluster, verb: str, ns: str, values: dict[str, Any]) -> str:
    return helm(
        dev,
        verb, RELEASE, str(CHART), "--namespace", ns,
        "--wait", "--timeout", "3m",
        "--post-renderer", sys.executable, "--post-renderer-args", str(POST_RENDER),
        "-f", "-",
        input=yaml.safe_dump(values), timeout_s=210,
    )  # fmt: skip


@pytest.fixture(scope="module")
def release(dev: DevCluster, real_node: realnode.RealNode, images: dict[str, str]) -> Iterator[str]:
    """The chart installed on the real node; yields its namespace."""
    ns = f"rlix-helm-{uuid.uuid4().hex[:8]}"
    dev.kubectl("create", "namespace", ns)
    with advertised_gpus(dev, gpus=GPUS, memory_mib=GPU_MIB):
        try:
            try:
                _helm_release(dev, "install", ns, _values(images))
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{_diagnose(dev, ns)}") from None
            yield ns
        finally:
            helm(dev, "uninstall", RELEASE, "--namespace", ns, "--wait") if _installed(
                dev, ns
            ) else None
            dev.kubectl("delete", "namespace", ns, "--wait=true", check=False)


def _installed(dev: DevCluster, ns: str) -> bool:
    listed = json.loads(helm(dev, "list", "--namespace", ns, "-o", "json"))
    return any(r["name"] == RELEASE for r in listed)


def _diagnose(dev: DevCluster, ns: str) -> str:
    """Pods, their events and logs: what a failed install looked like."""
    out = [dev.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout]
    for pod in get_json(dev, "pods", "-n", ns)["items"]:
        name = pod["metadata"]["name"]
        out.append(f"--- {name}: {json.dumps(pod['status'].get('containerStatuses'))}")
        logs = dev.kubectl("logs", "-n", ns, name, "--tail=30", check=False)
        out.append(logs.stdout + logs.stderr)
    events = dev.kubectl("get", "events", "-n", ns, check=False)
    out.append(events.stdout[-3000:])
    return "\n".join(out)


def _pods(dev: DevCluster, ns: str) -> dict[str, list[dict[str, Any]]]:
    """The release's pods by component."""
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in get_json(dev, "pods", "-n", ns, "-l", RELEASE_LABEL)["items"]:
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        found.setdefault(component, []).append(pod)
    return found


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_every_component_runs_as_a_real_container_ready_through_its_probes(
    dev: DevCluster, release: str
) -> None:
    ns = release
    pods = _pods(dev, ns)
    assert sorted(pods) == sorted(COMPONENTS), _diagnose(dev, ns)
    for component, found in pods.items():
        [pod] = found
        spec = pod["spec"]
        assert spec["nodeName"] == realnode.NODE_NAME, component
        assert _ready(pod), (component, pod["status"])
        [status] = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://"), component
        assert status["restartCount"] == 0, (component, _diagnose(dev, ns))
        [container] = spec["containers"]
        assert container["imagePullPolicy"] == "Never"
        assert container["readinessProbe"], f"{component} has no readiness probe"
    images = {c: p[0]["spec"]["containers"][0]["image"] for c, p in pods.items()}
    server = json.loads(dev.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert images["scheduler"] == f"registry.k8s.io/kube-scheduler:{server}"
    assert images["operator"].startswith(f"{LOCAL_REGISTRY}/rlix-operator:")
    # The non-root images run as the chart's user; the agent as root, privileged.
    for component in ("operator", "extender", "scheduler"):
        assert pods[component][0]["spec"]["securityContext"]["runAsUser"] == 65532
    agent = pods["node-agent"][0]["spec"]
    assert agent["containers"][0]["securityContext"]["privileged"] is True
    # The agent's GPUs reached the node, through the API server, from a container.
    wait_for(
        "the node agent to publish its GPUs on the real node",
        lambda: (
            names.ANNOTATION_NODE_GPUS
            in (get_json(dev, "node", realnode.NODE_NAME)["metadata"].get("annotations") or {})
        ),
        timeout_s=60,
    )


def _role(name: str, kind: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "replicas": 1,
        "gpusPerReplica": 1,
        "gpuMemoryMiB": {"rollout": 2000, "training": 4000},
        "template": {
            "spec": {
                "nodeSelector": {realnode.NODE_LABEL: "true"},
                "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": command,
                    }
                ],
            }
        },
    }


def test_an_rljob_runs_to_succeeded_through_the_installed_components(
    dev: DevCluster, real_node: realnode.RealNode, release: str
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    dev.kubectl("create", "namespace", ns)
    job = "hj"
    try:
        wait_for(
            f"the default ServiceAccount of {ns}",
            lambda: dev.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
        )
        image = real_node.node_image
        apply(dev, ns, {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {"name": job},
            "spec": {
                "algorithm": "GRPO",
                "roles": [
                    _role("policy", "trainer", image, TRAINER),
                    _role("gen", "rollout", image, ["sleep", "3600"]),
                ],
            },
        })  # fmt: skip
        try:
            status = wait_for(
                "the RLJob to succeed",
                lambda: (
                    (s := get_json(dev, "rlj", job, "-n", ns).get("status", {})).get("state")
                    in ("Succeeded", "Failed")
                    and s
                ),
                timeout_s=240,
            )
        except AssertionError as exc:
            pods = dev.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
            events = dev.kubectl("get", "events", "-n", ns, check=False).stdout
            raise AssertionError(f"{exc}\n{pods}\n{events}\n{_diagnose(dev, release)}") from None
        assert status["state"] == "Succeeded", status
        # Bound by the installed scheduler: its pod, not the session's own process.
        [scheduler_pod] = _pods(dev, release)["scheduler"]
        scheduled = [
            e for e in get_json(dev, "events", "-n", ns)["items"] if e.get("reason") == "Scheduled"
        ]
        assert scheduled, "no Scheduled event"
        for event in scheduled:
            instance = event.get("reportingInstance") or event.get("source", {}).get("host", "")
            assert scheduler_pod["metadata"]["name"] in instance, event
    finally:
        dev.kubectl("delete", "namespace", ns, "--wait=true", check=False)


def test_helm_upgrade_changes_a_value_and_uninstall_leaves_nothing(
    dev: DevCluster, release: str, images: dict[str, str]
) -> None:
    ns = release
    [before] = _pods(dev, ns)["scheduler"]
    _helm_release(dev, "upgrade", ns, _values(images, extender_weight=7))
    config = get_json(dev, "configmap", f"{RELEASE}-rlix-scheduler", "-n", ns)
    assert "weight: 7" in config["data"]["config.yaml"]
    # The changed configuration restarted the scheduler (checksum annotation).
    after = wait_for(
        "a new scheduler pod Ready",
        lambda: [
            p
            for p in _pods(dev, ns).get("scheduler", [])
            if p["metadata"]["uid"] != before["metadata"]["uid"] and _ready(p)
        ],
        timeout_s=180,
    )
    assert after[0]["spec"]["nodeName"] == realnode.NODE_NAME
    listed = json.loads(helm(dev, "list", "--namespace", ns, "-o", "json"))
    assert [(r["name"], r["revision"], r["status"]) for r in listed] == [(RELEASE, "2", "deployed")]

    helm(dev, "uninstall", RELEASE, "--namespace", ns, "--wait", "--timeout", "3m", timeout_s=200)
    # The owners went with the uninstall; their pods end after their grace period.
    wait_for(
        "the release's pods to be gone",
        lambda: not get_json(dev, "pods", "-n", ns)["items"],
        timeout_s=120,
    )
    kinds = "all,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets"
    left = dev.kubectl("get", kinds, "-n", ns, "-l", RELEASE_LABEL, "-o", "name").stdout
    assert not left.split(), left
    cluster_kinds = "clusterroles,clusterrolebindings"
    left = dev.kubectl("get", cluster_kinds, "-l", RELEASE_LABEL, "-o", "name").stdout
    assert not left.split(), left
    left = dev.kubectl(
        "get", "rolebindings", "-n", "kube-system", "-l", RELEASE_LABEL, "-o", "name"
    )
    assert not left.stdout.split(), left.stdout
    assert not json.loads(helm(dev, "list", "--namespace", ns, "-o", "json"))
