"""Restart safety: an operator SIGKILLed at any point neither duplicates nor loses pods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, get_json, wait_for
from rlix.core import names

ROLLOUT_REPLICAS = 24


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def wide_job(name: str) -> dict[str, Any]:
    """Many small pods, so a kill lands while pods are still being created."""
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "algorithm": "GRPO",
            "roles": [
                {
                    "name": "policy",
                    "kind": "trainer",
                    "gpusPerReplica": 4,
                    "image": "example.com/trainer:1",
                    "gpuMemoryMiB": {"training": 70000},
                },
                {
                    "name": "rollout",
                    "kind": "rollout",
                    "replicas": ROLLOUT_REPLICAS,
                    "gpusPerReplica": 1,
                    "image": "example.com/vllm:1",
                    "gpuMemoryMiB": {"rollout": 20000},
                },
            ],
        },
    }


def pods(cluster: Any, namespace: str, job: str) -> dict[str, str]:
    """Pod name -> uid; a recreated pod would show up as a new uid."""
    items = get_json(cluster, "pods", "-n", namespace, "-l", f"{names.LABEL_JOB}={job}")["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}


def status(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(cluster, "rlj", name, "-n", namespace).get("status", {})
    return found


@pytest.mark.parametrize("kill_after_pods", [0, 1, 10])
def test_sigkill_mid_reconcile_then_restart_gives_each_pod_exactly_once(
    cluster: Any, namespace: str, operator: OperatorProcess, kill_after_pods: int
) -> None:
    expected = {"job-policy-0"} | {f"job-rollout-{i}" for i in range(ROLLOUT_REPLICAS)}
    apply(cluster, namespace, wide_job("job"))
    if kill_after_pods:
        wait_for(
            f">= {kill_after_pods} pods",
            lambda: len(pods(cluster, namespace, "job")) >= kill_after_pods,
            every_s=0.02,
        )
    else:
        # Killed around the admission decision itself, before or after it is written.
        wait_for("admission", lambda: status(cluster, namespace, "job").get("state"), every_s=0.02)
    operator.kill()
    before = pods(cluster, namespace, "job")
    assert set(before) <= expected

    operator.start()
    wait_for("Running", lambda: status(cluster, namespace, "job").get("state") == "Running")
    after = pods(cluster, namespace, "job")
    assert set(after) == expected
    # Pods that existed at the kill were adopted, not replaced.
    assert {name: after[name] for name in before} == before
    cluster.kubectl("delete", "rlj", "job", "-n", namespace, "--wait=false")
    wait_for("cleanup", lambda: not pods(cluster, namespace, "job"))


def test_status_converges_after_a_restart_that_missed_phase_changes(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, wide_job("phases"))
    wait_for("Running", lambda: status(cluster, namespace, "phases").get("state") == "Running")
    operator.kill()
    # While the operator is down the trainer moves on; nobody writes status.
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.kubectl(
        "annotate", "pod", "phases-policy-0", "-n", namespace, "--overwrite",
        f"{names.ANNOTATION_PHASE}=training", f"{names.ANNOTATION_PHASE_SINCE}={stamp}",
    )  # fmt: skip
    assert status(cluster, namespace, "phases").get("phase") is None
    operator.start()
    wait_for("phase", lambda: status(cluster, namespace, "phases").get("phase") == "training")
    assert len(pods(cluster, namespace, "phases")) == 1 + ROLLOUT_REPLICAS
