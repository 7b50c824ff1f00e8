"""The operator on a real control plane: examples run, phases reach status, delete cleans up."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import get_json, wait_for
from rlix.core import names
from rlix.core.rljob import RLJob

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def status(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(cluster, "rlj", name, "-n", namespace).get("status", {})
    return found


def pods(cluster: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cluster, "pods", "-n", namespace, "-l", f"{names.LABEL_JOB}={job}"
    )["items"]
    return items


def wait_state(
    cluster: Any, namespace: str, name: str, state: str, operator: OperatorProcess
) -> None:
    """Wait for ``status.state``; on timeout say what the cluster and operator saw."""
    try:
        wait_for(
            f"{name} {state}",
            lambda: status(cluster, namespace, name).get("state") == state,
            timeout_s=90,
        )
    except AssertionError as exc:
        job = cluster.kubectl("get", "rlj", name, "-n", namespace, "-o", "yaml", check=False)
        listing = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False)
        raise AssertionError(
            f"{exc}\n{job.stdout}\n{listing.stdout}\n--- operator log ---\n{operator.tail()}"
        ) from None


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_bound_on_gpu_nodes_and_delete_removes_everything(
    cluster: Any, namespace: str, operator: OperatorProcess, example: Path
) -> None:
    job = RLJob.model_validate(yaml.safe_load(example.read_text()))
    cluster.kubectl("apply", "-n", namespace, "-f", str(example))
    wait_state(cluster, namespace, job.name, "Running", operator)
    uid = get_json(cluster, "rlj", job.name, "-n", namespace)["metadata"]["uid"]
    created = pods(cluster, namespace, job.name)
    expected = {f"{job.name}-{r.name}-{i}" for r in job.spec.roles for i in range(r.replicas)}
    assert {p["metadata"]["name"] for p in created} == expected
    said_somewhere = False
    for pod in created:
        role = job.spec.role(pod["metadata"]["labels"][names.LABEL_ROLE])
        assert role is not None
        assert pod["spec"]["schedulerName"] == names.SCHEDULER_NAME
        assert pod["spec"]["nodeName"].startswith("rlix-gpu-")
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("RLJob", uid, True)
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        assert int(limits.get(names.GPU_RESOURCE, 0)) == role.gpus_per_replica
        # How the pod spends an iteration, as admission weighed it (grpo-trl's
        # pools, verl's colocated trainer; none without phaseProfile).
        said = pod["metadata"].get("annotations", {}).get(names.ANNOTATION_PHASE_SECONDS)
        seconds = job.spec.pod_phase_seconds(role)
        assert (json.loads(said) if said else {}) == {p.value: s for p, s in seconds.items()}
        said_somewhere |= bool(said)
    assert said_somewhere == (job.spec.phase_profile is not None)

    table = cluster.kubectl("get", "rlj", job.name, "-n", namespace).stdout
    assert "Running" in table and str(job.spec.gpus) in table
    described = cluster.kubectl("describe", "rlj", job.name, "-n", namespace).stdout
    assert "Admitted" in described and "CreatedPods" in described

    cluster.kubectl("delete", "rlj", job.name, "-n", namespace)
    wait_for("pods garbage-collected", lambda: not pods(cluster, namespace, job.name), timeout_s=60)


def _annotate_phase(cluster: Any, namespace: str, pod: str, phase: str) -> None:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.kubectl(
        "annotate", "pod", pod, "-n", namespace, "--overwrite",
        f"{names.ANNOTATION_PHASE}={phase}", f"{names.ANNOTATION_PHASE_SINCE}={since}",
    )  # fmt: skip


def _set_pod_phase(cluster: Any, namespace: str, pod: str, phase: str) -> None:
    """Write the pod's status.phase, as its kubelet would."""
    cluster.kubectl(
        "patch", "pod", pod, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", f'{{"status":{{"phase":"{phase}"}}}}',
    )  # fmt: skip


def _running_example(cluster: Any, namespace: str, operator: OperatorProcess) -> RLJob:
    """examples/grpo-trl.yaml applied and Running."""
    example = ROOT / "examples" / "grpo-trl.yaml"
    job = RLJob.model_validate(yaml.safe_load(example.read_text()))
    cluster.kubectl("apply", "-n", namespace, "-f", str(example))
    wait_state(cluster, namespace, job.name, "Running", operator)
    return job


