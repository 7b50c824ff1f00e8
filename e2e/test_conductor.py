"""The conductor on the real control plane, with a simulated node agent.

The operator (with its conductor) and the extender run as real processes; the
RLJob's pods are created by the operator and bound by kube-scheduler. A real
node agent process (simulated GPUs) serves the node the rollout pod landed on,
and a real trainer process (torch tensors, the client library) stands in for
the rollout pod's container: only the proc tree mapping its PID to the pod's
UID is the harness's. ``rlix suspend|resume rljob`` goes through the API
server alone: RLJob annotation -> conductor -> pod's desired state -> agent ->
pod's observed state.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, events_for, get_json, one_gpu_role, rljob_state, wait_for
from e2e.suspensions import condition, finish, observed, pod_suspension
from rlix.cli.main import main as rlix
from rlix.core import names
from rlix.core.suspension import (
    ANNOTATION_AGENT_HEARTBEAT,
)
from tests.components.pod_processes import Trainer, wait_connected
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("conductor"))


def rljob(name: str, *, preemptible: bool = True) -> dict[str, Any]:
    def role(role: str, kind: str, phase: str) -> dict[str, Any]:
        return one_gpu_role(role, kind, {phase: 20000})

    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "algorithm": "GRPO",
            "preemptibleRollout": preemptible,
            "roles": [role("policy", "trainer", "training"), role("rollout", "rollout", "rollout")],
        },
    }


def running_job(cluster: Any, namespace: str, name: str, **kw: Any) -> dict[str, Any]:
    """Apply the job, wait until it runs; its rollout pod."""
    apply(cluster, namespace, rljob(name, **kw))
    wait_for(f"{name} Running", lambda: rljob_state(cluster, namespace, name) == "Running")
    return dict(get_json(cluster, "pod", f"{name}-rollout-0", "-n", namespace))


def start_agent(cluster: Any, node: str, root: Path) -> AgentProcess:
    labels = get_json(cluster, "node", node)["metadata"]["labels"]
    return AgentProcess(
        root,
        node=node,
        kubeconfig=Path(cluster.kubeconfig),
        sim_gpus=int(labels[names.NODE_LABEL_GPU_COUNT]),
        sim_gpu_memory_mib=int(labels[names.NODE_LABEL_GPU_MEMORY_MIB]),
    ).start()


@pytest.fixture(autouse=True)
def conductor_never_failed(operator: OperatorProcess) -> Iterator[None]:
    """A conductor pass that raised is logged and retried; in these tests, none may."""
    yield
    assert "conductor pass failed" not in operator.tail(5000), operator.tail(80)


@pytest.fixture
def agents(cluster: Any) -> Iterator[list[AgentProcess]]:
    """Agents a test starts; stopped after it, and their node annotations removed
    (the session's other tests place on these nodes, and a fresh heartbeat
    would tell the conductor an agent is there)."""
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.kill()
        cluster.kubectl(
            "annotate", "node", agent.node,
            f"{names.ANNOTATION_NODE_GPUS}-", f"{ANNOTATION_AGENT_HEARTBEAT}-", check=False,
        )  # fmt: skip


def freeze(agent: AgentProcess, sig: signal.Signals) -> None:
    """SIGSTOP / SIGCONT the agent (AgentProcess.kill waits for an exit)."""
    assert agent.popen is not None
    os.kill(agent.popen.pid, sig)


def cli(cluster: Any, verb: str, namespace: str, job: str) -> None:
    kube = f"--kubeconfig={cluster.kubeconfig}"
    assert rlix([verb, "rljob", job, "-n", namespace, kube]) == 0


def test_suspend_parks_the_rollout_pod_in_place_and_resume_brings_its_bytes_back(
    cluster: Any, namespace: str, operator: OperatorProcess, agents: list[AgentProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    pod = running_job(cluster, namespace, "cond-a")
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    agent = start_agent(cluster, node, tmp_path / "agent")
    agents.append(agent)
    trainer = Trainer(agent, uid)
    try:
        wait_connected(agent, trainer.proc.pid, uid=uid)
        before, live = trainer.ready["digest"], trainer.ready["live"]
        cli(cluster, "suspend", namespace, "cond-a")
        seen = observed(cluster, namespace, "cond-a-rollout-0", "Suspended")
        assert seen.parked_bytes >= live > 0, (seen, live)
        assert trainer.ask("live")["live"] == 0, "its memory is parked, not on the device"
        desired, _, same_uid = pod_suspension(cluster, namespace, "cond-a-rollout-0")
        assert same_uid == uid, "suspended in place: the same pod, not a new one"
        assert desired is not None and desired.generation == 1 and desired.reason == "Manual"
        held = condition(
            cluster, namespace, "cond-a", "True", "Manual", says=f"{seen.parked_bytes} bytes"
        )
        assert "cond-a-rollout-0" in held["message"] and "waiting" not in held["message"]

        cli(cluster, "resume", namespace, "cond-a")
        observed(cluster, namespace, "cond-a-rollout-0", "Resumed")
        assert trainer.ask("digest")["digest"] == before, "every parked byte came back"
        condition(cluster, namespace, "cond-a", "False", "Running")
        wait_for(
            "Suspended and Resumed events on the job",
            lambda: (
                {"Suspended", "Resumed"}
                <= {e["reason"] for e in events_for(cluster, namespace, "cond-a")}
            ),
        )
        assert 'rlix_conductor_suspensions_total{outcome="Suspended",reason="Manual"}' in (
            operator.metrics()
        )
    finally:
        trainer.close()
    assert pod_suspension(cluster, namespace, "cond-a-rollout-0")[2] == uid
    finish(cluster, namespace, "cond-a")


def test_operator_killed_between_desired_and_observed_asks_nothing_twice(
    cluster: Any, namespace: str, operator: OperatorProcess, agents: list[AgentProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    pod = running_job(cluster, namespace, "cond-b")
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    agent = start_agent(cluster, node, tmp_path / "agent")
    agents.append(agent)
    trainer = Trainer(agent, uid)
    try:
        wait_connected(agent, trainer.proc.pid, uid=uid)
        before = trainer.ready["digest"]
        freeze(agent, signal.SIGSTOP)  # the agent sees nothing until the operator is dead
        try:
            cli(cluster, "suspend", namespace, "cond-b")
            wait_for(
                "the desired state on the pod",
                lambda: pod_suspension(cluster, namespace, "cond-b-rollout-0")[0],
            )
            operator.kill()
        finally:
            freeze(agent, signal.SIGCONT)
        seen = observed(cluster, namespace, "cond-b-rollout-0", "Suspended")
        assert seen.generation == 1
        operator.start()
        condition(cluster, namespace, "cond-b", "True", "Manual")
        desired, seen2, same_uid = pod_suspension(cluster, namespace, "cond-b-rollout-0")
        assert same_uid == uid
        assert desired is not None and desired.generation == 1, "the restarted operator re-asked"
        assert seen2 == seen, "the agent did it once"

        cli(cluster, "resume", namespace, "cond-b")
        observed(cluster, namespace, "cond-b-rollout-0", "Resumed")
        assert trainer.ask("digest")["digest"] == before
    finally:
        trainer.close()
    finish(cluster, namespace, "cond-b")


def test_agent_killed_mid_suspension_suspends_once_and_loses_nothing(
    cluster: Any, namespace: str, operator: OperatorProcess, agents: list[AgentProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    pod = running_job(cluster, namespace, "cond-c")
    uid, node = pod["metadata"]["uid"], pod["spec"]["nodeName"]
    root = tmp_path / "agent"
    agent = start_agent(cluster, node, root)
    agents.append(agent)
    trainer = Trainer(agent, uid)
    try:
        wait_connected(agent, trainer.proc.pid, uid=uid)
        before = trainer.ready["digest"]
        # The trainer is frozen: the agent's suspend waits for its park reply.
        trainer.proc.send_signal(signal.SIGSTOP)
        try:
            cli(cluster, "suspend", namespace, "cond-c")
            wait_for(
                "the agent to have asked the trainer to park",
                lambda: uid in agent.control("status").body["suspending"],
                timeout_s=60,
            )
            agent.kill()  # SIGKILL mid-suspension
        finally:
            trainer.proc.send_signal(signal.SIGCONT)
        agents.remove(agent)
        again = start_agent(cluster, node, root)  # same state dir, as a restarted DaemonSet pod
        agents.append(again)
        seen = observed(cluster, namespace, "cond-c-rollout-0", "Suspended")
        desired, _, same_uid = pod_suspension(cluster, namespace, "cond-c-rollout-0")
        assert same_uid == uid and desired is not None and desired.generation == 1
        assert seen.generation == 1 and seen.parked_bytes > 0
        status = again.control("status").body
        assert list(status["suspended"]) == [uid], status

        cli(cluster, "resume", namespace, "cond-c")
        observed(cluster, namespace, "cond-c-rollout-0", "Resumed")
        assert trainer.ask("digest")["digest"] == before, "nothing lost"
    finally:
        trainer.close()
    finish(cluster, namespace, "cond-c")


def test_what_cannot_be_done_is_said(
    cluster: Any, namespace: str, operator: OperatorProcess, agents: list[AgentProcess],
    tmp_path: Path,
) -> None:  # fmt: skip
    # A job whose rollout may not be suspended.
    running_job(cluster, namespace, "cond-pinned", preemptible=False)
    cli(cluster, "suspend", namespace, "cond-pinned")
    refused = condition(cluster, namespace, "cond-pinned", "False", "NotPreemptible")
    assert "preemptibleRollout" in refused["message"]

    # A pod whose node has no agent (no heartbeat).
    running_job(cluster, namespace, "cond-alone")
    cli(cluster, "suspend", namespace, "cond-alone")
    refused = condition(cluster, namespace, "cond-alone", "False", "AgentDown")
    assert "heartbeat" in refused["message"]
    desired, _, _ = pod_suspension(cluster, namespace, "cond-alone-rollout-0")
    assert desired is None, "nothing asked of a node nobody serves"

    # An agent is there, but no process of the pod registered its memory.
    pod = get_json(cluster, "pod", "cond-alone-rollout-0", "-n", namespace)
    agents.append(start_agent(cluster, pod["spec"]["nodeName"], tmp_path / "agent"))
    seen = observed(cluster, namespace, "cond-alone-rollout-0", "Refused")
    assert "NoMemoryRegistered" in seen.error and seen.state.value == "running"
    condition(cluster, namespace, "cond-alone", "False", "SuspendRefused")
    wait_for(
        "AgentDown and SuspendRefused events on the job",
        lambda: (
            {"AgentDown", "SuspendRefused"}
            <= {e["reason"] for e in events_for(cluster, namespace, "cond-alone")}
        ),
    )
    for job in ("cond-pinned", "cond-alone"):
        finish(cluster, namespace, job)


def explain(cluster: Any, namespace: str, operator: OperatorProcess) -> str:
    """What the cluster and the operator saw, for a failure message."""
    pods = cluster.kubectl("get", "pods", "-n", namespace, "-o", "yaml", check=False).stdout
    jobs = cluster.kubectl("get", "rlj", "-n", namespace, "-o", "yaml", check=False).stdout
    ledger = cluster.kubectl(
        "get", "configmap", "rlix-admission-ledger", "-n", "default", "-o", "yaml", check=False
    ).stdout
    return f"{pods}\n{jobs}\n{ledger}\n--- operator ---\n{operator.tail(120)}"


def gpu_job(name: str, *, replicas: int, gpus: int, mib: int, priority: int = 0) -> dict[str, Any]:
    body = rljob(name, preemptible=False)
    trainer = body["spec"]["roles"][0]
    trainer.update(replicas=replicas, gpusPerReplica=gpus, gpuMemoryMiB={"training": mib})
    body["spec"]["roles"] = [trainer]
    body["spec"]["priority"] = priority
    return body


def full_cluster_but(cluster: Any, namespace: str, free: int) -> None:
    """Non-preemptible work ("fill", "fill2") on every GPU of the session's
    cluster (4 nodes of 8) but ``free`` GPUs of one node."""
    nodes, gpus = 4, 8
    apply(cluster, namespace, gpu_job("fill", replicas=nodes - 1, gpus=gpus, mib=60000))
    wait_for("fill Running", lambda: rljob_state(cluster, namespace, "fill") == "Running")
    apply(cluster, namespace, gpu_job("fill2", replicas=1, gpus=gpus - free, mib=60000))
    wait_for("fill2 Running", lambda: rljob_state(cluster, namespace, "fill2") == "Running")


def running_at_60_gib(cluster: Any, namespace: str, job: dict[str, Any]) -> None:
    """Apply ``job`` with every role at 60000 MiB in its phase; wait until it runs."""
    name = job["metadata"]["name"]
    for role in job["spec"]["roles"]:
        role["gpuMemoryMiB"] = {next(iter(role["gpuMemoryMiB"])): 60000}
    apply(cluster, namespace, job)
    wait_for(f"{name} Running", lambda: rljob_state(cluster, namespace, name) == "Running")


def served(
    cluster: Any, namespace: str, pod: str, agents: list[AgentProcess], root: Path
) -> tuple[Trainer, str]:
    """A real trainer process standing in for ``pod``'s container, connected to
    an agent started on the pod's node; the trainer and the pod's UID."""
    body = get_json(cluster, "pod", pod, "-n", namespace)
    uid, node = body["metadata"]["uid"], body["spec"]["nodeName"]
    agents.append(start_agent(cluster, node, root))
    trainer = Trainer(agents[-1], uid)
    try:
        wait_connected(agents[-1], trainer.proc.pid, uid=uid)
    except BaseException:
        trainer.close()
        raise
    return trainer, uid


def test_on_whole_gpus_a_higher_priority_arrival_parks_nobody_and_says_why(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    """Whole GPUs, a full cluster: parking would not let the waiting job in.

    Without RLix's DRA driver (or at 1x) a parked pod's GPU stays counted, so
    parking the low-priority rollout would cost it its progress and admit
    nobody (docs/conductor.md, "What parking frees"). The conductor parks
    nothing and tells the waiting job why and what would let it in; the
    whole loop where parking does let it in: ``e2e/test_headroom.py``.
    """
    full_cluster_but(cluster, namespace, free=2)
    # The last two GPUs: a low-priority job whose rollout ("gen") could be parked.
    low = rljob("low")
    low["spec"]["roles"][1]["name"] = "gen"
    running_at_60_gib(cluster, namespace, low)
    apply(cluster, namespace, gpu_job("high", replicas=1, gpus=1, mib=70000, priority=10))

    def said() -> dict[str, Any] | None:
        for e in events_for(cluster, namespace, "high"):
            if e["reason"] == "ParkingFreesNothing":
                return e
        return None

    try:
        event = wait_for("a ParkingFreesNothing event on high", said, timeout_s=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(cluster, namespace, operator)}") from None
    assert event["type"] == "Warning", event
    assert f"parking {namespace}/low would not let {namespace}/high in" in event["message"]
    assert "--memory-overcommit" in event["message"], event
    # The pass that said so decided for high: nothing was asked of low's pods.
    for pod in ("low-gen-0", "low-policy-0"):
        assert pod_suspension(cluster, namespace, pod)[0] is None, f"{pod} was asked to park"
    assert rljob_state(cluster, namespace, "high") in (None, "Queued")
    cluster.kubectl("delete", "rlj", "high", "-n", namespace, "--wait=true")
    finish(cluster, namespace, "low")
    cluster.kubectl("delete", "rlj", "fill", "fill2", "-n", namespace, "--wait=true")
