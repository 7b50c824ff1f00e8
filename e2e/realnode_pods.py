"""Pods for the real node: our own image, never pulled, tolerating the node's taint."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import apply, events_for, get_json, new_namespace, wait_for
from rlix.core import names
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster

CHART = Path(__file__).resolve().parent.parent / "charts" / "rlix"
SOCKET_DIR = "/run/rlix"  # the chart's nodeAgent.socketDir


def real_pod(node: realnode.RealNode, name: str, command: list[str]) -> dict[str, Any]:
    """A pod that runs ``command`` in the node image on the real node, once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {realnode.NODE_LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": node.node_image,
                    "imagePullPolicy": "Never",
                    "command": command,
                }
            ],
        },
    }


def probe_pod(
    node: realnode.RealNode,
    name: str,
    probe: Path,
    *,
    env: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """A pod of the node image running ``probe`` (python3 and the rlix wheel),
    the agent's socket directory mounted as the operator mounts it."""
    pod = real_pod(node, name, ["python3", "-c", probe.read_text()])
    pod["metadata"]["annotations"] = dict(annotations)
    container = pod["spec"]["containers"][0]
    env = {"RLIX_AGENT_SOCKET": f"{SOCKET_DIR}/agent.sock", **env}
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] = [{"name": "rlix-agent", "mountPath": SOCKET_DIR, "readOnly": True}]
    pod["spec"]["volumes"] = [{"name": "rlix-agent", "hostPath": {"path": SOCKET_DIR}}]
    return pod


def json_events(cluster: DevCluster, ns: str, pod: str) -> list[dict[str, Any]]:
    """The JSON lines a probe printed (its log's other lines are left out)."""
    log = cluster.kubectl("logs", pod, "-n", ns, check=False).stdout
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def run_until_done(
    cluster: DevCluster,
    agent: tuple[str, str],
    pods: list[dict[str, Any]],
    timeout_s: float = 240,
    *,
    reasons: dict[str, list[str]] | None = None,
    seen: dict[str, list[dict[str, str]]] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[str, str]]]:
    """Run ``pods`` in a fresh namespace until each printed its "done" event:
    each one's events and annotations then. On a timeout, the error holds what
    they printed and the tail of the node agent's (namespace, pod) log.
    ``reasons``: filled with the reasons of each pod's Kubernetes events,
    read before the namespace goes; ``seen``: each pod's annotations as read
    at every look while they ran."""
    ns = new_namespace(cluster)
    names_ = [p["metadata"]["name"] for p in pods]
    try:
        for pod in pods:
            apply(cluster, ns, pod)

        def finished() -> bool:
            if seen is not None:
                listed = get_json(cluster, "pods", "-n", ns)["items"]
                for item in listed:
                    notes = item["metadata"].get("annotations") or {}
                    seen.setdefault(item["metadata"]["name"], []).append(notes)
            return all(
                any(e["event"] == "done" for e in json_events(cluster, ns, p)) for p in names_
            )

        try:
            wait_for("the probes to finish", finished, timeout_s=timeout_s)
        except AssertionError as exc:
            logs = {p: json_events(cluster, ns, p) for p in names_}
            tail = cluster.kubectl("logs", "-n", agent[0], agent[1], "--tail=40", check=False)
            raise AssertionError(f"{exc}\n{logs}\n--- agent ---\n{tail.stdout}") from None
        events = {p: json_events(cluster, ns, p) for p in names_}
        notes = {
            p: get_json(cluster, "pod", p, "-n", ns)["metadata"].get("annotations", {})
            for p in names_
        }
        if reasons is not None:
            reasons.update({p: [e["reason"] for e in events_for(cluster, ns, p)] for p in names_})
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=true", check=False)
    return events, notes


@contextmanager
def advertised_gpus(cluster: DevCluster, *, gpus: int, memory_mib: int) -> Iterator[None]:
    """The real node advertises ``gpus`` simulated GPUs, then stops.

    What NVIDIA's device plugin (``nvidia.com/gpu`` capacity, which the
    kube-scheduler counts) and GPU feature discovery (the labels the extender
    and the operator read) publish on a GPU node; the node has no GPU, so
    nothing else would. Taken back afterwards, so that the session's later
    tests see the node as it was.
    """
    node = realnode.NODE_NAME
    labels = {
        names.NODE_LABEL_GPU_PRESENT: "true",
        names.NODE_LABEL_GPU_PRODUCT: "NVIDIA-H200-simulated",
        names.NODE_LABEL_GPU_MEMORY_MIB: str(memory_mib),
        names.NODE_LABEL_GPU_COUNT: str(gpus),
    }
    capacity = names.GPU_RESOURCE
    cluster.kubectl("label", "node", node, "--overwrite", *(f"{k}={v}" for k, v in labels.items()))
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"capacity": {capacity: str(gpus)}}}),
    )  # fmt: skip
    try:
        yield
    finally:
        cluster.kubectl("label", "node", node, *(f"{k}-" for k in labels), check=False)
        cluster.kubectl(
            "patch", "node", node, "--subresource=status", "--type=json",
            "-p", json.dumps([{"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"}]),
            check=False,
        )  # fmt: skip
        cluster.kubectl("annotate", "node", node, f"{names.ANNOTATION_NODE_GPUS}-", check=False)


