"""charts/rlix against the real API server: dry-run, install, RBAC, upgrade, uninstall.

kwok marks the chart's pods Running and Ready without pulling images, so this
proves the objects, selectors, RBAC and scheduling constraints, not the images.
Every test runs with Helm 3 and with Helm 4 (``helm3``/``helm4`` in the
toolchain): users run either, and Helm 4 changed what ``--wait`` waits for.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kube import get_json, wait_for
from rlix.devcluster.cluster import DevCluster
from rlix.devcluster.toolchain import HELM_BINARIES, versions

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "rlix"
KUBE_VERSION = versions(ROOT)["K8S_VERSION"]

Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(params=HELM_BINARIES)
def helm(request: pytest.FixtureRequest, cluster: Any) -> Helm:
    """One Helm major on the session's cluster; raises with helm's output on failure."""
    cmd = [str(cluster.bin_dir / str(request.param)), "--kubeconfig", str(cluster.kubeconfig)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*cmd, *args], check=False, capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(
                f"{request.param} {' '.join(args[:2])} failed:\n{result.stdout}\n{result.stderr}"
            )
        return result

    return run


def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm, cluster: Any, namespace: str
) -> None:
    rendered = helm(
        "template",
        "dry",
        str(CHART),
        "-n",
        namespace,
        "--include-crds",
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "metrics.grafanaDashboard.enabled=true",
        # The optional objects and pod settings too, so the API server checks them.
        *("--set", "operator.podDisruptionBudget.enabled=true"),
        *("--set", "extender.podDisruptionBudget.enabled=true"),
        *("--set", "extender.podDisruptionBudget.maxUnavailable=50%"),
        *("--set", "scheduler.podDisruptionBudget.enabled=true"),
        *("--set", "operator.serviceAccount.annotations.example\\.com/role=r"),
        *("--set", "extender.podLabels.team=infra"),
        *("--set", "nodeAgent.podAnnotations.note=n"),
        *("--set-json", 'scheduler.extraArgs=["--v=2"]'),
    ).stdout
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered)
    assert "deployment.apps/dry-rlix-operator created (server dry run)" in out.stdout
    assert "daemonset.apps/dry-rlix-node-agent created (server dry run)" in out.stdout
    for component in ("operator", "extender", "scheduler"):
        assert f"poddisruptionbudget.policy/dry-rlix-{component} created" in out.stdout


def _can(
    cluster: Any, namespace: str, sa: str, verb: str, resource: str, *, scope: str = "-A"
) -> bool:
    """``kubectl auth can-i`` as the service account; ``scope`` "-A" or "-n=<ns>"."""
    result = cluster.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        scope,
        f"--as=system:serviceaccount:{namespace}:{sa}",
        check=False,
    )
    return result.stdout.strip() == "yes"


# kwok nodes have no NVML, and the session's cluster made the gpu.rlix.io
# DeviceClass already (Helm will not install over an object it does not own).
KWOK_VALUES = (
    "--set",
    "nodeAgent.backend=simulated",
    "--set",
    "nodeAgent.dra.createDeviceClass=false",
)


def _helm_release(helm: Helm, verb: str, release: str, namespace: str, *values: str) -> None:
    """``helm install|upgrade`` on the kwok nodes (``KWOK_VALUES``)."""
    helm(verb, release, str(CHART), "-n", namespace, "--wait", "--timeout", "3m",
         *KWOK_VALUES, *values)  # fmt: skip


def _release_objects(cluster: Any, namespace: str, release: str) -> list[str]:
    selector = f"app.kubernetes.io/instance={release}"
    found = []
    for kinds, scope in (
        ("deploy,ds,svc,sa,cm,role,rolebinding", ["-n", namespace]),
        ("rolebinding", ["-n", "kube-system"]),
        ("clusterrole,clusterrolebinding", []),
    ):
        out = cluster.kubectl("get", kinds, *scope, "-l", selector, "-o", "name").stdout
        found += out.split()
    return found


def test_install_rbac_upgrade_uninstall(
    helm: Helm, local_cluster: DevCluster, namespace: str
) -> None:
    release = "r" + namespace[-6:]
    _helm_release(helm, "install", release, namespace)
    # The notes name the sharing rules the release decides with (the default's).
    notes = helm("get", "notes", release, "-n", namespace).stdout
    assert "the built-in time-slicing bound (no measurement)" in notes, notes
    prefix = f"{release}-rlix"
    for deploy in ("operator", "extender", "scheduler"):
        local_cluster.kubectl(
            "rollout", "status", f"deployment/{prefix}-{deploy}", "-n", namespace, "--timeout=90s"
        )
    ds = get_json(local_cluster, "daemonset", f"{prefix}-node-agent", "-n", namespace)
    assert ds["status"]["numberReady"] == local_cluster.options.nodes
    agents = get_json(
        local_cluster, "pods", "-n", namespace, "-l", "app.kubernetes.io/component=node-agent"
    )["items"]
    assert sorted(p["spec"]["nodeName"] for p in agents) == [
        f"rlix-gpu-{i}" for i in range(local_cluster.options.nodes)
    ]
    assert all(p["spec"]["hostPID"] for p in agents)

    # Least privilege, checked by the API server's own authorizer.
    can = lambda sa, verb, res: _can(local_cluster, namespace, f"{prefix}-{sa}", verb, res)  # noqa: E731
    assert not can("node-agent", "get", "secrets")
    assert not can("node-agent", "list", "secrets")
    assert can("node-agent", "patch", "pods") and can("node-agent", "patch", "nodes")
    assert not can("node-agent", "delete", "pods")
    assert can("extender", "watch", "pods") and can("extender", "list", "nodes")
    for verb in ("create", "patch", "update", "delete"):
        assert not can("extender", verb, "pods"), f"extender must not {verb} pods"
    assert not can("extender", "get", "secrets")
    assert can("operator", "create", "pods") and can("operator", "patch", "rljobs.rlix.io/status")
    assert not can("operator", "get", "secrets")
    # Each job's headless Service and the PriorityClass of its priority.
    assert can("operator", "create", "services") and can("operator", "delete", "services")
    assert can("operator", "create", "priorityclasses.scheduling.k8s.io")
    assert not can("operator", "delete", "priorityclasses.scheduling.k8s.io")
    assert can("scheduler", "create", "bindings")
    lease = "leases.coordination.k8s.io/rlix-scheduler"
    assert _can(
        local_cluster, namespace, f"{prefix}-scheduler", "update", lease, scope=f"-n={namespace}"
    ), "leader election needs its own lease"
    assert _can(
        local_cluster, namespace, f"{prefix}-operator", "update", "leases.coordination.k8s.io",
        scope=f"-n={namespace}",
    ), "the operator's replicas elect a leader on a Lease"  # fmt: skip

    # Upgrade: a changed value rolls out, nothing is duplicated.
    _helm_release(helm, "upgrade", release, namespace, "--set", "scheduler.extenderTimeout=7s")
    config = get_json(local_cluster, "configmap", f"{prefix}-scheduler", "-n", namespace)
    assert "httpTimeout: 7s" in config["data"]["config.yaml"]
    deploys = get_json(
        local_cluster, "deploy", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}"
    )["items"]
    assert len(deploys) == 3

    helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "3m")
    wait_for(
        "every object of the release to be gone",
        lambda: not _release_objects(local_cluster, namespace, release) or None,
        timeout_s=90,
    )
    wait_for(
        "the release's pods to be gone",
        lambda: (
            not get_json(
                local_cluster,
                "pods",
                "-n",
                namespace,
                "-l",
                f"app.kubernetes.io/instance={release}",
            )["items"]
            or None
        ),
        timeout_s=90,
    )
    # Helm never deletes CRDs (that would delete every user's RLJobs): it stays, on purpose.
    assert local_cluster.kubectl("get", "crd", "rljobs.rlix.io", check=False).returncode == 0


def test_optional_components_render(helm: Helm) -> None:
    def render(*values: str) -> str:
        return helm("template", "t", str(CHART), "--kube-version", KUBE_VERSION, *values).stdout

    no_agent = render("--set", "nodeAgent.enabled=false")
    assert "kind: Deployment" in no_agent and "kind: DaemonSet" not in no_agent
    default = render()
    assert "--no-webhook" in default and "validatingwebhookconfigurations" not in default
    hooked = render("--set", "operator.webhook.enabled=true")
    # The URL the API server gets must name the Service, not the 0.0.0.0 it listens on.
    assert "--webhook-advertise-host=t-rlix-operator.default.svc" in hooked
    assert "validatingwebhookconfigurations" in hooked


CRD = CHART / "crds" / "rlix.io_rljobs.yaml"
# The spec field the "older" CRD lacks: any optional one serves.
NEW_FIELD = "backoffLimit"


def _spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    [version] = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _job_with_new_field(name: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "algorithm": "GRPO",
            NEW_FIELD: 2,
            "roles": [{
                "name": "trainer", "kind": "trainer", "replicas": 1, "gpusPerReplica": 1,
                "image": "example.com/trainer:1",
                "gpuMemoryMiB": {"training": 1000, "rollout": 1000},
            }],
        },
    })  # fmt: skip


def test_crd_upgrade_needs_the_documented_apply_step(
    helm: Helm, local_cluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    """Helm installs ``crds/`` once and never upgrades it; the documented step does.

    The release is installed from a copy of the chart whose CRD lacks a field
    (the chart before that field existed), its CRD created by ``kubectl
    replace`` (or create) under Helm's field manager: the session may hold the
    CRD already, and Helm skips a CRD that exists, as it would on any upgrade. ``helm
    upgrade`` to the current chart leaves that CRD, so the field is refused or
    pruned; ``kubectl apply --server-side --force-conflicts -f crds/`` (what
    the README says to run first) brings it, and ``helm upgrade`` then runs as
    usual. The session's CRD is the current one again afterwards.
    """
    old_chart = tmp_path / "rlix"
    shutil.copytree(CHART, old_chart)
    old_crd = yaml.safe_load(CRD.read_text())
    assert NEW_FIELD in _spec_schema(old_crd)["properties"]
    del _spec_schema(old_crd)["properties"][NEW_FIELD]
    (old_chart / "crds" / CRD.name).write_text(yaml.safe_dump(old_crd, sort_keys=False))
    crd_text = yaml.safe_dump(old_crd, sort_keys=False)
    # Replaced, not applied: an apply drops a field only its own manager set.
    exists = local_cluster.kubectl("get", "crd", "rljobs.rlix.io", check=False).returncode == 0
    verb = "replace" if exists else "create"
    local_cluster.kubectl(verb, "--field-manager=helm", "-f", "-", input=crd_text)
    release = "c" + namespace[-6:]
    try:
        helm("install", release, str(old_chart), "-n", namespace,
             *KWOK_VALUES)  # fmt: skip
        # The upgrade alone: the chart's crds/ carries the field, the cluster does not.
        helm("upgrade", release, str(CHART), "-n", namespace,
             *KWOK_VALUES)  # fmt: skip
        crd = get_json(local_cluster, "crd", "rljobs.rlix.io")
        assert NEW_FIELD not in _spec_schema(crd)["properties"], "helm upgraded crds/"
        refused = local_cluster.kubectl(
            "create", "-n", namespace, "-f", "-", input=_job_with_new_field("old"), check=False
        )
        assert refused.returncode != 0 and NEW_FIELD in refused.stderr, refused
        local_cluster.kubectl(
            "create", "-n", namespace, "--validate=false", "-f", "-",
            input=_job_with_new_field("old"),
        )  # fmt: skip
        pruned = get_json(local_cluster, "rlj", "old", "-n", namespace)["spec"]
        assert NEW_FIELD not in pruned, "the old CRD's schema prunes the field"

        # The documented step, then the upgrade.
        local_cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds")
        )
        wait_for(
            "the upgraded CRD to be served",
            lambda: (
                NEW_FIELD
                in _spec_schema(get_json(local_cluster, "crd", "rljobs.rlix.io"))["properties"]
            ),
            timeout_s=30,
        )
        helm("upgrade", release, str(CHART), "-n", namespace,
             *KWOK_VALUES)  # fmt: skip
        local_cluster.kubectl(
            "create", "-n", namespace, "-f", "-", input=_job_with_new_field("new")
        )
        kept = get_json(local_cluster, "rlj", "new", "-n", namespace)["spec"]
        assert kept[NEW_FIELD] == 2, kept
    finally:
        local_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        local_cluster.kubectl("delete", "rlj", "--all", "-n", namespace, "--wait=false",
                              check=False)  # fmt: skip
        helm("uninstall", release, "-n", namespace, "--ignore-not-found", "--wait",
             "--timeout", "3m")  # fmt: skip
