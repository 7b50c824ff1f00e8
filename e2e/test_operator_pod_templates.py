"""Pod templates, peers, priority and status on the real control plane (issue 13, pod side).

The API server, its Priority admission plugin and its pod validation are the
real ones: a PriorityClass fills ``spec.priority``, an invalid template is
refused when the pod is created, a contradicting one when the RLJob is
applied. kwok runs no containers, so a finished trainer is a pod whose status
is patched to Succeeded, as the kubelet would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e._operator_process import OperatorProcess, operator_with_extender
from e2e.kube import (
    apply,
    events_for,
    get_json,
    wait_for,
)
from e2e.kube import (
    rljob_condition as condition,
)
from e2e.kube import (
    rljob_state as state,
)
from rlix.core import names

# The e2e cluster: 4 nodes x 8 GPUs.
NODES, GPUS = 4, 8


@pytest.fixture(scope="module")
def operator(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    yield from operator_with_extender(cluster, tmp_path_factory.mktemp("operator"))


def rljob(name: str, *roles: dict[str, Any], priority: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "rlix.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"algorithm": "GRPO", "priority": priority, "roles": list(roles)},
    }


def trainer(
    spec: dict[str, Any], *, replicas: int = 1, gpus: int = 1, mib: int = 10000
) -> dict[str, Any]:
    """A trainer role from a pod template spec."""
    return {
        "name": "policy",
        "kind": "trainer",
        "replicas": replicas,
        "gpusPerReplica": gpus,
        "gpuMemoryMiB": {"training": mib},
        "template": {"metadata": {"labels": {"team": "math"}}, "spec": spec},
    }


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "trainer", "image": "example.com/trainer:1", **extra}


def test_template_pods_carry_the_users_fields_rlixs_fields_and_a_real_priority(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    user_toleration = {
        "key": "dedicated",
        "operator": "Equal",
        "value": "rl",
        "effect": "NoSchedule",
    }
    spec = {
        "containers": [
            container(
                resources={"requests": {"cpu": "2", "memory": "1Gi"}},
                volumeMounts=[{"name": "shm", "mountPath": "/dev/shm"}],
                env=[{"name": "WANDB_PROJECT", "value": "grpo"}],
            )
        ],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
        "tolerations": [user_toleration],
    }
    apply(cluster, namespace, rljob("tmpl", trainer(spec, replicas=2), priority=4242))
    wait_for("Running", lambda: state(cluster, namespace, "tmpl") == "Running", timeout_s=90)
    uid = get_json(cluster, "rlj", "tmpl", "-n", namespace)["metadata"]["uid"]
    priority_class = get_json(cluster, "priorityclass", "rlix-priority-4242")
    assert priority_class["value"] == 4242

    for index in range(2):
        name = f"tmpl-policy-{index}"
        pod = get_json(cluster, "pod", name, "-n", namespace)
        meta, spec_ = pod["metadata"], pod["spec"]
        assert meta["labels"]["team"] == "math"
        assert meta["labels"][names.LABEL_JOB] == "tmpl"
        assert meta["labels"][names.LABEL_ROLE] == "policy"
        assert spec_["schedulerName"] == names.SCHEDULER_NAME
        # The API server filled spec.priority from the class RLix named.
        assert spec_["priorityClassName"] == "rlix-priority-4242"
        assert spec_["priority"] == priority_class["value"]
        assert (spec_["hostname"], spec_["subdomain"]) == (name, "tmpl")
        (main,) = spec_["containers"]
        assert main["resources"]["requests"] == {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
        assert main["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        volumes = {v["name"]: v for v in spec_["volumes"]}
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
        socket_dir = volumes[names.AGENT_SOCKET_VOLUME]["hostPath"]["path"]
        assert socket_dir == names.AGENT_SOCKET_DIR
        mounts = {m["name"]: m for m in main["volumeMounts"]}
        assert mounts["shm"]["mountPath"] == "/dev/shm"
        assert mounts[names.AGENT_SOCKET_VOLUME]["readOnly"] is True
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["RLIX_AGENT_SOCKET"] == f"{socket_dir}/{names.AGENT_SOCKET_FILE}"
        assert env["WANDB_PROJECT"] == "grpo"
        assert env["MASTER_ADDR"] == "tmpl-policy-0.tmpl"
        assert (env["RANK"], env["WORLD_SIZE"]) == (str(index), "2")
        assert user_toleration in spec_["tolerations"]
        assert names.GPU_TOLERATION in spec_["tolerations"]
        assert spec_["nodeName"].startswith("rlix-gpu-")

    service = get_json(cluster, "service", "tmpl", "-n", namespace)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {names.LABEL_JOB: "tmpl"}
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (names.KIND, uid, True)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        # Refused by the CRD's CEL rules.
        (
            {"schedulerName": "default-scheduler", "containers": [container()]},
            "spec.roles[0].template.spec.schedulerName",
        ),
        # Refused by the webhook (env is not typed in the schema).
        (
            {"containers": [container(env=[{"name": "MASTER_ADDR", "value": "elsewhere"}])]},
            "spec.roles[0].template.spec.containers[0].env[0].name",
        ),
    ],
    ids=["scheduler-name", "owned-env"],
)
def test_contradicting_template_is_refused_naming_the_field(
    cluster: Any, namespace: str, operator: OperatorProcess, spec: dict[str, Any], field: str
) -> None:
    body = rljob("contradicts", trainer(spec))
    result = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False
    )
    assert result.returncode != 0, result.stdout
    assert field in result.stderr, result.stderr
    assert get_json(cluster, "rlj", "-n", namespace)["items"] == []


def test_kubectl_wait_for_succeeded_returns_for_a_finished_job(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, rljob("done", trainer({"containers": [container()]})))
    wait_for("Running", lambda: state(cluster, namespace, "done") == "Running", timeout_s=90)
    cluster.kubectl(
        "patch", "pod", "done-policy-0", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", '{"status":{"phase":"Succeeded"}}',
    )  # fmt: skip
    result = cluster.kubectl(
        "wait", "--for=condition=Succeeded", "rlj/done", "-n", namespace, "--timeout=60s",
        timeout_s=90,
    )  # fmt: skip
    assert "condition met" in result.stdout, result.stdout
    assert state(cluster, namespace, "done") == "Succeeded"
    table = cluster.kubectl("get", "rlj", "done", "-n", namespace).stdout
    assert "REASON" in table and "TrainerSucceeded" in table, table


# A mount of a volume the template does not define: only Pod validation sees it.
BROKEN = {"containers": [container(volumeMounts=[{"name": "nowhere", "mountPath": "/x"}])]}


def test_template_the_api_server_refuses_is_refused_at_apply(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    """The webhook's dry run of the role's pod brings Pod validation to `kubectl apply`."""
    body = rljob("refused", trainer(BROKEN))
    result = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False
    )
    assert result.returncode != 0, result.stdout
    assert "spec.roles[0].template" in result.stderr, result.stderr
    assert "volumeMounts" in result.stderr and "nowhere" in result.stderr, result.stderr
    assert get_json(cluster, "rlj", "-n", namespace)["items"] == []
    assert get_json(cluster, "pods", "-n", namespace)["items"] == []  # a dry run stores nothing


def test_invalid_template_fails_the_job_and_releases_its_admission(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    """Past a skipped webhook, the API server refuses the pods: the job fails, GPUs are freed."""
    whole = {"replicas": NODES, "gpus": GPUS, "mib": 60000}
    # A stopped operator: the webhook times out and is skipped (failurePolicy Ignore).
    operator.pause()
    try:
        apply(cluster, namespace, rljob("broken", trainer(BROKEN, **whole)))
    finally:
        operator.resume()
    failed = wait_for(
        "PodRejected",
        lambda: (c := condition(cluster, namespace, "broken", "Failed")) and c,
        timeout_s=90,
    )
    assert failed["reason"] == "PodRejected" and failed["status"] == "True", failed
    assert "volumeMounts" in failed["message"], failed
    assert state(cluster, namespace, "broken") == "Failed"
    warnings = [e for e in events_for(cluster, namespace, "broken") if e["type"] == "Warning"]
    assert any(e["reason"] == "PodRejected" for e in warnings), warnings
    # Had the failed job kept its reservation, this one (the whole cluster
    # again) would wait for GPUs forever.
    fine = {"containers": [container()]}
    apply(cluster, namespace, rljob("after", trainer(fine, **whole)))
    wait_for("after Running", lambda: state(cluster, namespace, "after") == "Running", timeout_s=90)


def test_a_service_of_the_jobs_name_that_is_not_its_own_fails_the_job(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "taken"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "web"}},
    }
    apply(cluster, namespace, foreign)
    apply(cluster, namespace, rljob("taken", trainer({"containers": [container()]})))
    failed = wait_for(
        "ServiceConflict",
        lambda: (c := condition(cluster, namespace, "taken", "Failed")) and c,
        timeout_s=90,
    )
    assert failed["reason"] == "ServiceConflict" and "service taken" in failed["message"]
    assert get_json(cluster, "service", "taken", "-n", namespace)["spec"]["ports"][0]["port"] == 80
    selector = f"{names.LABEL_JOB}=taken"
    assert get_json(cluster, "pods", "-n", namespace, "-l", selector)["items"] == []


def test_service_orphaned_by_an_earlier_job_of_the_name_is_replaced(
    cluster: Any, namespace: str, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, rljob("again", trainer({"containers": [container()]})))
    wait_for("Running", lambda: state(cluster, namespace, "again") == "Running", timeout_s=90)
    cluster.kubectl("delete", "rlj", "again", "-n", namespace, "--cascade=orphan")
    wait_for(
        "the Service orphaned",
        lambda: (
            not get_json(cluster, "service", "again", "-n", namespace)["metadata"].get(
                "ownerReferences"
            )
        ),
    )
    apply(cluster, namespace, rljob("again", trainer({"containers": [container()]})))
    uid = get_json(cluster, "rlj", "again", "-n", namespace)["metadata"]["uid"]

    def owned() -> bool:
        found = cluster.kubectl(
            "get", "service", "again", "-n", namespace, "-o", "json", check=False
        )
        if found.returncode != 0:
            return False
        refs = yaml.safe_load(found.stdout)["metadata"].get("ownerReferences") or []
        return any(r["uid"] == uid and r.get("controller") for r in refs)

    wait_for("the Service recreated for the new job", owned, timeout_s=60)
    wait_for("Running", lambda: state(cluster, namespace, "again") == "Running", timeout_s=90)
    reasons = {
        e["reason"]
        for e in events_for(cluster, namespace, "again")
        if e["involvedObject"].get("uid") == uid
    }
    assert "StaleServiceReplaced" in reasons, reasons
