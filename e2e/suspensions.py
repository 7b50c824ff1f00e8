"""Reading the conductor's protocol off pods and jobs, for the real-cluster tests."""

from __future__ import annotations

import time
from typing import Any

from e2e.kube import get_json, rljob_condition, rljob_state, wait_for
from rlix.core.suspension import (
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    CONDITION_SUSPENDED,
    DesiredSuspension,
    ObservedSuspension,
    State,
)


def pod_suspension(
    cluster: Any, namespace: str, pod: str
) -> tuple[DesiredSuspension | None, ObservedSuspension | None, str]:
    body = get_json(cluster, "pod", pod, "-n", namespace)
    notes = body["metadata"].get("annotations") or {}
    desired = notes.get(ANNOTATION_DESIRED)
    observed = notes.get(ANNOTATION_OBSERVED)
    return (
        DesiredSuspension.parse(desired) if desired else None,
        ObservedSuspension.parse(observed) if observed else None,
        str(body["metadata"]["uid"]),
    )


def observed(cluster: Any, namespace: str, pod: str, outcome: str) -> ObservedSuspension:
    latest: list[tuple[DesiredSuspension | None, ObservedSuspension | None]] = [(None, None)]

    def probe() -> ObservedSuspension | None:
        desired, seen, _ = pod_suspension(cluster, namespace, pod)
        latest[0] = (desired, seen)
        ok = seen is not None and desired is not None and seen.generation == desired.generation
        return seen if ok and seen is not None and seen.outcome.value == outcome else None

    try:
        return wait_for(f"{pod}: {outcome} observed", probe, timeout_s=90)
    except AssertionError as exc:
        desired, seen = latest[0]  # what the pod said last, not just "None"
        raise AssertionError(f"{exc}; desired {desired}, observed {seen}") from None


def condition(
    cluster: Any, namespace: str, job: str, status: str, reason: str, *, says: str = ""
) -> dict[str, Any]:
    """Wait for the job's Suspended condition (and a message that ``says`` this)."""

    def probe() -> dict[str, Any] | None:
        c = rljob_condition(cluster, namespace, job, CONDITION_SUSPENDED)
        ok = c and c["status"] == status and c["reason"] == reason and says in c["message"]
        return c if ok else None

    return wait_for(f"{job}: {CONDITION_SUSPENDED}={status} ({reason})", probe, timeout_s=60)


def finish(cluster: Any, namespace: str, job: str) -> None:
    cluster.kubectl(
        "patch", "pod", f"{job}-policy-0", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", '{"status":{"phase":"Succeeded"}}',
    )  # fmt: skip
    wait_for(f"{job} Succeeded", lambda: rljob_state(cluster, namespace, job) == "Succeeded")


def resumed_once_gone(
    cluster: Any, namespace: str, pod: str, waiter: str, *, hold_s: float = 3.0
) -> None:
    """``pod``, parked for the job ``waiter``, stays parked while ``waiter`` is
    there, then comes back once it is deleted: one park, one resume
    (generation 2). A resume that takes back the room made for the waiter
    comes on the conductor's next pass, within seconds of the park, so
    ``hold_s`` of watching finds it, and nothing else in a test may: the
    final resume reads the same either way."""
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:
        desired, _, _ = pod_suspension(cluster, namespace, pod)
        parked = desired is not None and desired.state is State.SUSPENDED
        assert parked and desired is not None and desired.generation == 1, (
            f"{pod} asked {desired} while {waiter}, which it was parked for, still waited"
        )
        time.sleep(0.25)
    cluster.kubectl("delete", "rlj", waiter, "-n", namespace, "--wait=true")
    observed(cluster, namespace, pod, "Resumed")
    desired, _, _ = pod_suspension(cluster, namespace, pod)
    assert desired is not None and desired.reason == "MemoryFree", desired
    assert desired.generation == 2, desired
