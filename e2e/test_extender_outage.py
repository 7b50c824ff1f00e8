"""What happens when the RLix extender is down (tier 3, real kube-scheduler).

The extender runs beside a second scheduler with ``ignorable: false``: when it
is unreachable, rlix-scheduler pods must wait (never land where the policy
never looked), pods of the default scheduler must not notice, and once the
extender is back the waiting pods must schedule without anyone touching them.
"""

from __future__ import annotations

from e2e._extender_process import running_extender
from e2e.kube import apply, events_for, pod, pod_phase_and_node, wait_for
from rlix.core import names
from rlix.devcluster.cluster import DevCluster
from rlix.devcluster.processes import port_in_use


def _running_on(cluster: DevCluster, namespace: str, name: str) -> str | None:
    phase, node = pod_phase_and_node(cluster, namespace, name)
    return node if phase == "Running" and node else None


def _unreachable_event(cluster: DevCluster, namespace: str, name: str, url: str) -> str | None:
    for ev in events_for(cluster, namespace, name):
        if ev["reason"] == "FailedScheduling" and url in ev["message"]:
            return str(ev["message"])
    return None


def test_default_scheduler_pods_do_not_notice_the_outage(
    local_cluster: DevCluster, namespace: str
) -> None:
    assert not port_in_use(local_cluster.extender_port), "the extender must be down"
    apply(local_cluster, namespace, pod("plain", gpus=1))
    node = wait_for(
        "the default scheduler's pod to run",
        lambda: _running_on(local_cluster, namespace, "plain"),
        timeout_s=90,
    )
    assert node.startswith("rlix-gpu-")
    assert not port_in_use(local_cluster.extender_port), "nothing answered for RLix meanwhile"


def test_rlix_pods_wait_for_a_down_extender_and_schedule_once_it_is_back(
    local_cluster: DevCluster, namespace: str
) -> None:
    port = local_cluster.extender_port
    url = f"127.0.0.1:{port}"
    assert not port_in_use(port), "the extender port must be free: nothing may answer for RLix"

    job = {names.LABEL_JOB: "outage", names.LABEL_ROLE: "rollout"}
    apply(
        local_cluster, namespace, pod("waits", gpus=1, scheduler=names.SCHEDULER_NAME, labels=job)
    )
    message = wait_for(
        "FailedScheduling naming the unreachable extender",
        lambda: _unreachable_event(local_cluster, namespace, "waits", url),
        timeout_s=90,
    )
    assert "connection refused" in message, message
    described = local_cluster.kubectl("describe", "pod", "waits", "-n", namespace).stdout
    assert url in described and "FailedScheduling" in described
    assert pod_phase_and_node(local_cluster, namespace, "waits") == ("Pending", "")

    # Back up: the scheduler retries after its backoff (at most 10 s) and binds.
    with running_extender(local_cluster):
        node = wait_for(
            "the waiting pod to schedule once the extender is back",
            lambda: _running_on(local_cluster, namespace, "waits"),
            timeout_s=120,
        )
        assert node.startswith("rlix-gpu-")
