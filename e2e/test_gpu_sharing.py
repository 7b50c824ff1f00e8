"""Two jobs on one GPU, for real: RLix's agent as the DRA driver (tier 3).

A cluster of its own (so the session's whole-GPU nodes keep their meaning for
the placement tests): one kwok node with one GPU of 81920 MiB and no device
plugin, whose GPU reaches the scheduler only as the ResourceSlice a real
``rlix-node-agent`` (simulated backend) publishes for it; the real operator,
extender and rlix-scheduler, with DRA consumable capacity enabled in every
control-plane component.

Worked out from the numbers: job ``a`` needs 40000 MiB at its peak and job
``b`` 30000 MiB, so both fit on the one GPU (70000 <= 81920, overcommit 1) and
their claims must be allocated the same device; ``c`` needs 20000 MiB, more
than the 11920 MiB left, so admission must refuse it naming GPU 0 and the
memory; and a claim written by hand for the same 20000 MiB, bypassing RLix,
must be refused by the scheduler's DRA allocator itself.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, events_for, get_json, rljob_state, wait_for, wait_for_condition
from e2e.own_cluster import gpu_node_cluster
from rlix.core import dra, names
from rlix.devcluster.cluster import DevCluster
from rlix.devcluster.processes import Component, wait_until

NODE = "rlix-dra-gpu-0"
# Short, so the re-planning test waits seconds, not the default minute.
REPLAN_AFTER_S = 5
GPU_MIB = 81920
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dra_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Its own control plane (named for the e2e reaper), one DRA node, its agent."""
    workdir = tmp_path_factory.mktemp("dra")
    agent: Component | None = None
    with gpu_node_cluster("dra", NODE, gpus=1, gpu_mib=GPU_MIB) as cluster:
        try:
            socket = workdir / "agent.sock"
            agent = Component(
                "agent",
                [
                    sys.executable, "-m", "rlix.agent", "--backend", "simulated",
                    "--node-name", NODE, "--kubeconfig", str(cluster.kubeconfig),
                    "--socket", str(socket), "--state-dir", str(workdir / "state"),
                    "--park-dir", str(workdir / "parked"), "--proc-root", str(workdir / "proc"),
                    "--sim-gpus", "1", "--sim-gpu-memory-mib", str(GPU_MIB),
                    "--publish-interval", "1",
                ],
                workdir / "agent.log",
                cwd=ROOT,
            )  # fmt: skip
            (workdir / "proc").mkdir()
            agent.start()
            wait_until("agent", agent, socket.exists)
            wait_for(
                f"{NODE} marked for GPU claims by its agent",
                lambda: node_annotation(cluster, names.ANNOTATION_NODE_GPU_CLAIMS) == "true",
            )
            yield cluster
        finally:
            if agent is not None:
                agent.stop()


