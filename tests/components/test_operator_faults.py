"""Pure pieces of the operator's fault handling: the ledger, pod slots, ownership, webhook."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from rlix.core.policy.admission import PodPlacement
from rlix.operator import ledger, webhook
from rlix.operator.admitting import pod_slot_errors
from rlix.operator.ledger import Entry
from rlix.operator.reconciling import owned_by


def node(name: str, pods: str | None = "110", **spec: Any) -> dict[str, Any]:
    allocatable = {"nvidia.com/gpu": "8"} | ({"pods": pods} if pods is not None else {})
    return {"metadata": {"name": name}, "spec": spec, "status": {"allocatable": allocatable}}


def test_ledger_round_trips_placements_and_uids() -> None:
    entries = {
        "ns/a": Entry("uid-a", {"ns/a-t-0": PodPlacement("ns/a-t-0", "n1", (0, 1, 2, 3), 0)}),
        "ns/b": Entry("uid-b", {}),
    }
    assert ledger.decode(ledger.encode(entries)) == entries
    assert ledger.decode(None) == {} and ledger.decode("") == {}


@pytest.mark.parametrize("garbage", ["not json", "[1]", '{"ns/a": {"pods": {}}}', '{"a": 1}'])
def test_a_garbled_ledger_is_an_error_never_an_empty_one(garbage: str) -> None:
    # Read as empty, it would let every waiting job be admitted at once.
    with pytest.raises(ValueError, match=ledger.NAME):
        ledger.decode(garbage)


def test_ledger_configmap_carries_the_fence() -> None:
    body = ledger.configmap("rlix-system", {}, "42")
    assert body["metadata"] == {
        "name": ledger.NAME,
        "namespace": "rlix-system",
        "resourceVersion": "42",
    }
    assert "resourceVersion" not in ledger.configmap("x", {}, None)["metadata"]
    assert json.loads(body["data"][ledger.DATA_KEY]) == {}


def test_a_gang_larger_than_the_clusters_pod_slots_can_never_fit() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    (error,) = pod_slot_errors(460, nodes)
    assert error.path == "spec.roles"
    assert "460 pods" in error.message and "440 pod slots" in error.message
    assert pod_slot_errors(440, nodes) == []
    # Cordoned nodes offer no slots.
    assert pod_slot_errors(440, [*nodes[:3], node("n3", unschedulable=True)])
    # A node that does not say: unknown, so no refusal on a guess.
    assert pod_slot_errors(10_000, [node("n0", pods=None)]) == []


def test_a_pod_is_the_jobs_only_when_its_controller_uid_matches() -> None:
    def pod(*refs: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "j-t-0", "ownerReferences": list(refs)}}

    assert owned_by(pod({"uid": "new", "controller": True}), "new")
    # What `kubectl delete --cascade=orphan` leaves: no owner at all.
    assert not owned_by(pod(), "new")
    assert not owned_by(pod({"uid": "old", "controller": True}), "new")
    assert not owned_by(pod({"uid": "new", "controller": False}), "new")


def test_webhook_is_skipped_quickly_when_the_operator_does_not_answer() -> None:
    body = webhook.configuration("https://127.0.0.1:9443/", b"CA", timeout_s=2)
    (hook,) = body["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 2
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/validate"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == b"CA"
    assert hook["rules"][0]["resources"] == ["rljobs"]
    with pytest.raises(ValueError, match=r"1\.\.30"):
        webhook.configuration("https://x", b"CA", timeout_s=31)
