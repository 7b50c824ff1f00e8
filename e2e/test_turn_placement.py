"""Rule 6 by turns on a real control plane: where the node agents park at the
gate, two disaggregated jobs share GPUs that hold only the larger of their
peaks, and the conductor parks neither for overflow.

A control plane of its own with one kwok node of two 81920 MiB GPUs that reach
the scheduler only as the ``gpu.rlix.io`` ResourceSlice a real node agent
(simulated backend) publishes at twice physical memory (the claims of a pair
sum both peaks, which DRA counts against the published memory); the agent
runs the phase gate and parks at it. The real operator and extender get the
H200 measurement and ``--park-at-gate``, and the real rlix-scheduler binds.

Each job is disaggregated: a trainer pod and a rollout pod of one GPU each,
declaring the same ``phaseProfile`` (each pool idles while the other works,
so a pair of them takes turns) and ``loadsThroughGate`` (their first
allocation waits at the gate, so a load never lands beside a working
peak). At 50000 MiB a pod, two of them are 100000 MiB, over one GPU, but
the larger peak and a CUDA context, 51024, fit; at 81000 MiB even that does
not, nor does a job whose roles do not load through the gate. As built,
without ``--park-at-gate``, the second job waits
(e2e/test_disaggregated_sharing.py shares only pods whose peaks fit
together), and a pair on one GPU would be parked by the conductor for
overflow (tests/core/test_placement_turn_fit.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e._operator_process import MATRIX, OperatorProcess, operator_with_extender
from e2e.kube import (
    apply,
    claimed_gpus,
    disaggregated_rljob,
    get_json,
    new_namespace,
    rljob_state,
    wait_for,
    wait_for_condition,
)
from e2e.own_cluster import dra_agent_cluster
from rlix.core import names
from rlix.core.suspension import ANNOTATION_DESIRED
from rlix.devcluster.cluster import DevCluster

NODE = "rlix-turns-gpu-0"
GPU_MIB = 81920
PROFILE = {"rollout": 240, "scoring": 20, "training": 90, "weight-sync": 10}
MATRIX_ARGS = ("--interference", str(MATRIX), "--park-at-gate")


@pytest.fixture(scope="module")
def turns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Its own control plane, one DRA node published at 2x, its agent parking at the gate."""
    with dra_agent_cluster(
        "turns",
        NODE,
        Path(tmp_path_factory.mktemp("agent")),
        gpus=2,
        gpu_mib=GPU_MIB,
        ready=(names.ANNOTATION_NODE_MEMORY_OVERCOMMIT, "2"),
        extra_args=("--memory-overcommit=2", "--phase-gate", "--park-at-gate", *MATRIX_ARGS[:2]),
    ) as (cluster, _):
        yield cluster


@pytest.fixture(scope="module")
def operator(
    turns_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(
        turns_cluster,
        tmp_path_factory.mktemp("operator"),
        extra_args=MATRIX_ARGS,
        extender_args=MATRIX_ARGS,
    )


def test_pods_that_take_turns_share_gpus_that_hold_only_the_larger_peak(
    turns_cluster: DevCluster, operator: OperatorProcess
) -> None:
    cluster = turns_cluster
    assert "the larger peak and a CUDA context" in operator.log.read_text()
    ns = new_namespace(cluster)
    try:
        apply(cluster, ns, disaggregated_rljob("a", 50000, PROFILE, loads_through_gate=True))
        wait_for("a Running", lambda: rljob_state(cluster, ns, "a") == "Running", timeout_s=120)

        # 81000 + a context is over the GPU even by turns: refused, saying so.
        apply(cluster, ns, disaggregated_rljob("big", 81000, PROFILE, loads_through_gate=True))
        refused = wait_for_condition(
            cluster, ns, "big", "Admitted", lambda c: c["status"] == "False", what="big refused"
        )
        assert refused["reason"] == "WaitingForGPUs", refused
        assert "its peak and a CUDA context each must fit" in refused["message"], refused
        cluster.kubectl("delete", "rljob", "big", "-n", ns, "--timeout=60s")

        # 50000 by turns, but its loads would not wait at the gate: refused, saying so.
        apply(cluster, ns, disaggregated_rljob("elsewhere", 50000, PROFILE))
        refused = wait_for_condition(
            cluster, ns, "elsewhere", "Admitted", lambda c: c["status"] == "False", what="refused"
        )
        assert refused["reason"] == "WaitingForGPUs", refused
        assert "only where its role sets loadsThroughGate" in refused["message"], refused
        cluster.kubectl("delete", "rljob", "elsewhere", "-n", ns, "--timeout=60s")

        # 50000 + 50000 is over the GPU; 50000 + a context is not: b shares both with a.
        apply(cluster, ns, disaggregated_rljob("b", 50000, PROFILE, loads_through_gate=True))
        wait_for("b Running", lambda: rljob_state(cluster, ns, "b") == "Running", timeout_s=120)
        admitted = wait_for_condition(
            cluster, ns, "b", "Admitted", lambda c: c["status"] == "True", what="b admitted"
        )
        assert admitted["message"].endswith(f"shares GPUs {NODE}/0, {NODE}/1 with {ns}/a")
        b = {pod: claimed_gpus(cluster, ns, pod) for pod in ("b-policy-0", "b-gen-0")}
        assert sorted(b.values()) == [(0,), (1,)], b

        # The conductor counts each GPU by turns too: nobody is parked for
        # overflow (as built it would park one job within a pass).
        pods = [f"{job}-{role}-0" for job in ("a", "b") for role in ("policy", "gen")]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for pod in pods:
                notes = get_json(cluster, "pod", pod, "-n", ns)["metadata"].get("annotations")
                assert ANNOTATION_DESIRED not in (notes or {}), (pod, notes)
            time.sleep(1)
        assert rljob_state(cluster, ns, "a") == rljob_state(cluster, ns, "b") == "Running"
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
