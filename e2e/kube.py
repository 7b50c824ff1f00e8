"""Small helpers the real-cluster tests share: manifests in, waiting on real state."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import yaml

from rlix.core import dra

T = TypeVar("T")


class Kubectl(Protocol):
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout_s: float = 120
    ) -> Any: ...


def apply(cluster: Kubectl, namespace: str, *objects: dict[str, Any]) -> None:
    body = yaml.safe_dump_all(list(objects), sort_keys=False)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=body)


def get_json(cluster: Kubectl, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def new_namespace(cluster: Kubectl) -> str:
    """A fresh ``t-<hex>`` namespace, once its default ServiceAccount exists.

    The controller-manager creates the namespace's "default" ServiceAccount a
    moment later; a pod created before it exists is refused ("serviceaccount
    default not found"), which CI hit once.
    """
    ns = f"t-{uuid.uuid4().hex[:10]}"
    cluster.kubectl("create", "namespace", ns)
    wait_for(
        f"the default ServiceAccount of {ns}",
        lambda: cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
    )
    return ns


def rljob_status(cluster: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(cluster, "rlj", name, "-n", namespace).get("status", {})
    return found


def rljob_state(cluster: Kubectl, namespace: str, name: str) -> str | None:
    value = rljob_status(cluster, namespace, name).get("state")
    return str(value) if value else None


def rljob_condition(
    cluster: Kubectl, namespace: str, name: str, kind: str
) -> dict[str, Any] | None:
    conditions = rljob_status(cluster, namespace, name).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), None)


def wait_for_condition(
    cluster: Kubectl,
    namespace: str,
    name: str,
    kind: str,
    check: Callable[[dict[str, Any]], bool],
    *,
    what: str,
    timeout_s: float = 60,
) -> dict[str, Any]:
    """Wait until the RLJob's ``kind`` condition exists and passes ``check``; return it."""

    def found() -> dict[str, Any] | None:
        c = rljob_condition(cluster, namespace, name, kind)
        return c if c is not None and check(c) else None

    return wait_for(what, found, timeout_s=timeout_s)


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout_s: float = 60, every_s: float = 0.25
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def pod(
    name: str,
    *,
    gpus: int = 0,
    scheduler: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A minimal pod; kwok runs it without pulling the image."""
    resources: dict[str, Any] = {}
    if gpus:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "pause:3.10", "resources": resources}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def pod_phase_and_node(cluster: Kubectl, namespace: str, name: str) -> tuple[str, str]:
    obj = get_json(cluster, "pod", name, "-n", namespace)
    return obj["status"].get("phase", ""), obj["spec"].get("nodeName", "")


def events_for(cluster: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return items


def rljob_manifest(name: str, *roles: dict[str, Any]) -> dict[str, Any]:
    """A GRPO RLJob named ``name`` with ``roles``."""
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"algorithm": "GRPO", "roles": list(roles)},
    }


def one_gpu_role(name: str, kind: str, memory_mib: dict[str, int]) -> dict[str, Any]:
    """A role of one replica on one GPU, with per-phase memory ``memory_mib``."""
    return {
        "name": name,
        "kind": kind,
        "replicas": 1,
        "gpusPerReplica": 1,
        "image": "example.com/rl:1",
        "gpuMemoryMiB": memory_mib,
    }


def disaggregated_rljob(
    name: str, mib: int, profile: dict[str, int] | None = None, *, loads_through_gate: bool = False
) -> dict[str, Any]:
    """A disaggregated GRPO RLJob: a trainer pod and a rollout pod of one GPU
    each, ``mib`` in their phase and idle; ``profile``: its ``phaseProfile``;
    ``loads_through_gate``: both roles' ``loadsThroughGate``."""
    roles = (
        one_gpu_role("policy", "trainer", {"training": mib, "idle": mib}),
        one_gpu_role("gen", "rollout", {"rollout": mib, "idle": mib}),
    )
    if loads_through_gate:
        roles = tuple({**r, "loadsThroughGate": True} for r in roles)
    manifest = rljob_manifest(name, *roles)
    if profile is not None:
        manifest["spec"]["phaseProfile"] = profile
    return manifest


def claimed_gpus(cluster: Kubectl, namespace: str, pod: str) -> tuple[int, ...]:
    """The GPUs the DRA allocator gave ``pod``'s claim (named as the pod)."""
    allocation = dra.read_allocation(get_json(cluster, "resourceclaim", pod, "-n", namespace))
    assert allocation is not None, f"{pod}'s claim is not allocated"
    return allocation.gpus


def trainer_role(*, replicas: int = 1, gpus: int = 1, mib: int = 10000) -> dict[str, Any]:
    """The ``policy`` trainer role: ``replicas`` pods of ``gpus`` GPUs, ``mib`` each in training."""
    return {
        "name": "policy",
        "kind": "trainer",
        "replicas": replicas,
        "gpusPerReplica": gpus,
        "image": "example.com/trainer:1",
        "gpuMemoryMiB": {"training": mib},
    }


def forbid_pods(cluster: Kubectl, namespace: str) -> None:
    """A ResourceQuota of 0 pods: admitted jobs stay admitted, no pod of theirs exists."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}},
    }
    apply(cluster, namespace, quota)
    wait_for(
        "the quota is enforced",
        lambda: (
            get_json(cluster, "resourcequota", "no-pods", "-n", namespace)
            .get("status", {})
            .get("hard")
        ),
    )
