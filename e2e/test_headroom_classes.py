"""Parking that lets a job in, inside a class and by lending: the whole loop, for real.

``e2e/test_headroom.py``'s setup with three GPUs: a control plane of its own,
one kwok node whose three 81920 MiB GPUs reach the scheduler only as the
``gpu.rlix.io`` ResourceSlice a real node agent (simulated backend) publishes
at 1.5x memory overcommit (122880 MiB per GPU for the claims to sum to); the
real operator with its conductor, extender and rlix-scheduler. Each test fills
the three GPUs at 60000 MiB, then a job of 40000 MiB arrives: it fits no GPU
(60000 + 40000 > 81920 physical) until a pod is parked in place, and then
it is admitted next to the parked memory (claims 100000 <= 122880) and runs
while every pod of the parked job still exists. On whole GPUs, or at 1x, the
same arrival parks nobody (``e2e/test_conductor.py``): parking would free
nothing the scheduler counts (docs/conductor.md, "What parking frees").
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, events_for, get_json, new_namespace, rljob_state, wait_for
from e2e.own_cluster import headroom_agent_cluster
from e2e.suspensions import condition, finish, observed, pod_suspension, resumed_once_gone
from e2e.test_headroom import allocation, rljob, role
from rlix.cli.main import main as rlix
from rlix.devcluster.cluster import DevCluster
from tests.components.pod_processes import Trainer, connected_trainer
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")

NODE = "rlix-classes-gpu-0"
GPU_MIB = 81920
OVERCOMMIT = "1.5"
PROFILE = {"phaseProfile": {"rollout": 300, "training": 60}}


@pytest.fixture(scope="module")
def classes_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DevCluster, AgentProcess]]:
    """Its own control plane (named for the e2e reaper), one DRA node, its agent."""
    root = tmp_path_factory.mktemp("agent")
    with headroom_agent_cluster(
        "classes", NODE, root, gpus=3, gpu_mib=GPU_MIB, overcommit=OVERCOMMIT
    ) as both:
        yield both


@pytest.fixture(scope="module")
def operator(
    classes_cluster: tuple[DevCluster, AgentProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    cluster, _ = classes_cluster
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def running(cluster: DevCluster, ns: str, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    apply(cluster, ns, body)
    wait_for(f"{name} Running", lambda: rljob_state(cluster, ns, name) == "Running", timeout_s=120)


def uid_of(cluster: DevCluster, ns: str, pod: str) -> str:
    """The pod's UID: a real trainer process (``connected_trainer``) stands in
    for its container under it."""
    uid: str = get_json(cluster, "pod", pod, "-n", ns)["metadata"]["uid"]
    return uid


def admitted_beside(cluster: DevCluster, ns: str, pod: str, parked: str) -> None:
    """``pod`` runs on the GPU whose memory ``parked`` left, both claims counted."""
    there = allocation(cluster, ns, parked)
    here = allocation(cluster, ns, pod)
    assert there is not None and here is not None and here.gpus == there.gpus, (here, there)
    assert here.consumed_mib[0] + there.consumed_mib[0] > GPU_MIB, "over physical: headroom"


def test_a_far_smaller_job_of_its_class_runs_in_memory_a_sized_rollout_parked_for_it(
    classes_cluster: tuple[DevCluster, AgentProcess], operator: OperatorProcess
) -> None:
    """``spec.iterations`` sizes the jobs: one priority, and the far smaller
    arrival parks the larger job's rollout in place (docs/rljob.md, "Order
    inside a priority"), then runs in its memory."""
    cluster, agent = classes_cluster
    ns = new_namespace(cluster)
    # "fill" plans far more work than "long", so "long" is not the job that
    # would set the finish (that one is never parked for its class).
    fill = rljob("fill", 0, role("policy", "trainer", "training", 60000))
    fill["spec"].update(iterations=1_000_000, preemptibleRollout=False, **PROFILE)
    running(cluster, ns, fill)
    long = rljob(
        "long", 0, role("policy", "trainer", "training", 60000),
        role("gen", "rollout", "rollout", 60000),
    )  # fmt: skip
    long["spec"].update(iterations=1000, **PROFILE)  # 2 GPUs x 1000 x 360 s
    running(cluster, ns, long)
    uid = uid_of(cluster, ns, "long-gen-0")
    with connected_trainer(agent, uid) as trainer:
        before = trainer.ready["digest"]
        short = rljob("short", 0, role("policy", "trainer", "training", 40000))
        short["spec"].update(iterations=1, **PROFILE)  # 1 GPU x 1 x 360 s
        apply(cluster, ns, short)
        observed(cluster, ns, "long-gen-0", "Suspended")
        desired, _, same_uid = pod_suspension(cluster, ns, "long-gen-0")
        assert same_uid == uid, "parked in place, not deleted"
        assert desired is not None and desired.requester == f"{ns}/short"
        condition(cluster, ns, "long", "True", "Priority", says=f"for {ns}/short")
        said = [e["message"] for e in events_for(cluster, ns, "long")]
        assert any("its class: 0.1 expected GPU-hours left against" in m for m in said), said
        # The operator's log alone says why, for whom and both sizes.
        why = "long-gen-0: asked suspended (Priority): parked in place so that "
        why += f"{ns}/short (priority 0, its class: 0.1 expected GPU-hours left"
        wait_for("the operator log's reason", lambda: why in operator.tail(400), timeout_s=30)

        wait_for("short Running", lambda: rljob_state(cluster, ns, "short") == "Running")
        admitted_beside(cluster, ns, "short-policy-0", "long-gen-0")
        resumed_once_gone(cluster, ns, "long-gen-0", "short")
        assert trainer.ask("digest")["digest"] == before, "every parked byte came back"
    for job in ("long", "fill"):
        finish(cluster, ns, job)
    cluster.kubectl("delete", "namespace", ns, "--wait=false")