def test_pod_phase_annotations_are_aggregated_into_status(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    job = _running_example(cluster, namespace, operator)
    trainer = f"{job.name}-policy-0"
    for phase in ("rollout", "training", "weight-sync"):
        started = time.monotonic()
        _annotate_phase(cluster, namespace, trainer, phase)

        def shows(phase: str = phase) -> bool:
            return bool(status(cluster, namespace, job.name).get("phase") == phase)

        wait_for(
            f"status.phase {phase}",
            shows,
            timeout_s=15,
            every_s=0.05,
        )
        # Reported, not asserted: speed belongs to bench/, not to pass/fail.
        print(f"phase {phase} visible in status after {time.monotonic() - started:.2f}s")
    final = status(cluster, namespace, job.name)
    assert final["iterations"] == 1  # the trainer left training once
    assert set(final["phaseSeconds"]) == {"rollout", "training"}
    by_role = {r["name"]: r for r in final["roles"]}
    assert by_role["policy"]["phase"] == "weight-sync"
    assert "phase" not in by_role["rollout"]  # its pod never reported one
    assert by_role["policy"]["waiting"] == 0

    # The node agent marks a pod that waits its turn at its phase gate: the
    # role counts it (stored by the API server, so the CRD's schema has it).
    def waiting() -> int:
        roles = status(cluster, namespace, job.name).get("roles") or []
        return int(next(r for r in roles if r["name"] == "policy").get("waiting", -1))

    mark = names.ANNOTATION_WAITING_FOR_TURN
    cluster.kubectl("annotate", "pod", trainer, "-n", namespace, "--overwrite", f"{mark}=training")
    wait_for("the policy role counting one pod waiting", lambda: waiting() == 1, timeout_s=15)
    assert status(cluster, namespace, job.name)["waitingForTurn"] == 1
    # The API server prints the job's sum as a wide column (the CRD's printer column).
    assert _wide_column(cluster, namespace, job.name, "WAITING") == "1"
    cluster.kubectl("annotate", "pod", trainer, "-n", namespace, f"{mark}-")
    wait_for("the policy role counting none waiting", lambda: waiting() == 0, timeout_s=15)
    assert status(cluster, namespace, job.name)["waitingForTurn"] == 0
    assert _wide_column(cluster, namespace, job.name, "WAITING") == "0"


def _wide_column(cluster: Any, namespace: str, name: str, column: str) -> str:
    """One cell of ``kubectl get rlj NAME -o wide`` (the server-side table)."""
    header, row = cluster.kubectl(
        "get", "rlj", name, "-n", namespace, "-o", "wide"
    ).stdout.splitlines()
    start = header.index(f" {column} ") + 1  # kubectl left-aligns a cell under its header
    return row[start:].split()[0]


def test_a_trainer_seen_finished_before_its_last_phases_keeps_its_last_iteration(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    # The node agent publishes phases in the background and the kubelet writes
    # the pod's phase on its own: a trainer that leaves training and exits can
    # read Succeeded while its annotation still says training. The job waits
    # for the late phase (reconciling.SETTLE_S) instead of losing the iteration.
    job = _running_example(cluster, namespace, operator)
    trainer = f"{job.name}-policy-0"
    _annotate_phase(cluster, namespace, trainer, "training")
    wait_for(
        "status.phase training",
        lambda: status(cluster, namespace, job.name).get("phase") == "training",
    )
    _set_pod_phase(cluster, namespace, trainer, "Succeeded")
    time.sleep(1.0)  # the publication arrives late
    assert status(cluster, namespace, job.name).get("state") != "Succeeded"
    _annotate_phase(cluster, namespace, trainer, "idle")
    wait_state(cluster, namespace, job.name, "Succeeded", operator)
    assert status(cluster, namespace, job.name)["iterations"] == 1


def test_failed_pod_is_recreated_and_counted(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    job = _running_example(cluster, namespace, operator)
    victim = f"{job.name}-rollout-0"
    old_uid = get_json(cluster, "pod", victim, "-n", namespace)["metadata"]["uid"]
    _set_pod_phase(cluster, namespace, victim, "Failed")

    def recreated() -> bool:
        found = [p for p in pods(cluster, namespace, job.name) if p["metadata"]["name"] == victim]
        return bool(found) and found[0]["metadata"]["uid"] != old_uid

    wait_for("the failed pod recreated", recreated, timeout_s=60)
    wait_for("restart counted", lambda: status(cluster, namespace, job.name).get("restarts") == 1)
    reasons = {e["reason"] for e in get_json(cluster, "events", "-n", namespace)["items"]}
    assert "PodFailed" in reasons


def test_roles_cannot_change_after_creation_but_priority_can(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    text = (ROOT / "examples" / "grpo-trl.yaml").read_text()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=text)
    grown = text.replace("replicas: 1", "replicas: 2")
    result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=grown, check=False)
    assert result.returncode != 0
    assert "spec.roles" in result.stderr and "cannot change" in result.stderr
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=text.replace("priority: 100", "priority: 7")
    )
    spec = get_json(cluster, "rlj", "grpo-qwen-math", "-n", namespace)["spec"]
    assert spec["priority"] == 7 and spec["roles"][0]["replicas"] == 1
