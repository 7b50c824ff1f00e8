"""Faults a careless user, a crash or a second operator cause, on the real control plane.

Each test reproduces one finding of issue 18: a job held with no word why, a
re-applied job adopting its predecessor's pod, reservations lost to a restart
or a second operator, a finished job's pods outliving it, writes hanging on a
stopped operator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import (
    apply,
    events_for,
    forbid_pods,
    get_json,
    wait_for,
)
from e2e.kube import (
    rljob_condition as condition,
)
from e2e.kube import rljob_manifest as rljob
from e2e.kube import (
    rljob_state as state,
)
from e2e.kube import (
    rljob_status as status,
)
from e2e.kube import trainer_role as trainer
from rlix.core import names

# The e2e cluster: 4 nodes x 8 GPUs x 81920 MiB, 110 pod slots each.
NODES, GPUS = 4, 8


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def whole_cluster(name: str) -> dict[str, Any]:
    """Every GPU at 60000 of 81920 MiB: two of these can never run together."""
    return rljob(name, trainer(replicas=NODES, gpus=GPUS, mib=60000))


def rollout_role(*, replicas: int) -> dict[str, Any]:
    """A ``rollout`` role of ``replicas`` one-GPU pods, 10000 MiB each."""
    return {
        "name": "rollout",
        "kind": "rollout",
        "replicas": replicas,
        "gpusPerReplica": 1,
        "image": "example.com/vllm:1",
        "gpuMemoryMiB": {"rollout": 10000},
    }


def running(cluster: Any, namespace: str, job: dict[str, Any]) -> str:
    """Apply ``job`` and wait until it runs; its name."""
    name = str(job["metadata"]["name"])
    apply(cluster, namespace, job)
    wait_for("Running", lambda: state(cluster, namespace, name) == "Running")
    return name


def patch_status(cluster: Any, namespace: str, kind: str, name: str, fields: str) -> None:
    """Merge ``fields`` (JSON) into an object's status, as its controller would."""
    cluster.kubectl(
        "patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", f'{{"status":{fields}}}',
    )  # fmt: skip


