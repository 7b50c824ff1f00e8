"""Gang admission on a real cluster: a job that does not fit waits, with a reason, in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, get_json, wait_for

# The e2e cluster: 4 nodes x 8 GPUs x 81920 MiB.
NODES, GPUS = 4, 8
# A job that needs the whole cluster: 60000 MiB per GPU keeps two such jobs apart.
WHOLE = {"replicas": NODES, "gpus": GPUS, "mib": 60000}
# A declared iteration (seconds per phase): with ``iterations`` it sizes a job.
PROFILE = {"rollout": 300, "training": 60}


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def rljob(
    name: str, *, replicas: int, gpus: int, mib: int, priority: int = 0, **extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "algorithm": "GRPO",
            "priority": priority,
            **extra,
            "roles": [
                {
                    "name": "trainer",
                    "kind": "trainer",
                    "replicas": replicas,
                    "gpusPerReplica": gpus,
                    "image": "example.com/trainer:1",
                    "gpuMemoryMiB": {"training": mib, "rollout": mib},
                }
            ],
        },
    }


def status(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(cluster, "rlj", name, "-n", namespace).get("status", {})
    return found


def state(cluster: Any, namespace: str, name: str) -> str | None:
    value = status(cluster, namespace, name).get("state")
    return str(value) if value else None


def admitted(cluster: Any, namespace: str, name: str) -> dict[str, Any] | None:
    conditions = status(cluster, namespace, name).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Admitted"), None)


def fill_cluster(cluster: Any, namespace: str) -> None:
    """Every GPU of every node nearly full: nothing else fits anywhere."""
    apply(cluster, namespace, rljob("filler", replicas=NODES, gpus=GPUS, mib=80000))
    # The earlier test's jobs may still be going with their namespace.
    wait_for(
        "filler Running", lambda: state(cluster, namespace, "filler") == "Running", timeout_s=120
    )


def freed_in_order(cluster: Any, namespace: str, first: str, then: str) -> None:
    """Delete "filler": ``first`` is admitted while ``then`` waits; delete
    ``first``: ``then`` runs."""
    cluster.kubectl("delete", "rlj", "filler", "-n", namespace)
    wait_for(
        f"{first} admitted first",
        lambda: state(cluster, namespace, first) in ("Admitted", "Running"),
        timeout_s=90,
    )
    assert state(cluster, namespace, then) == "Queued"
    cluster.kubectl("delete", "rlj", first, "-n", namespace)
    wait_for(
        f"{then} admitted once {first} is gone",
        lambda: state(cluster, namespace, then) == "Running",
        timeout_s=90,
    )


def test_job_that_does_not_fit_waits_with_a_reason_and_runs_when_capacity_frees(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    fill_cluster(cluster, namespace)

    apply(cluster, namespace, rljob("low", **WHOLE, priority=1))
    condition = wait_for(
        "low waits",
        lambda: (c := admitted(cluster, namespace, "low")) and c["status"] == "False" and c,
    )
    assert condition["reason"] == "WaitingForGPUs"
    assert "fits nowhere" in condition["message"]
    assert condition["observedGeneration"] == 1
    assert state(cluster, namespace, "low") == "Queued"
    assert not get_json(cluster, "pods", "-n", namespace, "-l", "rlix.io/job=low")["items"]
    described = cluster.kubectl("describe", "rlj", "low", "-n", namespace).stdout
    assert "WaitingForGPUs" in described

    # Arrives later but outranks "low". Both need the whole cluster (RLix shares a
    # GPU by memory; 60000 MiB each keeps them apart), so when it frees up they
    # compete in one admission pass and priority decides. A smaller job would
    # not wait behind them: the policy does not block the queue on its head.
    apply(cluster, namespace, rljob("high", **WHOLE, priority=10))
    wait_for("high waits", lambda: state(cluster, namespace, "high") == "Queued")

    freed_in_order(cluster, namespace, "high", "low")
    reasons = [
        e["reason"]
        for e in get_json(cluster, "events", "-n", namespace)["items"]
        if e["involvedObject"]["name"] == "low"
    ]
    assert "WaitingForGPUs" in reasons and "Admitted" in reasons
    assert "rlix_operator_admitted_total" in operator.metrics()


def test_inside_a_priority_the_job_that_plans_less_work_is_admitted_first(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    fill_cluster(cluster, namespace)
    # Same priority, both need the whole cluster; "long" arrives first.
    apply(cluster, namespace, rljob("long", **WHOLE, iterations=1000, phaseProfile=PROFILE))
    wait_for("long waits", lambda: state(cluster, namespace, "long") == "Queued")
    apply(cluster, namespace, rljob("short", **WHOLE, iterations=10, phaseProfile=PROFILE))
    wait_for("short waits", lambda: state(cluster, namespace, "short") == "Queued")

    freed_in_order(cluster, namespace, "short", "long")


def test_a_sized_job_of_a_higher_priority_queues_with_the_lowest_for_its_grace(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    # docs/rljob.md, "Grace before precedence": "top" outranks "short" but
    # declares 1000 iterations of 360 s on 32 GPUs; its grace is a tenth of
    # that length (10 hours), so for now it queues among priority 0, least work first.
    fill_cluster(cluster, namespace)
    top = rljob("top", **WHOLE, priority=10, iterations=1000, phaseProfile=PROFILE)
    apply(cluster, namespace, top)
    apply(cluster, namespace, rljob("short", **WHOLE, iterations=10, phaseProfile=PROFILE))
    condition = wait_for(
        "top says it is in its grace",
        lambda: (
            (c := admitted(cluster, namespace, "top"))
            and "in its grace until" in c["message"]
            and c
        ),
    )
    assert condition["reason"] == "WaitingForGPUs"
    assert "queues among priority 0" in condition["message"]
    wait_for("short waits", lambda: state(cluster, namespace, "short") == "Queued")
    # Strict priority would admit "top" first; in its grace the smaller job goes.
    freed_in_order(cluster, namespace, "short", "top")
