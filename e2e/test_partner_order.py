"""With a matrix, the job that would outlast its partners goes first in its class, for real.

A control plane of its own with one kwok node of four 81920 MiB GPUs published
by a real node agent (simulated backend); the real operator, given the H200
measurement and an admission window of one job (so the queue's order shows in
each waiting job's ``Admitted`` condition), the extender and rlix-scheduler, as
in ``test_partial_sets``.

A filler holds every GPU. Three sized jobs of one class wait behind it:
``long`` and ``short``, disaggregated jobs with a ``phaseProfile`` that may
share a GPU with each other (``test_disaggregated_sharing``), and ``other``,
whose 60 GiB pods fit beside neither. Least work first would consider
``short`` first. But ``long`` (1000 iterations, 360,000 s alone) may pair only
with ``short``, whose work the four GPUs drain in 1,800 s: started later, it
would run alone, so it goes first (docs/simulator.md, "The job that would
outlast its partners goes first"). By the whole backlog (541,800 s on four
GPUs) neither ``long`` nor ``other`` would set the finish.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_matrix
from e2e.kube import (
    apply,
    new_namespace,
    one_gpu_role,
    rljob_manifest,
    rljob_state,
    trainer_role,
    wait_for,
    wait_for_condition,
)
from e2e.own_cluster import claims_agent_cluster
from e2e.test_disaggregated_sharing import PROFILE, pools
from rlix.devcluster.cluster import DevCluster

NODE = "rlix-partners-gpu-0"
GPU_MIB = 81920


@pytest.fixture(scope="module")
def partners_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Its own control plane (named for the e2e reaper), one DRA node of 4 GPUs, its agent."""
    with claims_agent_cluster(
        "partners", NODE, tmp_path_factory.mktemp("agent"), gpus=4, gpu_mib=GPU_MIB
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def operator(
    partners_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_matrix(
        partners_cluster, tmp_path_factory.mktemp("operator"), "--admission-window", "1"
    )


def sized(job: dict[str, Any], iterations: int) -> dict[str, Any]:
    job["spec"] |= {"iterations": iterations, "phaseProfile": PROFILE}
    return job


def test_the_job_that_would_outlast_its_partners_is_considered_first(
    partners_cluster: DevCluster, operator: OperatorProcess
) -> None:
    cluster = partners_cluster
    ns = new_namespace(cluster)
    try:
        apply(cluster, ns, rljob_manifest("filler", trainer_role(gpus=4, mib=80000)))
        wait_for(
            "filler Running", lambda: rljob_state(cluster, ns, "filler") == "Running", timeout_s=120
        )
        # 2 GPUs x 1000 x 360 s; 2 x 10 x 360 s; 4 x 1000 x 360 s of GPU-seconds.
        apply(cluster, ns, sized(pools("long", profile=True), 1000))
        apply(cluster, ns, sized(pools("short", profile=True), 10))
        big = one_gpu_role("policy", "trainer", {"training": 60000})
        big["replicas"] = 4
        apply(cluster, ns, sized(rljob_manifest("other", big), 1000))

        def queued(name: str, text: str) -> dict[str, Any]:
            return wait_for_condition(
                cluster,
                ns,
                name,
                "Admitted",
                lambda c: c["status"] == "False" and text in c["message"],
                what=f"{name}: {text!r}",
            )

        queued("short", "position 2 in the queue")
        queued("other", "position 3 in the queue")
        first = queued("long", "")
        assert "in the queue" not in first["message"], first  # considered, fits nowhere yet
        # The filler gone, "long" is admitted; "short" may pair beside it.
        cluster.kubectl("delete", "rlj", "filler", "-n", ns)
        wait_for(
            "long Running", lambda: rljob_state(cluster, ns, "long") == "Running", timeout_s=120
        )
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
