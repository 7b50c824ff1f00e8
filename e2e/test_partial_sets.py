"""A pod wider than every aligned set shares with one partner and takes empty GPUs, for real.

A control plane of its own with one kwok node of four 81920 MiB GPUs that reach
the scheduler only as the ``gpu.rlix.io`` ResourceSlice a real node agent
(simulated backend) publishes; the real operator (given the H200 measurement),
extender and rlix-scheduler, as in ``test_disaggregated_sharing``.

``a`` is the disaggregated job of that test (a trainer pod and a rollout pod of
one GPU each, with a ``phaseProfile``): it holds two of the four GPUs. ``w``
declares the same profile but its rollout pod needs three GPUs. Rule 2 used to
let a pod take only GPUs that hold the same jobs (all empty, or all beside one
partner): two empty GPUs, two beside ``a``, neither wide enough, so ``w`` waited
for the node to empty. With a matrix, one partner's GPUs and empty ones
together are still one partner (docs/simulator.md, "Partial sets"): ``w``'s
rollout pod takes both of ``a``'s GPUs and an empty one, its trainer pod the
last GPU, and kube-scheduler's DRA allocator agrees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_matrix
from e2e.kube import (
    apply,
    claimed_gpus,
    new_namespace,
    one_gpu_role,
    rljob_manifest,
    rljob_state,
    wait_for,
    wait_for_condition,
)
from e2e.own_cluster import claims_agent_cluster
from e2e.test_disaggregated_sharing import POD_MIB, PROFILE, pools
from rlix.devcluster.cluster import DevCluster

NODE = "rlix-partial-gpu-0"
GPU_MIB = 81920


@pytest.fixture(scope="module")
def partial_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Its own control plane (named for the e2e reaper), one DRA node of 4 GPUs, its agent."""
    with claims_agent_cluster(
        "partial", NODE, tmp_path_factory.mktemp("agent"), gpus=4, gpu_mib=GPU_MIB
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def operator(
    partial_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_matrix(partial_cluster, tmp_path_factory.mktemp("operator"))


def wide(name: str) -> dict[str, Any]:
    """A disaggregated job whose rollout pod needs three GPUs."""
    gen = one_gpu_role("gen", "rollout", {"rollout": POD_MIB, "idle": POD_MIB})
    gen["gpusPerReplica"] = 3
    policy = one_gpu_role("policy", "trainer", {"training": POD_MIB, "idle": POD_MIB})
    job = rljob_manifest(name, policy, gen)
    job["spec"]["phaseProfile"] = PROFILE
    return job


def test_a_three_gpu_pod_takes_one_partner_s_gpus_and_an_empty_one(
    partial_cluster: DevCluster, operator: OperatorProcess
) -> None:
    cluster = partial_cluster
    ns = new_namespace(cluster)
    try:
        apply(cluster, ns, pools("a", profile=True))
        wait_for("a Running", lambda: rljob_state(cluster, ns, "a") == "Running", timeout_s=120)
        a = {claimed_gpus(cluster, ns, pod)[0] for pod in ("a-policy-0", "a-gen-0")}
        assert len(a) == 2, a

        apply(cluster, ns, wide("w"))
        wait_for("w Running", lambda: rljob_state(cluster, ns, "w") == "Running", timeout_s=120)
        gen, policy = claimed_gpus(cluster, ns, "w-gen-0"), claimed_gpus(cluster, ns, "w-policy-0")
        assert len(gen) == 3 and a < set(gen), (a, gen)  # both of a's GPUs and one empty
        assert set(gen) | set(policy) == {0, 1, 2, 3}, (gen, policy)
        assert not set(policy) & a, (a, policy)  # the trainer pod alone on the last GPU
        admitted = wait_for_condition(
            cluster, ns, "w", "Admitted", lambda c: c["status"] == "True", what="w admitted"
        )
        assert f"with {ns}/a" in admitted["message"], admitted
        assert rljob_state(cluster, ns, "a") == "Running"
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
