"""The whole phase path with real containers on the real node (issue 13, item 7).

- The node agent runs as the chart's own DaemonSet (rendered by helm, simulated
  GPU backend) in a real container: privileged, hostPID, its socket directory
  a hostPath.
- An RLJob's two pods run the client library (e2e/probes/real_trainer.py) in
  real containers from the same image; they reach the agent through the socket
  the operator mounts, and reach each other by the headless Service names
  through the node's CoreDNS.
- The agent names each caller by its /proc/<pid>/cgroup, as the kubelet and
  containerd wrote it; the phases reach the pod annotations and the RLJob's
  status (``kubectl get rlj``).
- Each pod reports its memory on the GPU its claim holds (the chart's agent is
  the DRA driver by default; the CDI spec names the GPU): the two hold
  different GPUs, and the phase gate, on by default, lets them work at once.
- ``rlix agent suspend/resume`` run in the agent's container (kubectl exec)
  parks and restores the trainer's memory; the test reads that memory itself
  through /proc/<pid>/mem before, during and after.

Run with ``make test-node`` (marker ``realnode``; root).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import apply, get_json, wait_for
from e2e.realnode_pods import advertised_gpus, agent_daemonset
from rlix.agent.cgroups import pod_uid_from_cgroup
from rlix.core import names
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

pytestmark = pytest.mark.realnode

TRAINER = Path(__file__).parent / "probes" / "real_trainer.py"
JOB = "rt"
SIZE = 4 << 20  # real_trainer.SIZE
# The simulated backend's defaults, which the chart's DaemonSet does not change.
GPUS, GPU_MIB = 8, 143_771


@pytest.fixture(scope="module")
def dev(cluster: DevCluster | ExistingCluster, real_node: realnode.RealNode) -> DevCluster:
    """The session's local cluster (``real_node`` has skipped on any other)."""
    assert isinstance(cluster, DevCluster)
    return cluster


@pytest.fixture(scope="module")
def gpu_node(dev: DevCluster, real_node: realnode.RealNode) -> Iterator[str]:
    with advertised_gpus(dev, gpus=GPUS, memory_mib=GPU_MIB):
        yield realnode.NODE_NAME


@pytest.fixture(scope="module")
def agent(
    dev: DevCluster, real_node: realnode.RealNode, gpu_node: str
) -> Iterator[tuple[str, str]]:
    """The node agent's DaemonSet pod on the real node: (namespace, pod name)."""
    with agent_daemonset(dev, real_node, "rlix-agent") as (ns, pod):
        try:
            wait_for(
                "the node agent to publish its GPUs on the node",
                lambda: names.ANNOTATION_NODE_GPUS in _annotations(dev, "node", gpu_node),
                timeout_s=60,
            )
        except AssertionError as exc:
            logs = dev.kubectl("logs", "-n", ns, pod, "--tail=40", check=False)
            raise AssertionError(f"{exc}\n--- agent ---\n{logs.stdout}{logs.stderr}") from None
        yield ns, pod


def _annotations(cluster: DevCluster, *args: str) -> dict[str, str]:
    return dict(get_json(cluster, *args)["metadata"].get("annotations") or {})


def rlix_agent(cluster: DevCluster, agent: tuple[str, str], *args: str) -> str:
    """``rlix agent ARGS`` in the agent's container (kubectl exec), as docs/node-agent.md says."""
    ns, pod = agent
    return str(cluster.kubectl("exec", "-n", ns, pod, "--", "rlix", "agent", *args).stdout)


@pytest.fixture(scope="module")
def operator(
    dev: DevCluster, gpu_node: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(dev, tmp_path_factory.mktemp("operator"))


def _role(name: str, kind: str, image: str, peer: str) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", TRAINER.read_text()],
        "env": [{"name": "PEERS", "value": f"{JOB}-{peer}-0.{JOB}"}],
    }
    return {
        "name": name,
        "kind": kind,
        "replicas": 1,
        "gpusPerReplica": 1,
        "gpuMemoryMiB": {"rollout": 2000, "training": 4000},
        "template": {
            "spec": {
                "nodeSelector": {realnode.NODE_LABEL: "true"},
                "tolerations": [{"key": realnode.TAINT_KEY, "operator": "Exists"}],
                "terminationGracePeriodSeconds": 1,
                "containers": [container],
            }
        },
    }


@pytest.fixture(scope="module")
def job(
    dev: DevCluster,
    real_node: realnode.RealNode,
    agent: tuple[str, str],
    operator: OperatorProcess,
) -> Iterator[str]:
    """The RLJob ``rt`` (trainer ``policy``, rollout ``gen``) running on the real node."""
    ns = f"t-{uuid.uuid4().hex[:10]}"
    dev.kubectl("create", "namespace", ns)
    wait_for(
        f"the default ServiceAccount of {ns}",
        lambda: dev.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
    )
    image = real_node.node_image
    body = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": JOB},
        "spec": {
            "algorithm": "GRPO",
            "roles": [
                _role("policy", "trainer", image, peer="gen"),
                _role("gen", "rollout", image, peer="policy"),
            ],
        },
    }
    try:
        apply(dev, ns, body)
        for pod in (f"{JOB}-policy-0", f"{JOB}-gen-0"):
            wait_for(
                f"pod {pod} to run on the real node",
                lambda pod=pod: _ready_trainer(dev, ns, pod),
                timeout_s=180,
            )
        yield ns
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- operator ---\n{operator.tail()}") from None
    finally:
        dev.kubectl("delete", "namespace", ns, "--wait=true", check=False)


