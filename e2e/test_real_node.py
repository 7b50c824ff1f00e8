"""The real node: a kubelet with containerd and runc beside the kwok GPU nodes.

Every pod here runs a real container from the node image built on this machine
(Debian minbase, python3, the project's wheel), with imagePullPolicy: Never.
Run with ``make test-node`` (marker ``realnode``); needs root and the packages
of hack/node-deps.sh. If the node cannot start, these tests fail with the reason.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import apply, get_json, wait_for
from e2e.probe_session import start_probe_session
from e2e.realnode_pods import real_pod
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster, default_workdir, reap_stale_clusters
from rlix.devcluster.toolchain import bin_dir

PROBE = Path(__file__).parent / "probes" / "probe_real_node.py"

pytestmark = pytest.mark.realnode


def _status(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = get_json(cluster, "pod", name, "-n", namespace)["status"]
    return status


def _finished(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any] | None:
    status = _status(cluster, namespace, name)
    return status if status.get("phase") in ("Succeeded", "Failed") else None


def test_the_node_is_a_real_kubelet_and_ready(
    local_cluster: DevCluster, real_node: realnode.RealNode
) -> None:
    node = get_json(local_cluster, "node", realnode.NODE_NAME)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://")
    # Built from the same Kubernetes sources and version as the API server.
    server = json.loads(local_cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert info["kubeletVersion"] == server["gitVersion"]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    # The address lives on the veth the node created, never on the machine's own interfaces.
    assert addresses["InternalIP"] == real_node.state().node_ip
    assert addresses["InternalIP"].startswith("100.66.")
    # kwok must not have taken it over: kwok would stamp its own runtime and annotation.
    assert "kwok" not in info["containerRuntimeVersion"]
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})


def test_a_plain_pod_runs_a_real_container_to_succeeded_and_its_log_is_readable(
    local_cluster: DevCluster, real_node: realnode.RealNode, namespace: str
) -> None:
    script = (
        "import rlix, sys, pathlib; "
        "print('rlix', rlix.__name__, 'python', sys.version.split()[0]); "
        "print('cgroup', pathlib.Path('/proc/self/cgroup').read_text().splitlines()[0])"
    )
    apply(local_cluster, namespace, real_pod(real_node, "hello", ["python3", "-c", script]))
    status = wait_for(
        "pod hello to finish", lambda: _finished(local_cluster, namespace, "hello"), timeout_s=120
    )
    assert status["phase"] == "Succeeded", json.dumps(status, indent=1)
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["containerID"].startswith("containerd://")
    log = local_cluster.kubectl("logs", "hello", "-n", namespace).stdout
    assert "rlix rlix python 3." in log
    # The container's cgroup is under the node's own cgroup root, as the kubelet made it.
    assert f"/{real_node.names.cgroup}/kubepods" in log


def test_a_failing_container_reports_its_exit_code(
    local_cluster: DevCluster, real_node: realnode.RealNode, namespace: str
) -> None:
    apply(
        local_cluster,
        namespace,
        real_pod(real_node, "fails", ["python3", "-c", "import sys; sys.exit(7)"]),
    )
    status = wait_for(
        "pod fails to finish", lambda: _finished(local_cluster, namespace, "fails"), timeout_s=120
    )
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 7


def test_two_pods_on_the_node_reach_each_other_by_pod_ip(
    local_cluster: DevCluster, real_node: realnode.RealNode, namespace: str
) -> None:
    server = (
        "import http.server, socketserver\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'pong')\n"
        "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n"
    )
    apply(local_cluster, namespace, real_pod(real_node, "server", ["python3", "-c", server]))
    server_ip = wait_for(
        "the server pod's IP",
        lambda: _status(local_cluster, namespace, "server").get("podIP"),
        timeout_s=120,
    )
    client = (
        "import time, urllib.request\n"
        f"url = 'http://{server_ip}:8080/'\n"
        "for _ in range(60):\n"
        "    try:\n"
        "        print(urllib.request.urlopen(url, timeout=2).read().decode()); break\n"
        "    except OSError as e:\n"
        "        print('retry', e); time.sleep(0.5)\n"
        "else:\n"
        "    raise SystemExit(1)\n"
    )
    apply(local_cluster, namespace, real_pod(real_node, "client", ["python3", "-c", client]))
    status = wait_for(
        "pod client to finish", lambda: _finished(local_cluster, namespace, "client"), timeout_s=120
    )
    log = local_cluster.kubectl("logs", "client", "-n", namespace).stdout
    assert status["phase"] == "Succeeded", log
    assert log.strip().endswith("pong")
    client_ip = _status(local_cluster, namespace, "client")["podIP"]
    assert client_ip != server_ip
    assert server_ip.startswith("10.244.")


def test_teardown_leaves_nothing_even_when_the_node_was_abandoned(
    local_cluster: DevCluster, real_node: realnode.RealNode, namespace: str
) -> None:
    """A session killed with SIGKILL leaves the node running and its state behind;
    the next session's reaper knows only the cluster's name. Kill our handles to
    the node, forget its state, and tear down by name alone: nothing may remain.
    Then bring the node back (warm) so that the session ends as it began."""
    apply(local_cluster, namespace, real_pod(real_node, "sleeper", ["sleep", "3600"]))
    wait_for(
        "the sleeper to run",
        lambda: _status(local_cluster, namespace, "sleeper").get("phase") == "Running",
        timeout_s=120,
    )
    assert real_node.ctr("containers", "ls", "-q").stdout.strip()  # a real container runs
    cluster_dir = local_cluster.dir
    name = local_cluster.options.name
    before = realnode.leftovers(name, cluster_dir)
    assert any("process" in item for item in before)
    assert any(item.startswith("interface") for item in before)
    assert any(item.startswith("mount") for item in before)  # the pinned netns

    (real_node.dir / "state.json").unlink()
    state_free = realnode.RealNode(
        cluster_name=name,
        cluster_dir=cluster_dir,
        kubeconfig=local_cluster.kubeconfig,
        api_port=local_cluster.api_port(),
        bin_dir=local_cluster.bin_dir,
    )
    state_free.down()
    assert realnode.leftovers(name, cluster_dir) == []
    assert _no_runc_state_left()

    real_node.up()
    assert get_json(local_cluster, "node", realnode.NODE_NAME)["status"]["nodeInfo"]


def _no_runc_state_left() -> bool:
    """runc keeps container state under /run/runc of the node's private mount
    namespace; the machine's own /run must hold none of it."""
    return not any(
        p.name.startswith("k8s.io") for p in Path("/run").glob("containerd*/**/*") if p.is_dir()
    )


def test_a_sigkilled_session_leaves_its_real_node_to_the_next_reaper(tmp_path: Path) -> None:
    """No teardown runs in a session killed with SIGKILL; its containerd, kubelet,
    shims and containers live on (their own sessions and cgroup). The next
    session's reaper must remove all of it, knowing only the cluster's name."""
    child, info = start_probe_session(
        PROBE, tmp_path, what="the probe session's real node to run a container", timeout_s=400
    )
    name, cluster_dir = info["name"], Path(info["dir"])
    os.killpg(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    alive = realnode.leftovers(name, cluster_dir)
    assert any(item.startswith("process") for item in alive), alive
    assert any(item.startswith("interface") for item in alive), alive

    assert reap_stale_clusters(default_workdir(), bin_dir(), prefix=name) == 1
    assert realnode.leftovers(name, cluster_dir) == []
    assert not list(default_workdir().glob(f"{name}.*")), "kwokctl files of the cluster left"