@pytest.fixture(scope="module")
def operator(
    dra_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(
        dra_cluster,
        tmp_path_factory.mktemp("operator"),
        extra_args=("--replan-after-seconds", str(REPLAN_AFTER_S)),
    )


@pytest.fixture
def ns(dra_cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace, deleted with everything in it (the GPU is free after)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    dra_cluster.kubectl("create", "namespace", name)
    wait_for(
        f"the default ServiceAccount of {name}",
        lambda: (
            dra_cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0
        ),
    )
    yield name
    dra_cluster.kubectl("delete", "namespace", name, "--wait=false")
    # The next test starts with the GPU free: every claim of this one is gone
    # (a claim outlives its namespace's deletion call until its pod is gone).
    wait_for(
        f"the claims of {name} deleted",
        lambda: not get_json(dra_cluster, "resourceclaims", "-n", name)["items"],
        timeout_s=120,
    )


def node_annotation(cluster: DevCluster, key: str) -> str | None:
    annotations = get_json(cluster, "node", NODE)["metadata"].get("annotations") or {}
    value = annotations.get(key)
    return str(value) if value is not None else None


def rljob(name: str, mib: int) -> dict[str, Any]:
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "algorithm": "GRPO",
            "roles": [
                {
                    "name": "trainer",
                    "kind": "trainer",
                    "replicas": 1,
                    "gpusPerReplica": 1,
                    "image": "example.com/trainer:1",
                    "gpuMemoryMiB": {"training": mib, "rollout": mib // 2},
                }
            ],
        },
    }


def claim(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(cluster, "resourceclaim", name, "-n", namespace)
    return found


def test_the_agent_publishes_its_gpu_as_a_shareable_device(dra_cluster: DevCluster) -> None:
    body = get_json(dra_cluster, "resourceslice", dra.slice_name(NODE))
    assert body["spec"]["driver"] == dra.DRIVER
    assert body["spec"]["nodeName"] == NODE
    assert body["metadata"]["ownerReferences"][0]["kind"] == "Node"
    (device,) = body["spec"]["devices"]
    assert device["name"] == "gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert dra.quantity_mib(device["capacity"]["memory"]["value"]) == GPU_MIB
    assert set(device["attributes"]) == {"uuid", "index", "productName", "nvlinkDomain"}
    assert get_json(dra_cluster, "deviceclass", dra.DEVICE_CLASS)["metadata"]["name"]


def test_two_jobs_share_one_gpu_and_a_third_is_refused_naming_gpu_and_memory(
    dra_cluster: DevCluster, operator: OperatorProcess, ns: str
) -> None:
    cluster = dra_cluster
    for job, mib in (("a", 40000), ("b", 30000)):
        apply(cluster, ns, rljob(job, mib))
        wait_for(
            f"{job} Running",
            lambda job=job: rljob_state(cluster, ns, job) == "Running",
            timeout_s=120,
        )

    # The pods hold the GPU through their claims, not nvidia.com/gpu.
    for job in ("a", "b"):
        pod = get_json(cluster, "pod", f"{job}-trainer-0", "-n", ns)
        assert pod["spec"]["nodeName"] == NODE
        assert pod["spec"]["resourceClaims"] == [
            {"name": dra.POD_CLAIM_NAME, "resourceClaimName": f"{job}-trainer-0"}
        ]
        resources = pod["spec"]["containers"][0].get("resources") or {}
        assert names.GPU_RESOURCE not in json.dumps(resources)

    # Both claims were allocated the same device, within its published capacity.
    allocations = {
        job: dra.read_allocation(claim(cluster, ns, f"{job}-trainer-0")) for job in ("a", "b")
    }
    a, b = allocations["a"], allocations["b"]
    assert a is not None and b is not None
    assert (a.node, a.gpus) == (b.node, b.gpus) == (NODE, (0,))
    assert (a.consumed_mib, b.consumed_mib) == ((40000,), (30000,))
    published = dra.published_gpus(get_json(cluster, "resourceslice", dra.slice_name(NODE)))
    assert a.consumed_mib[0] + b.consumed_mib[0] <= published[0].memory_mib

    # The extender's view of who holds the GPU is the claims'.
    extender_url = f"http://127.0.0.1:{cluster.extender_port}"
    doc = wait_for(
        "the extender sees both claims",
        lambda: (d := _snapshot(extender_url)) and len(d["claims"]) == 2 and d,
    )
    holders = {
        w["name"]: (w["node"], w["gpuIndices"])
        for w in doc["workloads"]
        if w["name"].startswith(f"{ns}/")
    }
    assert holders == {
        f"{ns}/a-trainer-0": (NODE, [0]),
        f"{ns}/b-trainer-0": (NODE, [0]),
    }
    assert doc["claims"] == {
        f"{ns}/a-trainer-0": {"node": NODE, "gpus": [0], "consumedMiB": [40000]},
        f"{ns}/b-trainer-0": {"node": NODE, "gpus": [0], "consumedMiB": [30000]},
    }
    # Learned by watching, not by relisting after a failed watch.
    extender_log = (operator.workdir / "extender.log").read_text()
    assert "watch restarting" not in extender_log, extender_log[-2000:]

    # A third job would overflow the GPU: admission refuses it and says where.
    apply(cluster, ns, rljob("c", 20000))
    condition = wait_for_condition(
        cluster, ns, "c", "Admitted", lambda c: c["status"] == "False", what="c refused"
    )
    assert condition["reason"] == "WaitingForGPUs"
    message = condition["message"]
    assert "19.5 GiB free" in message, message  # 20000 MiB asked
    assert "11.6 GiB on GPU 0" in message, message  # 81920 - 70000 MiB left
    assert "68.4 GiB of 80.0 GiB promised" in message, message
    assert not get_json(cluster, "pods", "-n", ns, "-l", f"{names.LABEL_JOB}=c")["items"]

    # The capacity is the real scheduler's to enforce, not only RLix's: a claim
    # written by hand for the same 20000 MiB on that GPU is not allocated.
    plan = dra.ClaimPlan(ns, "sneaky", (published[0].uuid,), 20000, (0,))
    sneaky = dra.resource_claim(plan, {})
    del sneaky["metadata"]["ownerReferences"]
    apply(cluster, ns, sneaky, _claiming_pod("sneaky"))
    event = wait_for(
        "sneaky refused by the scheduler",
        lambda: next(
            (e for e in events_for(cluster, ns, "sneaky") if e.get("reason") == "FailedScheduling"),
            None,
        ),
    )
    assert "cannot allocate all claims" in event["message"], event
    assert not (claim(cluster, ns, "sneaky").get("status") or {}).get("allocation")


def test_a_gang_the_scheduler_will_not_place_is_planned_again(
    dra_cluster: DevCluster, operator: OperatorProcess, ns: str
) -> None:
    """Memory RLix cannot see (a claim of a pod that is no RLJob's) makes the
    scheduler refuse the plan: the gang must go back to the queue, not sit in
    Admitted holding what admission promised it."""
    cluster = dra_cluster
    published = dra.published_gpus(get_json(cluster, "resourceslice", dra.slice_name(NODE)))
    foreign = dra.resource_claim(dra.ClaimPlan(ns, "foreign", (published[0].uuid,), 60000), {})
    del foreign["metadata"]["ownerReferences"]
    apply(cluster, ns, foreign, _claiming_pod("foreign"))
    wait_for(
        "the foreign claim allocated",
        lambda: dra.read_allocation(claim(cluster, ns, "foreign")),
    )

    apply(cluster, ns, rljob("d", 40000))
    event = wait_for(
        "d re-planned",
        lambda: next(
            (e for e in events_for(cluster, ns, "d") if e.get("reason") == "Replanning"), None
        ),
        timeout_s=120,
    )
    assert "could not be scheduled on its planned node" in event["message"], event
    assert "cannot allocate all claims" in event["message"], event

    # Once the foreign pod and its claim are gone, the new plan runs.
    cluster.kubectl("delete", "pod", "foreign", "-n", ns, "--timeout=60s")
    cluster.kubectl("delete", "resourceclaim", "foreign", "-n", ns, "--timeout=60s")
    wait_for("d Running", lambda: rljob_state(cluster, ns, "d") == "Running", timeout_s=180)


def _claiming_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": dra.POD_CLAIM_NAME, "resourceClaimName": name}],
            "containers": [
                {
                    "name": "main",
                    "image": "pause:3.10",
                    "resources": {"claims": [{"name": dra.POD_CLAIM_NAME}]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _snapshot(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/debug/snapshot", timeout=5) as response:
        found: dict[str, Any] = json.loads(response.read())
    return found


@contextmanager
def restarted_with(operator: OperatorProcess, *args: str) -> Iterator[OperatorProcess]:
    """The module's operator, restarted with ``args`` added; as it was after."""
    before = operator.extra_args
    operator.stop()
    operator.extra_args = (*before, *args)
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()
        operator.extra_args = before
        operator.start()


@pytest.mark.parametrize("matrix", ["measured", "time-slicing"])
def test_with_a_matrix_a_pair_that_loses_progress_waits_instead_of_sharing(
    dra_cluster: DevCluster, operator: OperatorProcess, ns: str, matrix: str
) -> None:
    """The same two jobs as above, with the operator given the H200 measurement
    (``--interference bench/results/gpu_interference.json``) or, where a
    cluster measured none, the built-in bound (``--interference time-slicing``).
    Each declares a training (compute-bound) and a rollout (memory-bound)
    phase; on one GPU the pair's worst moment delivers 0.95 of a GPU's progress
    measured (1 / (1 + 0.573) for the GEMM, 1 / (1 + 2.17) for the decode), 1.0
    under the bound (two busy phases split a time-sliced GPU), both below rule
    5's 4/3. Memory alone would let ``b`` in (the test above): with a matrix
    admission refuses it, saying the sharing rules did, and admits it once
    ``a`` is gone."""
    cluster = dra_cluster
    given = str(ROOT / "bench" / "results" / "gpu_interference.json")
    said = f"interference matrix from {given} (time_slicing)"
    if matrix == "time-slicing":
        given, said = matrix, "interference matrix from the built-in time-slicing bound"
    with restarted_with(operator, "--interference", given):
        assert said in operator.log.read_text()
        apply(cluster, ns, rljob("a", 40000))
        wait_for("a Running", lambda: rljob_state(cluster, ns, "a") == "Running", timeout_s=120)
        apply(cluster, ns, rljob("b", 30000))
        condition = wait_for_condition(
            cluster, ns, "b", "Admitted", lambda c: c["status"] == "False", what="b refused"
        )
        assert condition["reason"] == "WaitingForGPUs", condition
        message = condition["message"]
        assert "1 of 1 GPUs have room for the pod, but the sharing rules" in message, message
        assert "at most 0 of them together" in message, message
        assert not get_json(cluster, "pods", "-n", ns, "-l", f"{names.LABEL_JOB}=b")["items"]

        cluster.kubectl("delete", "rljob", "a", "-n", ns, "--timeout=60s")
        wait_for("b Running", lambda: rljob_state(cluster, ns, "b") == "Running", timeout_s=180)
        allocation = dra.read_allocation(claim(cluster, ns, "b-trainer-0"))
        assert allocation is not None and allocation.gpus == (0,)