def _ready_trainer(cluster: DevCluster, ns: str, pod: str) -> bool:
    found = cluster.kubectl("get", "pod", pod, "-n", ns, "-o", "json", check=False)
    if found.returncode != 0:
        return False
    status = json.loads(found.stdout)["status"]
    if status.get("phase") == "Failed":
        logs = cluster.kubectl("logs", pod, "-n", ns, check=False)
        raise AssertionError(f"pod {pod} failed: {json.dumps(status)}\n{logs.stdout}{logs.stderr}")
    return status.get("phase") == "Running" and bool(_events(cluster, ns, pod, "ready"))


def _events(cluster: DevCluster, ns: str, pod: str, event: str) -> list[dict[str, Any]]:
    """The trainer's JSON lines of one kind, from its container log."""
    log = cluster.kubectl("logs", pod, "-n", ns, check=False).stdout
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


def test_the_agent_runs_as_the_charts_daemonset_in_a_real_container(
    dev: DevCluster, real_node: realnode.RealNode, agent: tuple[str, str]
) -> None:
    ns, pod = agent
    obj = get_json(dev, "pod", pod, "-n", ns)
    assert obj["spec"]["nodeName"] == realnode.NODE_NAME
    assert obj["spec"]["hostPID"] is True
    assert obj["spec"]["containers"][0]["securityContext"]["privileged"] is True
    assert obj["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert obj["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    status = json.loads(rlix_agent(dev, agent, "status", "--json"))
    assert status["node"] == realnode.NODE_NAME
    assert status["backend"] == "simulated"
    assert len(status["gpus"]) == GPUS
    published = json.loads(
        _annotations(dev, "node", realnode.NODE_NAME)[names.ANNOTATION_NODE_GPUS]
    )
    assert [g["memoryMiB"] for g in published] == [GPU_MIB] * GPUS


def test_trainer_phases_reach_the_pod_and_the_rljob_status(dev: DevCluster, job: str) -> None:
    ns = job
    trainer = f"{JOB}-policy-0"
    [ready] = _events(dev, ns, trainer, "ready")
    assert ready["connected"] is True  # through the socket the operator mounted
    wait_for(
        "the trainer's phase on its pod",
        lambda: (
            _annotations(dev, "pod", trainer, "-n", ns).get(names.ANNOTATION_PHASE)
            in ("rollout", "training")
        ),
        timeout_s=60,
    )
    # The status that counts an iteration (the trainer left training) may read
    # the idle between two blocks: wait for a phase it works in.
    status = wait_for(
        "two iterations and a busy phase in the RLJob's status",
        lambda: (
            (s := get_json(dev, "rlj", JOB, "-n", ns).get("status", {}))
            and s.get("iterations", 0) >= 2
            and s.get("phase") in ("rollout", "training")
            and s
        ),
        timeout_s=120,
    )
    assert status["state"] == "Running"
    assert set(status["phaseSeconds"]) >= {"rollout", "training"}

    def table() -> list[str] | None:
        lines = dev.kubectl("get", "rlj", JOB, "-n", ns).stdout.splitlines()
        return lines if lines[1].split()[2] in ("rollout", "training") else None

    header, row = (line.split() for line in wait_for("a busy phase in the table", table))
    assert header[:6] == ["NAME", "STATE", "PHASE", "GPUS", "ITERATIONS", "REASON"]
    assert row[0] == JOB and row[1] == "Running"
    assert int(row[4]) >= 2


def test_pods_on_gpus_of_their_own_work_side_by_side_through_the_gate(
    dev: DevCluster, agent: tuple[str, str], job: str
) -> None:
    ns = job
    pods = {role: get_json(dev, "pod", f"{JOB}-{role}-0", "-n", ns) for role in ("policy", "gen")}
    uids = {role: pod["metadata"]["uid"] for role, pod in pods.items()}
    # The operator pinned each pod's GPU in its claim (the chart's agent is the
    # DRA driver by default); the agent's CDI spec told the container which.
    gpus = {}
    for role, pod in pods.items():
        [ready] = _events(dev, ns, pod["metadata"]["name"], "ready")
        assert ready["gpus"] == pod["metadata"]["annotations"][names.ANNOTATION_GPU_INDICES]
        gpus[uids[role]] = int(ready["gpus"])
    assert gpus[uids["policy"]] != gpus[uids["gen"]], f"empty GPUs first: {gpus}"
    status = json.loads(rlix_agent(dev, agent, "status", "--json"))
    # The agent counts each pod's memory on the GPU the pod reported it on.
    on = {p["podUID"]: p["gpu"] for p in status["processes"] if p["podUID"] in gpus}
    assert on == gpus, status["processes"]
    assert status["phaseGate"] is not None, "the chart's agent runs the phase gate by default"

    # The gate orders only pods that share a GPU: these two (no cycle declared,
    # so on one GPU they would take turns) work at the same time.
    def both_working() -> dict[str, Any] | None:
        gate = json.loads(rlix_agent(dev, agent, "status", "--json"))["phaseGate"]
        return gate if set(gpus) <= set(gate["working"]) else None

    gate = wait_for("the trainer and the rollout pod working at once", both_working, timeout_s=60)
    assert not set(gate["waitingS"]) & set(gpus), gate


def _trainer_pid(dev: DevCluster, agent: tuple[str, str], ns: str, pod: str) -> int:
    """The trainer's host PID, as the agent (hostPID) sees the socket's peer."""
    uid = get_json(dev, "pod", pod, "-n", ns)["metadata"]["uid"]
    status = json.loads(rlix_agent(dev, agent, "status", "--json"))
    assert status["pods"][uid] == f"{ns}/{pod}"
    [pid] = status["connected"][uid]
    return int(pid)


def test_the_agent_names_the_caller_by_the_cgroup_kubelet_and_containerd_made(
    dev: DevCluster, real_node: realnode.RealNode, agent: tuple[str, str], job: str
) -> None:
    ns, pod = job, f"{JOB}-policy-0"
    uid = get_json(dev, "pod", pod, "-n", ns)["metadata"]["uid"]
    pid = _trainer_pid(dev, agent, ns, pod)
    text = Path(f"/proc/{pid}/cgroup").read_text()
    print(f"/proc/<trainer>/cgroup on the real node:\n{text}")
    assert pod_uid_from_cgroup(text) == uid
    # cgroupfs driver under the node's cgroupRoot: <root>/kubepods/<qos>/pod<uid>/<64-hex id>
    shape = re.compile(
        rf"^\d+:[^:]*:/{real_node.names.cgroup}/kubepods/besteffort/pod{uid}/[0-9a-f]{{64}}$"
    )
    lines = [ln for ln in text.splitlines() if ln]
    assert lines and all(shape.match(ln) for ln in lines), text


def _memory(pid: int, address: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(SIZE)


def test_suspend_and_resume_across_the_container_boundary_bring_the_bytes_back(
    dev: DevCluster, agent: tuple[str, str], job: str
) -> None:
    ns, pod = job, f"{JOB}-policy-0"
    pid = _trainer_pid(dev, agent, ns, pod)
    [ready] = _events(dev, ns, pod, "ready")
    # The trainer filled its memory from its name; the test knows what it must hold.
    expected = random.Random(pod).randbytes(SIZE)
    before = _memory(pid, ready["address"])
    assert hashlib.sha256(before).digest() == hashlib.sha256(expected).digest()

    out = rlix_agent(dev, agent, "suspend", f"{ns}/{pod}")
    assert out.startswith(f"suspended {ns}/{pod}: pid {pid} -> "), out
    assert _annotations(dev, "pod", pod, "-n", ns).get(names.ANNOTATION_SUSPENDED) == ("true")
    assert _memory(pid, ready["address"]) == bytes(SIZE)  # the bytes really left
    assert _events(dev, ns, pod, "offloaded")

    out = rlix_agent(dev, agent, "resume", f"{ns}/{pod}")
    assert out.startswith(f"resumed {ns}/{pod}: pid {pid}"), out
    after = _memory(pid, ready["address"])
    assert hashlib.sha256(after).hexdigest() == hashlib.sha256(before).hexdigest()
    wait_for(
        "the suspended annotation to clear",
        lambda: _annotations(dev, "pod", pod, "-n", ns).get(names.ANNOTATION_SUSPENDED) != "true",
        timeout_s=30,
    )
    steps = len(_events(dev, ns, pod, "step"))
    wait_for(
        "the trainer to take a step after the resume",
        lambda: len(_events(dev, ns, pod, "step")) > steps,
        timeout_s=60,
    )


def test_pods_of_one_job_reach_each_other_by_the_headless_service_names(
    dev: DevCluster, job: str
) -> None:
    ns = job
    for pod, peer in ((f"{JOB}-policy-0", "gen"), (f"{JOB}-gen-0", "policy")):
        reached = wait_for(
            f"{pod} to reach {JOB}-{peer}-0.{JOB}",
            lambda pod=pod: _events(dev, ns, pod, "peer"),
            timeout_s=120,
        )
        assert reached[0]["peer"] == f"{JOB}-{peer}-0.{JOB}"
        assert reached[0]["answered"] == f"{JOB}-{peer}-0"
