"""The admitted plan binds through Kubernetes itself (tier 3, real kube-scheduler).

The operator admits a gang onto planned nodes (the ledger, and the pods'
``rlix.io/admitted-node``), but kube-scheduler is what binds. If a pod binds
off-plan, the admitter counts it on its real node while its planned node looks
free, and promises that room a second time (the chaos run promised up to 43 of
32 GPUs). Here the extender is a stand whose view disagrees with admission's:
it scores every pod's admitted node lowest and another node highest, exactly
what the real extender does when its own scoring prefers elsewhere. The
operator runs without the real extender; nothing but Kubernetes can hold the
plan.

The ledger is read as the promise: per node, the GPUs it plans may never exceed
the node's GPUs (the jobs here ask 60000 of 81920 MiB per GPU, so no two pods
can share a GPU and a count is the whole truth).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, running_operator
from e2e.extender_stand import ExtenderStand, score_none
from e2e.kube import (
    apply,
    events_for,
    forbid_pods,
    get_json,
    rljob_manifest,
    trainer_role,
    wait_for,
)
from e2e.kube import rljob_condition as condition
from e2e.kube import rljob_state as state
from rlix.core import names
from rlix.devcluster.cluster import DevCluster
from rlix.operator import ledger

NODES, GPUS = 4, 8


@pytest.fixture(scope="module")
def stand(cluster: Any) -> Iterator[ExtenderStand]:
    if not isinstance(cluster, DevCluster):
        pytest.skip("needs the session's local control plane (extender port on 127.0.0.1)")
    with ExtenderStand(cluster.extender_port) as s:
        yield s


@pytest.fixture(scope="module")
def operator(
    cluster: Any, stand: ExtenderStand, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    workdir = tmp_path_factory.mktemp("operator")
    with running_operator(cluster, workdir, extra_args=("--replan-after-seconds", "3")) as op:
        yield op


def elsewhere(pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    """Top score for the first node that is not the pod's admitted node."""
    planned = (pod.get("metadata", {}).get("annotations") or {}).get(names.ANNOTATION_ADMITTED_NODE)
    other = next((n for n in sorted(nodes) if n != planned), None)
    return {other: 10} if other else {}


def rljob(name: str, replicas: int) -> dict[str, Any]:
    """``replicas`` pods of a whole node each (8 GPUs at 60000 of 81920 MiB)."""
    return rljob_manifest(name, trainer_role(replicas=replicas, gpus=GPUS, mib=60000))


def promised_per_node(cluster: Any) -> Counter[str]:
    """GPUs the admission ledger plans on each node, over every admitted job."""
    cm = get_json(cluster, "configmap", ledger.NAME, "-n", "default")
    out: Counter[str] = Counter()
    for entry in json.loads(cm["data"][ledger.DATA_KEY]).values():
        for node, gpus in entry["pods"].values():
            out[node] += len(gpus)
    return out


@pytest.fixture
def second_namespace(cluster: Any) -> Iterator[str]:
    name = "t-bind-quota"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_a_pod_binds_only_on_its_admitted_node_so_no_room_is_promised_twice(
    cluster: Any,
    namespace: str,
    second_namespace: str,
    stand: ExtenderStand,
    operator: OperatorProcess,
) -> None:
    stand.scores = elsewhere
    # b: three whole nodes, admitted, its pods kept from existing by a quota:
    # only the ledger says those nodes are taken.
    forbid_pods(cluster, second_namespace)
    apply(cluster, second_namespace, rljob("b", NODES - 1))
    wait_for("b admitted", lambda: state(cluster, second_namespace, "b") == "Admitted")
    # a: the fourth node. The stand pushes its pod onto one of b's nodes,
    # where it fits by count while b's pods do not exist.
    apply(cluster, namespace, rljob("a", 1))
    wait_for("a admitted", lambda: state(cluster, namespace, "a") in ("Admitted", "Running"))
    pod = wait_for(
        "a's pod bound",
        lambda: next(
            (
                p
                for p in get_json(cluster, "pods", "-n", namespace)["items"]
                if p["spec"].get("nodeName")
            ),
            None,
        ),
        timeout_s=90,
    )
    # c: one more whole node. Every node is promised already; c must wait.
    apply(cluster, namespace, rljob("c", 1))
    wait_for(
        "c decided",
        lambda: condition(cluster, namespace, "c", "Admitted"),
        timeout_s=90,
    )
    promised = promised_per_node(cluster)
    assert all(n <= GPUS for n in promised.values()), f"promised twice: {promised}"
    assert state(cluster, namespace, "c") == "Queued"
    assert condition(cluster, namespace, "c", "Admitted")["reason"] == "WaitingForGPUs"
    planned = pod["metadata"]["annotations"][names.ANNOTATION_ADMITTED_NODE]
    assert "filter" in stand.verbs_seen(pod["metadata"]["name"]), "the stand was asked"
    assert pod["spec"]["nodeName"] == planned, "bound off-plan"


def test_a_gang_whose_planned_node_turns_unusable_is_planned_again(
    cluster: Any,
    namespace: str,
    stand: ExtenderStand,
    operator: OperatorProcess,
) -> None:
    """Cordoned after admission: the pinned pod can never bind, so the gang is re-planned."""
    stand.scores = score_none
    forbid_pods(cluster, namespace)  # admitted, no pod yet: the plan is all there is
    apply(cluster, namespace, rljob("moves", 1))
    wait_for("admitted", lambda: state(cluster, namespace, "moves") == "Admitted")
    uid = get_json(cluster, "rlj", "moves", "-n", namespace)["metadata"]["uid"]
    cm = get_json(cluster, "configmap", ledger.NAME, "-n", "default")
    entry = json.loads(cm["data"][ledger.DATA_KEY])[f"{namespace}/moves"]
    assert entry["uid"] == uid
    ((planned, _),) = entry["pods"].values()
    cluster.kubectl("cordon", planned)
    try:
        cluster.kubectl("delete", "resourcequota", "no-pods", "-n", namespace)
        events = wait_for(
            "a Replanning event",
            lambda: [
                e for e in events_for(cluster, namespace, "moves") if e["reason"] == "Replanning"
            ],
            timeout_s=90,
        )
        assert planned in events[0]["message"], events[0]["message"]

        def running_elsewhere() -> str | None:
            pods = get_json(cluster, "pods", "-n", namespace)["items"]
            nodes = [
                p["spec"].get("nodeName")
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") == "Running"
            ]
            return nodes[0] if nodes else None

        node = wait_for("the pod running on another node", running_elsewhere, timeout_s=90)
        assert node != planned
        assert state(cluster, namespace, "moves") == "Running"
    finally:
        cluster.kubectl("uncordon", planned)
