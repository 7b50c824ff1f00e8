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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from e2e import realnode_pods
from e2e._operator_process import MATRIX
from e2e.kube import apply, get_json, wait_for
from e2e.realnode_pods import advertised_gpus, real_pod
from rlix.core import names
from rlix.devcluster import component_images, realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

# Installs, waits for real containers and runs a job: longer than the default timeout.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "rlix"
POST_RENDER = Path(__file__).parent / "probes" / "real_node_post_render.py"
RELEASE = "rlix-images"  # unique to this branch's tests
# Helm 3: the post-renderer is an executable there, while Helm 4 takes only a
# post-renderer plugin (``--post-renderer`` names an installed plugin). The
# chart itself is checked with both majors on kwok (e2e/test_helm_chart.py).
HELM = "helm3"
LOCAL_REGISTRY = "rlix.local"
GPUS, GPU_MIB = 8, 143_771
COMPONENTS = ("operator", "extender", "scheduler", "node-agent")
RELEASE_LABEL = f"app.kubernetes.io/instance={RELEASE}"
# The trainer finishes after a few seconds: its success is the job's.
TRAINER = ["python3", "-c", "import time; time.sleep(5)"]
# The chart's default ports (values.yaml): metrics of the operator and the node
# agent, and the extender's one HTTP port, which serves its /metrics too.
METRICS_PORTS = {"operator": 9464, "extender": 8787, "node-agent": 9465}
# The interference matrix the release decides sharing with (values
# sharing.interferenceConfigMap): the H200 measurement, as a ConfigMap.
MATRIX_CONFIGMAP = "rlix-interference"
MOUNTED_MATRIX = "/etc/rlix/interference/interference.json"
# Fetches each URL given and prints {url: body} as JSON: runs in the node image.
SCRAPER = """
import json, sys, urllib.request
print(json.dumps({u: urllib.request.urlopen(u, timeout=20).read().decode() for u in sys.argv[1:]}))
"""


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


def helm(dev: DevCluster, *args: str, input: str | None = None, timeout_s: float = 120) -> str:
    """Helm 3 on the session's cluster (see ``HELM``)."""
    return realnode_pods.helm(dev, *args, input=input, timeout_s=timeout_s, binary=HELM)


