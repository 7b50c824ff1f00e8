"""Two disaggregated jobs share GPUs, for real, where two that say nothing may not.

A control plane of its own with one kwok node of two 81920 MiB GPUs that reach
the scheduler only as the ``gpu.rlix.io`` ResourceSlice a real node agent
(simulated backend) publishes; the real operator (given the H200 measurement,
``--interference bench/results/gpu_interference.json``), extender and
rlix-scheduler.

Each job is disaggregated: a trainer pod and a rollout pod of one GPU and
30000 MiB each, so a job holds both GPUs (its own pools never share one) and
memory alone would fit two jobs. What decides is rule 5 of the sharing rules:

* ``a`` declares a ``phaseProfile`` (240 s rollout, 20 scoring, 90 training,
  10 weight sync): its rollout pod idles through scoring and training, its
  trainer pod through rollout, and the operator writes that on each pod
  (``rlix.io/phase-seconds``);
* ``quiet`` declares none: judged busy in every phase, a pair's worst moment
  (two decodes, or a decode beside a training step) makes less than 4/3 of a
  GPU's progress, so admission refuses it, naming the sharing rules;
* ``b`` declares the same profile as ``a``: each of its pools idles while the
  other works, so at the node agent's phase gate a pair with ``a``'s pods takes
  turns and expects more than 4/3; admission places each of ``b``'s pods on a
  GPU beside one of ``a``'s, and kube-scheduler's DRA allocator agrees.

This is the cluster doing what the simulator's disaggregated mix does
(docs/simulator.md, "The phase gate").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import MATRIX, OperatorProcess, operator_with_matrix
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
from e2e.own_cluster import claims_agent_cluster
from rlix.core import names
from rlix.devcluster.cluster import DevCluster

NODE = "rlix-disagg-gpu-0"
GPU_MIB = 81920
POD_MIB = 30000
PROFILE = {"rollout": 240, "scoring": 20, "training": 90, "weight-sync": 10}


@pytest.fixture(scope="module")
def disagg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Its own control plane (named for the e2e reaper), one DRA node, its agent."""
    with claims_agent_cluster(
        "disagg", NODE, tmp_path_factory.mktemp("agent"), gpus=2, gpu_mib=GPU_MIB
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def operator(
    disagg_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_matrix(disagg_cluster, tmp_path_factory.mktemp("operator"))


def pools(name: str, *, profile: bool) -> dict[str, Any]:
    """A disaggregated job: a trainer pod and a rollout pod of one GPU each."""
    return disaggregated_rljob(name, POD_MIB, PROFILE if profile else None)


def test_two_disaggregated_jobs_that_say_their_cycles_share_both_gpus(
    disagg_cluster: DevCluster, operator: OperatorProcess
) -> None:
    cluster = disagg_cluster
    assert f"interference matrix from {MATRIX} (time_slicing)" in operator.log.read_text()
    ns = new_namespace(cluster)
    try:
        apply(cluster, ns, pools("a", profile=True))
        wait_for("a Running", lambda: rljob_state(cluster, ns, "a") == "Running", timeout_s=120)
        a = {pod: claimed_gpus(cluster, ns, pod) for pod in ("a-policy-0", "a-gen-0")}
        assert sorted(a.values()) == [(0,), (1,)], a  # its own pools on different GPUs

        # Each pod says how it spends an iteration, from the job's phaseProfile.
        notes = {
            pod: get_json(cluster, "pod", pod, "-n", ns)["metadata"]["annotations"] for pod in a
        }
        assert json.loads(notes["a-gen-0"][names.ANNOTATION_PHASE_SECONDS]) == {
            "rollout": 240, "weight-sync": 10, "idle": 110,
        }  # fmt: skip
        assert json.loads(notes["a-policy-0"][names.ANNOTATION_PHASE_SECONDS]) == {
            "scoring": 20, "training": 90, "weight-sync": 10, "idle": 240,
        }  # fmt: skip

        # Saying nothing, a job is judged busy in every phase: no pair pays.
        apply(cluster, ns, pools("quiet", profile=False))
        refused = wait_for_condition(
            cluster, ns, "quiet", "Admitted", lambda c: c["status"] == "False", what="quiet refused"
        )
        assert refused["reason"] == "WaitingForGPUs", refused
        assert "but the sharing rules" in refused["message"], refused
        assert not get_json(cluster, "pods", "-n", ns, "-l", f"{names.LABEL_JOB}=quiet")["items"]
        cluster.kubectl("delete", "rljob", "quiet", "-n", ns, "--timeout=60s")

        # The same job saying its cycle shares both GPUs with a.
        apply(cluster, ns, pools("b", profile=True))
        wait_for("b Running", lambda: rljob_state(cluster, ns, "b") == "Running", timeout_s=120)
        b = {pod: claimed_gpus(cluster, ns, pod) for pod in ("b-policy-0", "b-gen-0")}
        assert sorted(b.values()) == [(0,), (1,)], b
        # kubectl describe says so: its Admitted condition (and event) names them.
        admitted = wait_for_condition(
            cluster, ns, "b", "Admitted", lambda c: c["status"] == "True", what="b admitted"
        )
        shared = f"shares GPUs {NODE}/0, {NODE}/1 with {ns}/a"
        assert admitted["message"].endswith(shared), admitted
        assert rljob_state(cluster, ns, "a") == "Running"
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
