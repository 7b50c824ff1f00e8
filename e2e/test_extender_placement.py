"""The real RLix extender steering the real kube-scheduler (tier 3).

Each test starts ``python -m rlix.extender`` on the port the session's
``rlix-scheduler`` calls, pre-places pods the way binding does (``spec.nodeName``),
waits until the extender's watch-fed cache has seen them (``/debug/snapshot``)
and then lets kube-scheduler place a new pod. Expectations are derived from the
scoring and preemption rules in ``rlix.core.policy.placement`` (worked out in each
test's docstring), so a reversed preference fails the test.

The session cluster has 4 kwok nodes (rlix-gpu-0..3) x 8 GPUs x 81920 MiB.
kube-scheduler counts ``nvidia.com/gpu`` itself, so every scenario stays within
8 requested GPUs per node.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e._extender_process import ExtenderProcess, running_extender
from e2e.kube import apply, events_for, get_json, pod_phase_and_node, wait_for
from rlix.core import names
from rlix.devcluster.cluster import DevCluster
from rlix.extender.replay import replay

NODES = [f"rlix-gpu-{i}" for i in range(4)]


def rlix_pod(
    name: str,
    *,
    job: str | None,
    role: str,
    phase: str,
    gpus: int,
    memory_mib: int,
    node: str | None = None,
    priority_class: str | None = None,
    preemptible: bool | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the operator writes it: RLix labels and annotations, GPUs requested.

    ``job=None`` leaves out ``rlix.io/job``: a pod RLix does not manage (it still
    asks rlix-scheduler and says its memory)."""
    labels = (
        {names.LABEL_ROLE: role} if job is None else {names.LABEL_JOB: job, names.LABEL_ROLE: role}
    )
    if preemptible is not None:
        labels[names.LABEL_PREEMPTIBLE] = "true" if preemptible else "false"
    spec: dict[str, Any] = {
        "schedulerName": names.SCHEDULER_NAME,
        "containers": [
            {
                "name": "main",
                "image": "pause:3.10",
                "resources": {"limits": {names.GPU_RESOURCE: str(gpus)}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if node is not None:
        spec["nodeName"] = node  # what binding writes: the scheduler is bypassed
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                names.ANNOTATION_PHASE: phase,
                names.ANNOTATION_GPU_MEMORY_MIB: str(memory_mib),
            },
        },
        "spec": spec,
    }


def _requests_gpus(pod: dict[str, Any]) -> bool:
    for c in pod["spec"].get("containers", []):
        res = c.get("resources", {})
        if names.GPU_RESOURCE in res.get("limits", {}) or names.GPU_RESOURCE in res.get(
            "requests", {}
        ):
            return True
    return False


def wait_for_idle_gpus(cluster: DevCluster, namespace: str) -> None:
    """Wait until no other namespace's GPU pod is bound.

    Namespaces of earlier tests are deleted without waiting; their pods would
    otherwise skew the scenario this test builds.
    """

    def idle() -> bool:
        pods = get_json(cluster, "pods", "-A")["items"]
        return not [
            p
            for p in pods
            if p["metadata"]["namespace"] != namespace
            and p["spec"].get("nodeName")
            and _requests_gpus(p)
        ]

    wait_for("GPU pods of earlier tests to be gone", idle, timeout_s=120)


@pytest.fixture
def extender(local_cluster: DevCluster, namespace: str) -> Iterator[ExtenderProcess]:
    wait_for_idle_gpus(local_cluster, namespace)
    with running_extender(local_cluster) as ext:
        yield ext


def _running_on(cluster: DevCluster, namespace: str, name: str) -> str | None:
    phase, node = pod_phase_and_node(cluster, namespace, name)
    return node if phase == "Running" and node else None


def _apply_and_run(
    cluster: DevCluster, namespace: str, pod: dict[str, Any], what: str, *, timeout_s: float = 90
) -> str:
    """Apply ``pod`` and wait until it runs; the node it runs on."""
    apply(cluster, namespace, pod)
    name = pod["metadata"]["name"]
    return wait_for(what, lambda: _running_on(cluster, namespace, name), timeout_s=timeout_s)


def test_rollout_pod_lands_beside_training_not_beside_rollout(
    local_cluster: DevCluster, namespace: str, extender: ExtenderProcess
) -> None:
    """rlix-gpu-0 runs a training pod, rlix-gpu-1 a rollout pod of another job.

    The new rollout pod (a third job, 1 GPU, 30000 MiB) scores, per
    ``rlix.core.policy.placement.scoring``:

    * rlix-gpu-0: shares a training GPU (complement 1.0, interleave 1.0: half a
      cycle apart), packing 0.61 (no new GPU touched, tight fit), locality 0.5
      (no peers) -> 3 + 2 + 1.21 + 1.5 = 7.7 -> 8;
    * rlix-gpu-1: a rollout GPU would fight (0, 0), so it takes an empty GPU
      (0.5, 0.5), packing 0.59 -> 1.5 + 1 + 1.18 + 1.5 = 5.2 -> 5;
    * rlix-gpu-2/3: empty nodes, packing 0.24 -> 4.5 -> 4 (keep whole nodes free).

    With the shape preference reversed (same shape preferred), rlix-gpu-1 would
    score 6 and rlix-gpu-0 5, so the pod would land beside the rollout. The
    filter passes on rlix-gpu-0 alone (the best score), so kube-scheduler's
    own plugin scores have nothing left to choose between.
    """
    apply(
        local_cluster,
        namespace,
        rlix_pod(
            "trainer", job="alpha", role="trainer", phase="training",
            gpus=4, memory_mib=40000, node=NODES[0],
        ),
        rlix_pod(
            "rollout", job="beta", role="rollout", phase="rollout",
            gpus=4, memory_mib=40000, node=NODES[1],
        ),
    )  # fmt: skip
    snapshot = extender.wait_for_pods(namespace, "trainer", "rollout")

    new = rlix_pod(
        "new-rollout", job="gamma", role="rollout", phase="rollout", gpus=1, memory_mib=30000
    )
    # The policy's own ranking on what the extender saw: the scenario is what we
    # think it is (training node first, the rollout node above the empty ones).
    pending = {**new, "metadata": {**new["metadata"], "namespace": namespace}}
    ranking = [r["node"] for r in replay(snapshot, pending)["ranking"]]
    assert ranking[:2] == [NODES[0], NODES[1]], ranking

    node = _apply_and_run(local_cluster, namespace, new, "the new rollout pod to run")
    assert node == NODES[0], f"rollout pod landed on {node}, not beside the training pod"


def _failed_scheduling(cluster: DevCluster, namespace: str, pod: str, needle: str) -> str | None:
    for ev in events_for(cluster, namespace, pod):
        if ev["reason"] == "FailedScheduling" and needle in ev["message"]:
            return str(ev["message"])
    return None


def test_node_without_gpu_memory_is_rejected_with_a_readable_reason(
    local_cluster: DevCluster, namespace: str, extender: ExtenderProcess
) -> None:
    """The node agent reports rlix-gpu-3's GPUs 75000 of 81920 MiB used.

    kube-scheduler still sees 8 free ``nvidia.com/gpu`` there; only RLix knows the
    memory is gone. A pod pinned to that node that needs 20000 MiB per GPU must
    stay Pending with the extender's reason in its FailedScheduling event and in
    ``kubectl describe``; a pod needing 4000 MiB still fits there.
    """
    target = NODES[3]
    usage = [{"index": i, "memoryMiB": 81920, "usedMiB": 75000} for i in range(8)]
    local_cluster.kubectl(
        "annotate",
        "node",
        target,
        "--overwrite",
        f"{names.ANNOTATION_NODE_GPUS}={json.dumps(usage)}",
    )
    try:

        def measured(doc: dict[str, Any]) -> bool:
            node = next((n for n in doc["nodes"] if n["name"] == target), None)
            return bool(node and node["gpus"] and node["gpus"][0]["usedMiB"] == 75000)

        extender.wait_for_cache("the node agent's GPU usage", measured)
        pin = {"kubernetes.io/hostname": target}
        apply(
            local_cluster,
            namespace,
            rlix_pod(
                "big", job="delta", role="rollout", phase="rollout",
                gpus=1, memory_mib=20000, node_selector=pin,
            ),
        )  # fmt: skip
        # fit.py's words, with the numbers a user can act on.
        reason = "only 0 of 8 GPUs have 19.5 GiB free, pod needs 1 (most free on one GPU: 6.8 GiB"
        message = wait_for(
            "FailedScheduling with the extender's memory reason",
            lambda: _failed_scheduling(local_cluster, namespace, "big", reason),
            timeout_s=90,
        )
        assert message.startswith("0/4 nodes are available"), message
        described = local_cluster.kubectl("describe", "pod", "big", "-n", namespace).stdout
        assert reason in described
        assert pod_phase_and_node(local_cluster, namespace, "big") == ("Pending", "")

        # The node itself is fine: a pod that fits in what is left lands there.
        small = rlix_pod(
            "small", job="delta", role="rollout", phase="rollout",
            gpus=1, memory_mib=4000, node_selector=pin,
        )  # fmt: skip
        node = _apply_and_run(local_cluster, namespace, small, "the small pod to run")
        assert node == target
        assert pod_phase_and_node(local_cluster, namespace, "big") == ("Pending", "")
    finally:
        local_cluster.kubectl(
            "annotate", "node", target, f"{names.ANNOTATION_NODE_GPUS}-", check=False
        )


def _priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "preemptionPolicy": "PreemptLowerPriority",
        "globalDefault": False,
    }