def _values(
    tags: dict[str, str], node: realnode.RealNode, *, extender_timeout: str = "5s"
) -> dict[str, Any]:
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
        "extenderTimeout": extender_timeout,
        **pin,
    }
    values["sharing"] = {"interferenceConfigMap": MATRIX_CONFIGMAP}
    # The exec probe values.yaml suggests: the agent answers on its socket.
    probe = {"exec": {"command": ["rlix", "agent", "--socket", "/run/rlix/agent.sock", "status"]}}
    values["nodeAgent"] |= {
        "backend": "simulated",
        # The session's cluster has the gpu.rlix.io DeviceClass already, and the
        # node's kubelet keeps its plugin directories under its own --root-dir.
        "dra": {"createDeviceClass": False, "kubeletDir": str(node.kubelet_dir)},
        "publishInterval": 1,
        # In the node's private /run (tmpfs): nothing lands on the machine.
        "parkDir": "/run/rlix-agent-parked",
        "readinessProbe": {**probe, "periodSeconds": 5, "timeoutSeconds": 10},
        "livenessProbe": {**probe, "periodSeconds": 20, "timeoutSeconds": 10},
        # Its gate reads the release's matrix too (the job below has no client
        # library, so nothing waits at it).
        "phaseGate": {"enabled": True},
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
    dev.kubectl(
        "create", "configmap", MATRIX_CONFIGMAP, "-n", ns,
        f"--from-file=interference.json={MATRIX}",
    )  # fmt: skip
    with advertised_gpus(dev, gpus=GPUS, memory_mib=GPU_MIB):
        try:
            try:
                _helm_release(dev, "install", ns, _values(images, real_node))
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
    # `helm install --wait` does not wait for the agent: a DaemonSet with
    # maxUnavailable 1 on one node counts as ready with no pod ready.
    try:
        pods = wait_for(
            "every component's pod Ready",
            lambda: (
                (found := _pods(dev, ns))
                and sorted(found) == sorted(COMPONENTS)
                and all(_ready(p) for ps in found.values() for p in ps)
                and found
            ),
            timeout_s=120,
            every_s=1,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(dev, ns)}") from None
    for component, found in pods.items():
        [pod] = found
        spec = pod["spec"]
        assert spec["nodeName"] == realnode.NODE_NAME, component
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


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _scrape(dev: DevCluster, real_node: realnode.RealNode, release: str) -> dict[str, Samples]:
    """Each component's /metrics, fetched through its Service by DNS name from a pod.

    The pod runs on the real node, where the node's CoreDNS resolves
    ``<service>.<namespace>.svc.cluster.local`` as it would for Prometheus;
    returns component -> sample name -> [(labels, value)].
    """
    urls = {
        component: (
            f"http://{RELEASE}-rlix-{component}.{release}.svc.{realnode.CLUSTER_DOMAIN}"
            f":{port}/metrics"
        )
        for component, port in METRICS_PORTS.items()
    }
    pod = f"scrape-{uuid.uuid4().hex[:8]}"
    apply(dev, release, real_pod(real_node, pod, ["python3", "-c", SCRAPER, *urls.values()]))
    try:
        phase = wait_for(
            f"the scraping pod {pod} to finish",
            lambda: (
                get_json(dev, "pod", pod, "-n", release)["status"].get("phase")
                in ("Succeeded", "Failed")
                and get_json(dev, "pod", pod, "-n", release)["status"]["phase"]
            ),
            timeout_s=120,
        )
        logs = dev.kubectl("logs", "-n", release, pod, check=False)
        assert phase == "Succeeded", f"scraping failed:\n{logs.stdout}\n{logs.stderr}"
        bodies = json.loads(logs.stdout)
    finally:
        dev.kubectl("delete", "pod", pod, "-n", release, "--wait=false", check=False)
    scraped: dict[str, Samples] = {}
    for component, url in urls.items():
        samples: Samples = {}
        for family in text_string_to_metric_families(bodies[url]):
            samples.setdefault(family.name, [])  # a family may have no sample yet
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
        scraped[component] = samples
    return scraped


def _total(samples: Samples, name: str) -> float:
    """The sum of a series over its labels; a missing series fails with the names there."""
    assert name in samples, f"{name} not scraped; have {sorted(samples)}"
    return sum(value for _, value in samples[name])


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


@contextmanager
def _only_the_real_node(dev: DevCluster) -> Iterator[None]:
    """The session's kwok GPU nodes cordoned, so the operator plans on the real node.

    The operator places a gang by GPUs alone (a role template's nodeSelector
    does not steer its plan), and the kwok nodes offer GPUs too: a plan on one
    of them would leave the pods, pinned to the real node, unschedulable.
    """
    others = [
        n["metadata"]["name"]
        for n in get_json(dev, "nodes")["items"]
        if n["metadata"]["name"] != realnode.NODE_NAME
    ]
    dev.kubectl("cordon", *others)
    try:
        yield
    finally:
        dev.kubectl("uncordon", *others, check=False)


def test_placement_admission_and_the_gate_decide_with_the_matrix_the_release_mounts(
    dev: DevCluster, release: str
) -> None:
    """sharing.interferenceConfigMap reaches the extender, the operator and the
    node agent's phase gate as a file the kubelet mounted, and each read it
    (a file it could not read stops the component, which --wait would see)."""
    wanted = {
        "extender": f"interference matrix from {MOUNTED_MATRIX} (time_slicing)",
        "operator": f"interference matrix from {MOUNTED_MATRIX} (time_slicing)",
        "node-agent": f"phase gate on (waits at most 600 s; matrix: {MOUNTED_MATRIX}",
    }

    def said() -> dict[str, str] | None:
        logs = {}
        for component, [pod] in _pods(dev, release).items():
            if component in wanted:
                name = pod["metadata"]["name"]
                logs[component] = dev.kubectl("logs", "-n", release, name, check=False).stdout
        return logs if all(wanted[c] in logs.get(c, "") for c in wanted) else None

    try:
        wait_for("each component's log naming the mounted matrix", said, timeout_s=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_diagnose(dev, release)}") from None


def test_an_rljob_runs_to_succeeded_through_the_installed_components(
    dev: DevCluster, real_node: realnode.RealNode, release: str
) -> None:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    dev.kubectl("create", "namespace", ns)
    job = "hj"
    try:
        with _only_the_real_node(dev):
            wait_for(
                f"the default ServiceAccount of {ns}",
                lambda: dev.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
            )
            before = _scrape(dev, real_node, release)
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
            # The chart's agent is the gpu.rlix.io driver (nodeAgent.dra.enabled):
            # the operator pins each pod's claim, the kubelet has the agent
            # prepare it. Claims go with the finished job, so they are seen on the way.
            allocated: dict[str, dict[str, Any]] = {}

            def finished() -> dict[str, Any] | None:
                for claim in get_json(dev, "resourceclaims", "-n", ns)["items"]:
                    if (claim.get("status") or {}).get("allocation"):
                        allocated[claim["metadata"]["name"]] = claim["status"]["allocation"]
                s = get_json(dev, "rlj", job, "-n", ns).get("status", {})
                return s if s.get("state") in ("Succeeded", "Failed") else None

            try:
                status = wait_for("the RLJob to succeed", finished, timeout_s=240, every_s=1)
            except AssertionError as exc:
                pods = dev.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
                events = dev.kubectl("get", "events", "-n", ns, check=False).stdout
                raise AssertionError(
                    f"{exc}\n{pods}\n{events}\n{_diagnose(dev, release)}"
                ) from None
            assert status["state"] == "Succeeded", status
            assert sorted(allocated) == [f"{job}-gen-0", f"{job}-policy-0"], allocated
            for allocation in allocated.values():
                [result] = allocation["devices"]["results"]
                assert (result["driver"], result["pool"]) == ("gpu.rlix.io", realnode.NODE_NAME)
            # Bound by the installed scheduler: its pod, not the session's own process.
            [scheduler_pod] = _pods(dev, release)["scheduler"]
            scheduled = [
                e
                for e in get_json(dev, "events", "-n", ns)["items"]
                if e.get("reason") == "Scheduled"
            ]
            assert scheduled, "no Scheduled event"
            for event in scheduled:
                instance = event.get("reportingInstance") or event.get("source", {}).get("host", "")
                assert scheduler_pod["metadata"]["name"] in instance, event
            _check_metrics_moved(
                before,
                _scrape(dev, real_node, release),
                nodes=len(get_json(dev, "nodes")["items"]),
            )
    finally:
        dev.kubectl("delete", "namespace", ns, "--wait=true", check=False)


def _check_metrics_moved(
    before: dict[str, Samples], after: dict[str, Samples], *, nodes: int
) -> None:
    """The series an operator of RLix watches are served, and the job moved them."""
    operator_before, operator = before["operator"], after["operator"]
    # One admission more, observed in the queue-wait histogram; its two pods created.
    assert _total(operator, "rlix_operator_admitted_total") >= (
        _total(operator_before, "rlix_operator_admitted_total") + 1
    )
    assert _total(operator, "rlix_operator_queue_wait_seconds_count") >= (
        _total(operator_before, "rlix_operator_queue_wait_seconds_count") + 1
    )
    assert _total(operator, "rlix_operator_pods_created_total") >= (
        _total(operator_before, "rlix_operator_pods_created_total") + 2
    )
    for name in ("rlix_operator_admitted_jobs", "rlix_operator_queue_length"):
        _total(operator, name)
    assert _total(operator, "rlix_operator_leader") == 1, "the one replica leads"
    # The extender's cache holds every node of the session (the real one and
    # the kwok ones) and serves its request series. Whether the job's pods moved
    # the request counter is not asserted: the operator pins each pod to its
    # planned node, and in this run the installed scheduler bound them without
    # an extender call the counter saw.
    extender = after["extender"]
    assert _total(extender, "rlix_extender_cache_nodes") == nodes
    for name in ("rlix_extender_requests", "rlix_extender_request_seconds"):
        assert name in extender, f"{name} not served; have {sorted(extender)}"
    # The node agent: every advertised GPU's memory, and the per-pod series.
    agent = after["node-agent"]
    totals = agent["rlix_agent_gpu_memory_total_bytes"]
    assert sorted(int(labels["gpu"]) for labels, _ in totals) == list(range(GPUS))
    assert {labels["node"] for labels, _ in totals} == {realnode.NODE_NAME}
    assert all(value == GPU_MIB * 2**20 for _, value in totals)
    assert len(agent["rlix_agent_gpu_memory_used_bytes"]) == GPUS
    assert len(agent["rlix_agent_gpu_idle"]) == GPUS
    for name in ("rlix_agent_parked_bytes", "rlix_agent_pod_phase_seconds"):
        assert name in agent, f"{name} not served; have {sorted(agent)}"


def test_helm_upgrade_changes_a_value_and_uninstall_leaves_nothing(
    dev: DevCluster, real_node: realnode.RealNode, release: str, images: dict[str, str]
) -> None:
    ns = release
    [before] = _pods(dev, ns)["scheduler"]
    _helm_release(dev, "upgrade", ns, _values(images, real_node, extender_timeout="7s"))
    config = get_json(dev, "configmap", f"{RELEASE}-rlix-scheduler", "-n", ns)
    assert "httpTimeout: 7s" in config["data"]["config.yaml"]
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
    ).stdout
    assert not left.split(), left
    assert not json.loads(helm(dev, "list", "--namespace", ns, "-o", "json"))