def top_data(cluster: DevCluster, ns: str) -> dict[str, Any]:
    """One frame of ``rlix top -o json``, as a person's terminal would get it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert rlix(["top", "-n", ns, f"--kubeconfig={cluster.kubeconfig}", "-o", "json"]) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def roster(trainer: Trainer, want: list[object]) -> None:
    """Wait until the client in the job's trainer pod reports ``want`` as its roster."""
    wait_for(
        f"the client reports {want}",
        lambda: trainer.ask("replicas")["roster"] == want,
        timeout_s=60,
    )


def test_an_elastic_rollout_lends_its_extra_replica_and_the_borrower_runs_in_it(
    classes_cluster: tuple[DevCluster, AgentProcess], operator: OperatorProcess
) -> None:
    """An elastic job (rollout 2 replicas, minReplicas 1) on all three GPUs
    lends one: parking its tail (replica 1) is enough for the high-priority
    arrival, so only it is parked (reason Lend), in place; the trainer's client
    hears that only replica 0 is active; the arrival runs in the lent memory;
    replica 1 comes back, bytes identical, when the arrival goes."""
    cluster, agent = classes_cluster
    ns = new_namespace(cluster)
    el = rljob(
        "el", 0, role("policy", "trainer", "training", 60000),
        role("rollout", "rollout", "rollout", 60000),
    )  # fmt: skip
    el["spec"]["roles"][1].update(replicas=2, elastic={"minReplicas": 1})
    running(cluster, ns, el)
    uid = uid_of(cluster, ns, "el-rollout-1")
    with (
        connected_trainer(agent, uid) as tail,
        connected_trainer(agent, uid_of(cluster, ns, "el-policy-0")) as head,
    ):
        before = tail.ready["digest"]
        roster(head, ["rollout", [0, 1], []])
        apply(cluster, ns, rljob("high", 10, role("policy", "trainer", "training", 40000)))
        seen = observed(cluster, ns, "el-rollout-1", "Suspended")
        desired, _, same_uid = pod_suspension(cluster, ns, "el-rollout-1")
        assert same_uid == uid, "lent in place, not deleted"
        assert desired is not None and desired.reason == "Lend"
        assert desired.requester == f"{ns}/high"
        assert seen.parked_bytes > 0 and tail.ask("live")["live"] == 0
        for kept in ("el-rollout-0", "el-policy-0"):
            assert pod_suspension(cluster, ns, kept)[0] is None, f"{kept} keeps running"
        roster(head, ["rollout", [0], [1]])
        held = condition(cluster, ns, "el", "True", "Lend")
        assert f"for {ns}/high" in held["message"] and "el-rollout-1" in held["message"]
        shown = top_data(cluster, ns)
        assert [
            (r["job"], r["pods"], r["state"], r["reason"], r["requester"])
            for r in shown["suspensions"]
        ] == [("el", ["el-rollout-1"], "parked", "Lend", f"{ns}/high")], shown
        assert {j["name"]: j["suspension"] for j in shown["rljobs"]}["el"] == "Lend"

        wait_for("high Running", lambda: rljob_state(cluster, ns, "high") == "Running")
        admitted_beside(cluster, ns, "high-policy-0", "el-rollout-1")
        resumed_once_gone(cluster, ns, "el-rollout-1", "high")
        assert tail.ask("digest")["digest"] == before, "every lent byte came back"
        roster(head, ["rollout", [0, 1], []])
    finish(cluster, ns, "el")
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