def _exists(cluster: DevCluster, namespace: str, name: str) -> bool:
    found = get_json(cluster, "pods", "-n", namespace, "--field-selector", f"metadata.name={name}")
    return any(not p["metadata"].get("deletionTimestamp") for p in found["items"])


def _preempt_calls(extender: ExtenderProcess) -> float:
    """How many preempt calls the extender answered (its /metrics counter)."""
    with urllib.request.urlopen(f"{extender.url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rlix_extender_requests_total{") and 'verb="preempt"' in line
    )


def _preemption_outcome(cluster: DevCluster, namespace: str, name: str) -> str | None:
    """What kube-scheduler's preemption did for the pod: "nominated <node>" or
    "scheduled on <node>" when it took victims, "none" when it ran and found no
    candidate, None before it ran."""
    pod = get_json(cluster, "pods", name, "-n", namespace)
    if bound := pod["spec"].get("nodeName"):
        return f"scheduled on {bound}"  # victims were taken (nothing else frees a node)
    if nominated := pod["status"].get("nominatedNodeName"):
        return f"nominated {nominated}"
    tried = any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and "preemption:" in (c.get("message") or "")
        for c in pod["status"].get("conditions") or []
    )
    return "none" if tried else None


def test_kube_scheduler_evicts_for_a_plain_pod_only_and_picks_the_rollout(
    local_cluster: DevCluster, namespace: str, extender: ExtenderProcess
) -> None:
    """rlix-gpu-0 holds a protected training pod and a preemptible rollout pod.

    The protected pod (``rlix.io/preemptible: "false"``) has the *lower* priority,
    so kube-scheduler's own victim choice (lowest priority first) is the
    protected pod. The other three nodes are full of pods at the preemptor's
    priority, which no preemption may touch. The urgent pod needs 4 GPUs: it
    can only run on rlix-gpu-0, after the rollout pod is gone.

    First the urgent pod is an RLix pod (``rlix.io/job``): kube-scheduler's
    preemption asks the extender, which names no RLix victim (RLix makes room
    for its own jobs in place, through the conductor, never by deletion), so
    nothing is deleted and the pod waits. Then it is a pod RLix does not manage:
    only kube-scheduler can make room for it, and RLix rewrites the victim to
    the rollout pod, which is evicted; the protected pod survives.
    """
    suffix = uuid.uuid4().hex[:8]
    low, mid, high = f"rlix-e2e-low-{suffix}", f"rlix-e2e-mid-{suffix}", f"rlix-e2e-high-{suffix}"
    classes = [_priority_class(low, 100), _priority_class(mid, 200), _priority_class(high, 1000)]
    local_cluster.apply(classes)
    try:
        fillers = [
            rlix_pod(
                f"filler-{i}", job=f"filler-{i}", role="trainer", phase="training",
                gpus=8, memory_mib=70000, node=NODES[i], priority_class=high,
            )
            for i in (1, 2, 3)
        ]  # fmt: skip
        apply(
            local_cluster,
            namespace,
            rlix_pod(
                "protected", job="steady", role="trainer", phase="training",
                gpus=4, memory_mib=60000, node=NODES[0], priority_class=low, preemptible=False,
            ),
            rlix_pod(
                "rollout", job="spare", role="rollout", phase="rollout",
                gpus=4, memory_mib=60000, node=NODES[0], priority_class=mid, preemptible=True,
            ),
            *fillers,
        )  # fmt: skip
        extender.wait_for_pods(
            namespace, "protected", "rollout", *(f"filler-{i}" for i in (1, 2, 3))
        )

        calls = _preempt_calls(extender)
        apply(
            local_cluster,
            namespace,
            rlix_pod(
                "rlix-urgent", job="urgent", role="trainer", phase="training",
                gpus=4, memory_mib=60000, priority_class=high,
            ),
        )  # fmt: skip
        outcome = wait_for(
            "kube-scheduler's preemption to ask the extender for the RLix pod",
            lambda: (
                _preemption_outcome(local_cluster, namespace, "rlix-urgent")
                if _preempt_calls(extender) > calls
                else None
            ),
            timeout_s=120,
        )
        assert outcome == "none", f"kube-scheduler preempted for an RLix pod: {outcome}"
        assert _exists(local_cluster, namespace, "rollout"), (
            "kube-scheduler deleted an RLix pod for an RLix pod"
        )
        assert _running_on(local_cluster, namespace, "protected") == NODES[0]
        assert _running_on(local_cluster, namespace, "rlix-urgent") is None
        local_cluster.kubectl("delete", "pod", "rlix-urgent", "-n", namespace, "--wait=true")

        plain = rlix_pod(
            "urgent", job=None, role="trainer", phase="training",
            gpus=4, memory_mib=60000, priority_class=high,
        )  # fmt: skip
        node = _apply_and_run(
            local_cluster, namespace, plain, "the plain urgent pod to run after preemption",
            timeout_s=120,
        )  # fmt: skip
        assert node == NODES[0]
        assert not _exists(local_cluster, namespace, "rollout"), (
            "the rollout pod must be the victim"
        )
        assert _running_on(local_cluster, namespace, "protected") == NODES[0], (
            "the protected pod must survive"
        )
        for i in (1, 2, 3):
            assert _running_on(local_cluster, namespace, f"filler-{i}") == NODES[i]
    finally:
        # Pods first, so no pod references a class while it is deleted.
        local_cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=true")
        for c in classes:
            local_cluster.kubectl(
                "delete", "priorityclass", c["metadata"]["name"], "--ignore-not-found", check=False
            )
