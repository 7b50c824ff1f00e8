"""HA: two operator replicas on one Lease; SIGKILL the leader while jobs are being admitted.

Eight one-node jobs (8 GPUs at 60000 of 81920 MiB each, so no two share a GPU)
on the 4-node cluster: four run, four wait. The leader is killed once the
first admissions are in, and the standby must take the Lease and finish the
work: every job admitted and run exactly once, never more jobs promised than
the cluster holds. Watched the whole time, not sampled at the end: every pod
the API server ever created (a watch on the namespace), and the admission
ledger and where pods run at every step.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e._extender_process import ExtenderProcess
from e2e._operator_process import CRD, OperatorProcess
from e2e.kube import apply, get_json, rljob_manifest, rljob_state, trainer_role, wait_for
from rlix.core import names
from rlix.devcluster.cluster import wait_established
from rlix.operator import ledger

NODES, GPUS = 4, 8
JOBS = 8
LEASE = "rlix-operator-ha"
SCHEDULER = "rlix-scheduler"


def one_node_job(name: str) -> dict[str, Any]:
    return rljob_manifest(name, trainer_role(gpus=GPUS, mib=60000))


class PodWatch:
    """Every pod ADDED in the namespace, from a ``kubectl get -w`` stream."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.added: list[tuple[str, str, str]] = []  # (name, uid, schedulerName)
        self._cluster = cluster
        self._namespace = namespace
        self._proc: Any = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        import subprocess

        cmd = [
            "kubectl", "--kubeconfig", str(self._cluster.kubeconfig), "get", "pods",
            "-n", self._namespace, "-l", names.LABEL_JOB, "--watch", "--output-watch-events",
            "-o", "json",
        ]  # fmt: skip
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        decoder = json.JSONDecoder()
        buffer = ""
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            buffer += line
            try:
                event, end = decoder.raw_decode(buffer.lstrip())
            except ValueError:
                continue
            buffer = buffer.lstrip()[end:]
            if event.get("type") == "ADDED":
                meta, spec = event["object"]["metadata"], event["object"]["spec"]
                self.added.append((meta["name"], meta["uid"], spec["schedulerName"]))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            if self._reader is not None:
                self._reader.join(timeout=10)
            self._proc.stdout.close()


def lease_holder(cluster: Any, namespace: str) -> str | None:
    found = cluster.kubectl(
        "get", "lease", LEASE, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}",
        check=False,
    )  # fmt: skip
    return str(found.stdout).strip() or None if found.returncode == 0 else None


def series(operator: OperatorProcess, name: str) -> float | None:
    """An unlabelled series from the operator's /metrics."""
    for line in operator.metrics().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def leader_gauge(operator: OperatorProcess) -> float | None:
    return series(operator, "rlix_operator_leader")