def helm(
    cluster: DevCluster,
    *args: str,
    input: str | None = None,
    timeout_s: float = 120,
    binary: str = "helm",
) -> str:
    """The toolchain's helm (``binary``: helm, helm3 or helm4) on the cluster; its stdout.

    Raises with helm's stderr on failure.
    """
    try:
        result = subprocess.run(
            [str(cluster.bin_dir / binary), "--kubeconfig", str(cluster.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"helm {' '.join(args[:2])} ran past {timeout_s}s") from exc
    if result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args[:2])} failed: {result.stderr}")
    return result.stdout


def agent_objects(
    cluster: DevCluster,
    node: realnode.RealNode,
    ns: str,
    values: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The chart's node-agent objects, rendered by helm for the real node
    (simulated GPUs); ``values`` are merged into ``nodeAgent``."""
    ref, tag = node.agent_image.rsplit(":", 1)
    registry, repository = ref.split("/", 1)
    chart_values = {
        "global": {"imageRegistry": registry},
        "nodeAgent": {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "backend": "simulated",
            "publishInterval": 1,
            # In the node's private /run (tmpfs): nothing lands on the machine.
            "parkDir": "/run/rlix-agent-parked",
            "nodeSelector": {realnode.NODE_LABEL: "true"},
            "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
            # The session's cluster has the gpu.rlix.io DeviceClass already, and the
            # node's kubelet keeps its plugin directories under its own --root-dir.
            "dra": {"createDeviceClass": False, "kubeletDir": str(node.kubelet_dir)},
            **(values or {}),
        },
    }
    server = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    rendered = helm(
        cluster,
        "template", "realpods", str(CHART), "--namespace", ns,
        "--show-only", "templates/node-agent.yaml",
        "--kube-version", server["gitVersion"], "-f", "-",
        input=yaml.safe_dump(chart_values),
    )  # fmt: skip
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    # The one difference from a real cluster: no kube-proxy on the test node, so
    # the agent names the API server by a name its certificate carries; the
    # node's CoreDNS resolves it to the kubernetes Service's ClusterIP, which the
    # node's namespace forwards to the API server (rlix.devcluster.netns_forward).
    container["env"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "kubernetes.default.svc"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "443"},
    ]
    return objects


def running_agent(cluster: DevCluster, ns: str) -> str | None:
    """The name of the agent's pod in ``ns`` once its container is ready."""
    found = cluster.kubectl("get", "pods", "-n", ns, "-o", "json")
    for pod in json.loads(found.stdout)["items"]:
        statuses = pod["status"].get("containerStatuses") or []
        if statuses and statuses[0].get("ready"):
            return str(pod["metadata"]["name"])
    return None


def remove_agent(cluster: DevCluster, ns: str, objects: list[dict[str, Any]]) -> None:
    """Delete the agent's namespace and the cluster-scoped objects ``agent_objects`` made."""
    cluster.kubectl("delete", "namespace", ns, "--wait=true", check=False)
    for obj in objects:
        if obj["kind"].startswith("Cluster"):
            cluster.kubectl(
                "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False
            )


@contextmanager
def agent_daemonset(
    cluster: DevCluster,
    node: realnode.RealNode,
    prefix: str,
    values: Mapping[str, Any] | None = None,
) -> Iterator[tuple[str, str]]:
    """The chart's node agent (``agent_objects`` with ``values``) running on the
    real node in a namespace of its own: (namespace, pod name); removed after."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", ns)
    objects = agent_objects(cluster, node, ns, values)
    try:
        cluster.apply(objects)
        pod = wait_for(
            "the node agent's pod to run", lambda: running_agent(cluster, ns), timeout_s=180
        )
        yield ns, pod
    finally:
        remove_agent(cluster, ns, objects)
