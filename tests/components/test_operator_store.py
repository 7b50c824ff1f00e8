"""The operator's store: a write's late response never brings back a deleted object."""

from __future__ import annotations

from typing import Any

import pytest

from rlix.core import names
from rlix.operator import store as store_module
from rlix.operator.store import Store, job_key


def rljob(uid: str, rv: int, state: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "high", "namespace": "t", "uid": uid, "resourceVersion": str(rv)},
        "spec": {},
        "status": {"state": state},
    }


def pod(uid: str, rv: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "high-trainer-0",
            "namespace": "t",
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": {names.LABEL_JOB: "high"},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


def test_a_status_patch_answered_after_the_delete_event_does_not_resurrect_the_job() -> None:
    # Seen as a possible cause of a CI timeout: the job's admission stayed held
    # after it was deleted, so nothing waiting was admitted again.
    store = Store()
    store.put_job(rljob("uid-1", 10))
    store.drop_job("t/high", uid="uid-1")
    store.put_job(rljob("uid-1", 11))  # the patch response, newer than anything seen
    assert "t/high" not in store.jobs and "t/high" not in store.dirty
    # The same name, created again, is a new object.
    store.put_job(rljob("uid-2", 20, state="Queued"))
    assert store.jobs[job_key(rljob("uid-2", 20))]["metadata"]["uid"] == "uid-2"


def test_a_pod_patch_answered_after_the_pods_delete_event_does_not_hold_its_gpus() -> None:
    store = Store()
    store.put_pod(pod("pod-1", 10))
    assert store.pods_of("t/high")
    store.drop_pod(pod("pod-1", 12))
    store.put_pod(pod("pod-1", 11))  # an annotation patch's response
    assert not store.pods_of("t/high") and not list(store.all_pods())


def test_a_deletion_without_a_uid_forgets_as_before() -> None:
    store = Store()
    store.put_job(rljob("uid-1", 10))
    store.drop_job("t/high")
    store.put_job(rljob("uid-1", 11))
    assert "t/high" in store.jobs


def test_tombstones_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "TOMBSTONES", 2)
    store = Store()
    for uid in ("a", "b", "c"):
        store.drop_job(f"t/{uid}", uid=uid)
    assert not store.is_gone(rljob("a", 1))
    assert store.is_gone(rljob("b", 1)) and store.is_gone(rljob("c", 1))