def job_pods(cluster: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = f"{names.LABEL_JOB}={job}"
    items: list[dict[str, Any]] = get_json(cluster, "pods", "-n", namespace, "-l", selector)[
        "items"
    ]
    return items


def test_gang_with_more_pods_than_the_cluster_has_slots_is_held_naming_the_field(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    workers = {"name": "workers", "kind": "rollout", "replicas": 459, "gpusPerReplica": 0}
    workers["image"] = "example.com/env:1"
    apply(cluster, namespace, rljob("many", trainer(), workers))
    held = wait_for(
        "NeverFits",
        lambda: (
            (c := condition(cluster, namespace, "many", "Admitted"))
            and c["reason"] == "NeverFits"
            and c
        ),
    )
    assert "spec.roles" in held["message"] and "pod slots" in held["message"], held
    assert state(cluster, namespace, "many") == "Queued"
    assert not job_pods(cluster, namespace, "many")
    warnings = [e for e in events_for(cluster, namespace, "many") if e["type"] == "Warning"]
    assert any(e["reason"] == "NeverFits" for e in warnings), warnings


def test_pod_refused_by_a_quota_is_reported_on_the_job(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    forbid_pods(cluster, namespace)
    apply(cluster, namespace, rljob("quota", trainer()))
    refused = wait_for(
        "PodCreationRefused",
        lambda: (
            (c := condition(cluster, namespace, "quota", "Running"))
            and c["reason"] == "PodCreationRefused"
            and c
        ),
    )
    assert "exceeded quota" in refused["message"], refused
    assert state(cluster, namespace, "quota") == "Admitted"
    reasons = {e["reason"] for e in events_for(cluster, namespace, "quota")}
    assert "PodCreationRefused" in reasons


def test_reapplied_job_replaces_the_orphaned_pod_of_its_predecessor(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    running(cluster, namespace, rljob("again", trainer()))
    patch_status(cluster, namespace, "pod", "again-policy-0", '{"phase":"Succeeded"}')
    wait_for("Succeeded", lambda: state(cluster, namespace, "again") == "Succeeded")
    old = job_pods(cluster, namespace, "again")[0]["metadata"]["uid"]
    cluster.kubectl("delete", "rlj", "again", "-n", namespace, "--cascade=orphan")
    wait_for(
        "the pod orphaned",
        lambda: not job_pods(cluster, namespace, "again")[0]["metadata"].get("ownerReferences"),
    )

    apply(cluster, namespace, rljob("again", trainer()))
    uid = get_json(cluster, "rlj", "again", "-n", namespace)["metadata"]["uid"]

    def replaced() -> bool:
        found = job_pods(cluster, namespace, "again")
        refs = found[0]["metadata"].get("ownerReferences", []) if found else []
        return bool(found) and found[0]["metadata"]["uid"] != old and refs[0]["uid"] == uid

    wait_for("the pod recreated for the new job", replaced)
    wait_for("Running", lambda: state(cluster, namespace, "again") == "Running")
    # The predecessor's events share the name; only the new job's (by uid) count.
    events = events_for(cluster, namespace, "again")
    reasons = {e["reason"] for e in events if e["involvedObject"].get("uid") == uid}
    assert "StalePodReplaced" in reasons and "Succeeded" not in reasons, reasons


def test_finished_job_left_with_running_pods_is_cleaned_up_after_a_restart(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    running(cluster, namespace, rljob("left", trainer(), rollout_role(replicas=3)))
    # What a crash between "mark Succeeded" and "delete the pods" leaves.
    operator.kill()
    patch_status(cluster, namespace, "rlj", "left", '{"state":"Succeeded"}')
    operator.start()

    def live() -> list[str]:
        return [
            p["metadata"]["name"]
            for p in job_pods(cluster, namespace, "left")
            if not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]

    wait_for("no live pod of the finished job", lambda: not live() or None)


def test_a_job_whose_trainer_finished_gets_no_pod_again_after_a_restart(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    running(cluster, namespace, rljob("half", trainer(), rollout_role(replicas=2)))
    # What a crash between "delete the pods" and "mark Succeeded" leaves (a
    # chaos run's operator, SIGKILLed there, started both rollouts again).
    operator.kill()
    patch_status(cluster, namespace, "pod", "half-policy-0", '{"phase":"Succeeded"}')
    cluster.kubectl("delete", "pod", "half-rollout-0", "half-rollout-1", "-n", namespace)
    operator.start()
    wait_for("Succeeded", lambda: state(cluster, namespace, "half") == "Succeeded")
    created = [
        line
        for line in operator.metrics().splitlines()
        if line.startswith("rlix_operator_pods_created_total ")
    ]
    assert created == ["rlix_operator_pods_created_total 0.0"]
    assert [p["metadata"]["name"] for p in job_pods(cluster, namespace, "half")] == [
        "half-policy-0"
    ]


def test_restart_does_not_forget_an_admission_whose_pods_do_not_exist(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    forbid_pods(cluster, namespace)
    apply(cluster, namespace, whole_cluster("a"))
    wait_for("a admitted", lambda: state(cluster, namespace, "a") == "Admitted", timeout_s=90)
    apply(cluster, namespace, whole_cluster("b"))
    wait_for(
        "b waits for a's GPUs",
        lambda: (
            (c := condition(cluster, namespace, "b", "Admitted"))
            and c["reason"] == "WaitingForGPUs"
        ),
    )
    operator.kill()
    operator.start()
    # A small job shares a's GPUs by memory: once the restarted operator has
    # admitted it, it has decided with a's reservation in hand (or without).
    apply(cluster, namespace, rljob("small", trainer(mib=10000)))
    wait_for("small admitted", lambda: state(cluster, namespace, "small") == "Admitted")
    assert state(cluster, namespace, "a") == "Admitted"
    assert state(cluster, namespace, "b") == "Queued", status(cluster, namespace, "b")


def test_webhook_does_not_hold_writes_while_the_operator_is_stopped(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    (hook,) = get_json(cluster, "validatingwebhookconfiguration", "rlix.io")["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] <= 5, hook["timeoutSeconds"]
    operator.pause()
    try:
        apply(cluster, namespace, rljob("while-stopped", trainer()))
        assert get_json(cluster, "rlj", "while-stopped", "-n", namespace)["metadata"]["uid"]
    finally:
        operator.resume()
    wait_for("Running", lambda: state(cluster, namespace, "while-stopped") == "Running")


def test_a_second_operator_never_promises_what_the_first_admitted(
    cluster: Any,
    namespace: str,
    operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A second replica (``operator.replicas: 2``) knows the first's admissions only from the API.

    The first operator admits one of four whole-cluster jobs (the quota keeps
    its pods from existing, so only a reservation says its GPUs are taken).
    Then a second starts, and with the first stopped it alone decides a small
    job: having decided it, it has passed over the three waiting big jobs with
    or without the first one's reservation. The exact interleaving of two
    passes is forced in e2e/test_admission_ledger.py.
    """
    forbid_pods(cluster, namespace)
    jobs = [f"j{i}" for i in range(4)]
    apply(cluster, namespace, *(whole_cluster(j) for j in jobs))

    def admitted() -> list[str]:
        return [j for j in jobs if state(cluster, namespace, j) == "Admitted"]

    wait_for("one admitted", admitted, timeout_s=90)
    second = OperatorProcess(cluster, tmp_path_factory.mktemp("second-operator"))
    second.start()
    try:
        operator.pause()
        try:
            apply(cluster, namespace, rljob("small", trainer(mib=10000)))
            wait_for("small admitted", lambda: state(cluster, namespace, "small") == "Admitted")
            assert len(admitted()) == 1, admitted()
        finally:
            operator.resume()
        # Both running now: each passes over the queue again.
        apply(cluster, namespace, rljob("small2", trainer(mib=10000)))
        wait_for("small2 admitted", lambda: state(cluster, namespace, "small2") == "Admitted")
        assert len(admitted()) == 1, admitted()
    finally:
        second.stop()
        # The second operator registered the webhook last; hand it back.
        operator.stop()
        operator.start()