def overpromised(cluster: Any, namespace: str) -> list[str]:
    """More jobs promised than the cluster holds, or a node running two jobs' pods.

    Each job takes a whole node, so at most NODES unfinished jobs may hold an
    admission (a ledger entry) at once, and no node may run pods of two jobs.
    The ledger's planned node is not compared with the bound one: the
    scheduler may bind a pod elsewhere than admission planned (the extender's
    filter keeps it off a full node), which moves a promise, never adds one.
    The ledger is read first: a job that has finished by the later reads may
    have been live then, which can only hide a problem, never invent one.
    """
    found = get_json(cluster, "configmap", "-n", namespace)
    pods = get_json(cluster, "pods", "-n", namespace, "-l", names.LABEL_JOB)["items"]
    exited = {"Succeeded", "Failed"}
    done = {
        p["metadata"]["labels"][names.LABEL_JOB] for p in pods if p["status"].get("phase") in exited
    }
    jobs = get_json(cluster, "rlj", "-n", namespace)["items"]
    done |= {j["metadata"]["name"] for j in jobs if j.get("status", {}).get("state") in exited}
    problems = []
    for cm in found.get("items", []):
        if cm["metadata"]["name"] == ledger.NAME:
            entries = ledger.decode(cm["data"][ledger.DATA_KEY])
            promised = sorted(k for k in entries if k.split("/", 1)[1] not in done)
            if len(promised) > NODES:
                problems.append(
                    f"ledger promises {len(promised)} whole-node jobs: {promised}; states "
                    f"{ {j['metadata']['name']: j.get('status', {}).get('state') for j in jobs} }; "
                    f"pods { {p['metadata']['name']: p['status'].get('phase') for p in pods} }"
                )
    running: dict[str, set[str]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and pod["status"].get("phase") not in exited:
            running.setdefault(node, set()).add(pod["metadata"]["labels"][names.LABEL_JOB])
    problems += [f"{node} runs pods of {sorted(j)}" for node, j in running.items() if len(j) > 1]
    return problems


@pytest.fixture
def two_operators(cluster: Any, namespace: str, tmp_path: Path) -> Iterator[list[OperatorProcess]]:
    port = int(getattr(cluster, "extender_port", 0))
    if not port:
        pytest.skip("needs the session's local control plane (extender port on 127.0.0.1)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    wait_established(cluster.kubectl, "rljobs.rlix.io")
    extender = ExtenderProcess(port, cluster.kubeconfig, log=tmp_path / "extender.log")
    extender.start()
    args = (
        "--no-webhook", "--namespace", namespace, "--ledger-namespace", namespace,
        "--leader-elect", "--leader-election-lease-name", LEASE,
        "--leader-election-lease-duration", "6", "--leader-election-renew-deadline", "4",
        "--leader-election-retry-period", "1", "--scheduler-name", SCHEDULER,
    )  # fmt: skip
    operators = []
    try:
        for i in range(2):
            workdir = tmp_path / f"operator-{i}"
            workdir.mkdir()
            operator = OperatorProcess(cluster, workdir, extra_args=args)
            operator.start()
            operators.append(operator)
        yield operators
    finally:
        for operator in operators:
            operator.stop()
        extender.stop()


def test_standby_takes_over_from_a_killed_leader_without_duplicates_or_overadmission(
    cluster: Any, namespace: str, two_operators: list[OperatorProcess]
) -> None:
    first = wait_for("a leader", lambda: lease_holder(cluster, namespace))
    leader = wait_for(
        "the leader's gauge", lambda: next((o for o in two_operators if leader_gauge(o)), None)
    )
    (standby,) = [o for o in two_operators if o is not leader]
    assert leader_gauge(standby) == 0  # one active instance, the other waits

    watch = PodWatch(cluster, namespace)
    watch.start()
    try:
        apply(cluster, namespace, *(one_node_job(f"j{i}") for i in range(JOBS)))
        wait_for("first admissions", lambda: watch.added, every_s=0.05)
        leader.kill()
        problems: list[str] = []

        def finish_running() -> bool:
            """Play the trainers: a Running job's pod exits 0. True once all succeeded."""
            problems.extend(overpromised(cluster, namespace))
            done = 0
            for i in range(JOBS):
                state = rljob_state(cluster, namespace, f"j{i}")
                if state == "Running":
                    cluster.kubectl(
                        "patch", "pod", f"j{i}-policy-0", "-n", namespace,
                        "--subresource=status", "--type=merge",
                        "-p", '{"status":{"phase":"Succeeded"}}', check=False,
                    )  # fmt: skip
                done += state == "Succeeded"
            return done == JOBS

        wait_for("every job Succeeded", finish_running, timeout_s=240, every_s=0.5)
    finally:
        watch.stop()

    assert not problems, problems[:10]
    second = lease_holder(cluster, namespace)
    assert second and second != first, (first, second)
    assert leader_gauge(standby) == 1
    # The new leader's queue series moved: it admitted the jobs left waiting.
    waited = series(standby, "rlix_operator_queue_wait_seconds_count")
    assert waited is not None and waited >= JOBS - NODES, waited
    assert series(standby, "rlix_operator_queue_length") == 0
    wait_for(
        "no admitted job left",
        lambda: series(standby, "rlix_operator_admitted_jobs") == 0,
        timeout_s=30,
    )
    # Every job's one pod was created exactly once, whoever created it.
    created = Counter(name for name, _, _ in watch.added)
    assert created == Counter(f"j{i}-policy-0" for i in range(JOBS)), created
    assert len({uid for _, uid, _ in watch.added}) == JOBS
    # --scheduler-name reached every pod either replica created.
    assert {scheduler for _, _, scheduler in watch.added} == {SCHEDULER}
    # A leader stopped cleanly (SIGTERM, a rolling update) hands the Lease back
    # at once instead of making the next replica wait out the lease.
    standby.stop()
    assert lease_holder(cluster, namespace) is None
