"""The operator's store: a write's late response never brings back a deleted
object, and a relist forgets what a watch missed."""

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


def node(uid: str, rv: int, name: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": str(rv)}, "status": {}}


def test_a_relist_forgets_jobs_whose_deletion_the_watch_missed() -> None:
    store = Store()
    store.put_job(rljob("uid-1", 10))
    store.queue_changed = False
    assert store.forget_unlisted("jobs", [], "15") == ["t/high"]
    assert "t/high" not in store.jobs and store.queue_changed
    # Forgotten for good: a late patch response cannot bring it back.
    store.put_job(rljob("uid-1", 16))
    assert "t/high" not in store.jobs


def test_a_relist_keeps_what_is_newer_than_the_list_or_listed() -> None:
    store = Store()
    store.put_job(rljob("uid-1", 20))  # created after the list was served
    assert store.forget_unlisted("jobs", [], "15") == []
    assert "t/high" in store.jobs
    # Listed (even under a new uid, a re-created job): stays.
    assert store.forget_unlisted("jobs", [rljob("uid-2", 18)], "25") == []
    # No integer version: nothing to compare, so it stays.
    body = rljob("uid-3", 1)
    body["metadata"]["resourceVersion"] = "opaque"
    other = Store()
    other.put_job(body)
    assert other.forget_unlisted("jobs", [], "25") == []


def test_a_relist_of_one_namespace_leaves_the_others_alone() -> None:
    store = Store()
    store.put_job(rljob("uid-1", 10))
    assert store.forget_unlisted("jobs", [], "15", namespace="other") == []
    assert store.forget_unlisted("pods", [], "15", namespace="other") == []
    assert "t/high" in store.jobs
    assert store.forget_unlisted("jobs", [], "15", namespace="t") == ["t/high"]


def test_a_relist_frees_the_gpus_of_a_pod_whose_deletion_the_watch_missed() -> None:
    store = Store()
    store.put_pod(pod("pod-1", 10))
    kept = pod("pod-2", 30)
    kept["metadata"]["name"] = "high-trainer-1"
    store.put_pod(kept)  # newer than the list
    assert store.forget_unlisted("pods", [], "20") == ["t/high-trainer-0"]
    assert [p["metadata"]["name"] for p in store.all_pods()] == ["high-trainer-1"]
    store.put_pod(pod("pod-1", 21))
    assert len(list(store.all_pods())) == 1


def test_a_relist_forgets_a_deleted_node_and_a_late_listing_cannot_restore_it() -> None:
    store = Store()
    store.put_node(node("node-1", 5))
    store.put_node(node("node-2", 6, name="n2"))
    assert store.forget_unlisted("nodes", [node("node-2", 6, name="n2")], "9") == ["n1"]
    assert set(store.nodes) == {"n2"}
    store.put_node(node("node-1", 5))  # a list served before the deletion
    assert set(store.nodes) == {"n2"}
    store.drop_node("n2", uid="node-2")
    store.put_node(node("node-2", 7, name="n2"))
    assert not store.nodes
    # An older version never replaces a newer one.
    store.put_node(node("node-3", 12, name="n3"))
    store.put_node(node("node-3", 11, name="n3"))
    assert store.nodes["n3"]["metadata"]["resourceVersion"] == "12"


def test_a_relist_names_the_kinds_it_knows() -> None:
    with pytest.raises(ValueError, match="jobs, pods or nodes"):
        Store().forget_unlisted("services", [], "1")
