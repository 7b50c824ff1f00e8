"""Two pods share one GPU through gpu.rlix.io claims, prepared by a real kubelet
(issue 14, the kubelet half of the DRA driver).

- The node agent runs as the chart's DaemonSet with ``nodeAgent.dra.enabled``
  on the real node (simulated GPUs): it publishes the node's ResourceSlice and
  registers with the kubelet as the gpu.rlix.io DRA plugin (its registration
  socket under the kubelet's plugins_registry).
- Two ResourceClaims pin the same device (GPU 0) with consumable memory, as the
  operator writes them; the real kube-scheduler allocates both to it.
- The kubelet calls the agent's NodePrepareResources for each pod; the agent
  writes a CDI spec per claim, containerd applies it, and each container prints
  the environment it set (the GPU's uuid and index, the claim's memory).
- The agent's pod is replaced (a restart): the new one registers again and
  finds the specs the old one wrote.
- Deleting the pods makes the kubelet call NodeUnprepareResources on the new
  agent: the CDI specs are gone.

Run with ``make test-node`` (marker ``realnode``; root).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kube import apply, get_json, wait_for
from e2e.realnode_pods import advertised_gpus, agent_objects, real_pod, remove_agent, running_agent
from rlix.core import dra, names
from rlix.devcluster import realnode
from rlix.devcluster.cluster import DevCluster, ExistingCluster

pytestmark = pytest.mark.realnode

GPUS, GPU_MIB = 8, 143_771  # the simulated backend's defaults (the chart changes neither)
SHARES = {"share-a": 30_000, "share-b": 50_000}  # MiB each claim consumes of GPU 0
# What the container prints: every variable the CDI spec may set.
PRINT_ENV = (
    "import json, os, time; "
    "print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('RLIX_GPU_', 'CUDA_VISIBLE', 'NVIDIA_VISIBLE'))}), flush=True); "
    "time.sleep(3600)"
)


@pytest.fixture(scope="module")
def dev(cluster: DevCluster | ExistingCluster, real_node: realnode.RealNode) -> DevCluster:
    """The session's local cluster (``real_node`` has skipped on any other)."""
    assert isinstance(cluster, DevCluster)
    return cluster


def _kubelet_log(node: realnode.RealNode, pattern: str = r"dra|DRA|gpu\.rlix\.io|CDI|cdi") -> str:
    """The kubelet's and containerd's log lines about DRA and CDI (for failures)."""
    out = []
    for name in ("kubelet", "containerd"):
        path = node.dir / "logs" / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        matching = [ln for ln in lines if re.search(pattern, ln)]
        out.append(f"--- {name}.log ({len(matching)} lines about DRA/CDI, last 30)")
        out.extend(matching[-30:])
    return "\n".join(out)


def _agent_log(dev: DevCluster, ns: str) -> str:
    pod = running_agent(dev, ns)
    if pod is None:
        return "--- agent: no running pod"
    logs = dev.kubectl("logs", "-n", ns, pod, "--tail=40", check=False)
    return f"--- agent {pod}\n{logs.stdout}{logs.stderr}"


@pytest.fixture(scope="module")
def dra_agent(dev: DevCluster, real_node: realnode.RealNode) -> Iterator[tuple[str, str]]:
    """The agent as the gpu.rlix.io driver of the real node: (namespace, pod).

    Afterwards the node is as it was: no slice, no claims mark, no GPU annotation.
    """
    ns = f"rlix-dra-agent-{uuid.uuid4().hex[:8]}"
    dev.kubectl("create", "namespace", ns)
    objects = agent_objects(
        dev,
        real_node,
        ns,
        {
            "dra": {
                "enabled": True,
                # The dev cluster made the DeviceClass (rlix cluster up does).
                "createDeviceClass": False,
                "kubeletDir": str(real_node.kubelet_dir),
            }
        },
    )
    # The GPU labels the chart's DaemonSet selects nodes by (GPU feature discovery's).
    with advertised_gpus(dev, gpus=GPUS, memory_mib=GPU_MIB):
        yield from _agent_running(dev, real_node, ns, objects)


def _agent_running(
    dev: DevCluster,
    real_node: realnode.RealNode,
    ns: str,
    objects: list[dict[str, Any]],
) -> Iterator[tuple[str, str]]:
    try:
        dev.apply(objects)
        pod = wait_for("the node agent's pod to run", lambda: running_agent(dev, ns), timeout_s=180)
        try:
            wait_for(
                "the kubelet to register the agent as the gpu.rlix.io DRA plugin",
                lambda: _registered(dev, ns, pod),
                timeout_s=120,
                every_s=1,
            )
            wait_for(
                "the agent's slice with consumable memory",
                lambda: _node_annotations(dev).get(names.ANNOTATION_NODE_GPU_CLAIMS) == "true",
                timeout_s=60,
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n{_agent_log(dev, ns)}\n{_kubelet_log(real_node)}"
            ) from None
        yield ns, pod
    finally:
        remove_agent(dev, ns, objects)
        node = realnode.NODE_NAME
        dev.kubectl(
            "delete", "resourceslice", dra.slice_name(node), "--ignore-not-found", check=False
        )
        dev.kubectl(
            "annotate", "node", node,
            f"{names.ANNOTATION_NODE_GPU_CLAIMS}-", f"{names.ANNOTATION_NODE_GPUS}-",
            check=False,
        )  # fmt: skip


def _registered(dev: DevCluster, ns: str, pod: str) -> bool:
    """The agent logged the kubelet's NotifyRegistrationStatus(registered)."""
    logs = dev.kubectl("logs", "-n", ns, pod, check=False).stdout
    return "the kubelet registered the gpu.rlix.io DRA plugin" in logs


def _slice_uid(dev: DevCluster, name: str) -> str | None:
    found = dev.kubectl("get", "resourceslice", name, "-o", "jsonpath={.metadata.uid}", check=False)
    return found.stdout.strip() or None if found.returncode == 0 else None


def _node_annotations(dev: DevCluster) -> dict[str, str]:
    return dict(get_json(dev, "node", realnode.NODE_NAME)["metadata"].get("annotations") or {})


def _claim(name: str, gpu_uuid: str, mib: int) -> dict[str, Any]:
    """A claim as the operator writes one (rlix.core.dra.resource_claim), unowned."""
    return {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu-0",
                        "exactly": {
                            "deviceClassName": dra.DEVICE_CLASS,
                            "allocationMode": "ExactCount",
                            "count": 1,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": f'device.attributes["{dra.DRIVER}"].uuid'
                                        f' == "{gpu_uuid}"'
                                    }
                                }
                            ],
                            "capacity": {"requests": {dra.MEMORY: dra.mib_quantity(mib)}},
                        },
                    }
                ]
            }
        },
    }


def _pod(node: realnode.RealNode, name: str) -> dict[str, Any]:
    """A real pod that prints its env, holding the claim named like it."""
    pod = real_pod(node, name, ["python3", "-c", PRINT_ENV])
    pod["spec"]["resourceClaims"] = [{"name": dra.POD_CLAIM_NAME, "resourceClaimName": name}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": dra.POD_CLAIM_NAME}]}
    return pod


def _printed_env(dev: DevCluster, ns: str, pod: str) -> dict[str, str] | None:
    obj = get_json(dev, "pod", pod, "-n", ns)
    if obj["status"].get("phase") == "Failed":
        raise AssertionError(f"pod {pod} failed: {json.dumps(obj['status'])}")
    if obj["status"].get("phase") != "Running":
        return None
    lines = dev.kubectl("logs", pod, "-n", ns, check=False).stdout.splitlines()
    return dict(json.loads(lines[0])) if lines and lines[0].startswith("{") else None


def _cdi_specs(dev: DevCluster, agent: tuple[str, str]) -> dict[str, dict[str, Any]]:
    """The CDI spec files in the node's CDI directory, read in the agent's container
    (the directory is in the node's private /run, where containerd reads it)."""
    ns, pod = agent
    script = (
        "import json, pathlib; print(json.dumps({p.name: json.loads(p.read_text()) "
        "for p in pathlib.Path('/var/run/cdi').glob('rlix.io-gpu_*.json')}))"
    )
    out = dev.kubectl("exec", "-n", ns, pod, "--", "python3", "-c", script).stdout
    return dict(json.loads(out))


def test_two_pods_share_one_gpu_prepared_by_the_kubelet_through_cdi(
    dev: DevCluster, real_node: realnode.RealNode, dra_agent: tuple[str, str]
) -> None:
    published = dra.published_gpus(
        get_json(dev, "resourceslice", dra.slice_name(realnode.NODE_NAME))
    )
    assert sorted(published) == list(range(GPUS))
    gpu = published[0]

    # A kubelet deletes its node's slices when it starts: the agent writes its
    # slice again (and, until then, found it each time it looked).
    agent_ns, agent_pod = dra_agent
    gone = "slice was deleted"
    assert gone not in dev.kubectl("logs", "-n", agent_ns, agent_pod).stdout
    name = dra.slice_name(realnode.NODE_NAME)
    uid = _slice_uid(dev, name)
    dev.kubectl("delete", "resourceslice", name)
    wait_for(
        "the agent to publish its slice again",
        lambda: _slice_uid(dev, name) not in (None, uid),
        timeout_s=60,
        every_s=1,
    )
    ns = f"t-{uuid.uuid4().hex[:10]}"
    dev.kubectl("create", "namespace", ns)
    try:
        wait_for(
            f"the default ServiceAccount of {ns}",
            lambda: dev.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
        )
        for name, mib in SHARES.items():
            apply(dev, ns, _claim(name, gpu.uuid, mib), _pod(real_node, name))
        try:
            printed = {
                name: wait_for(
                    f"pod {name} to run and print its environment",
                    lambda name=name: _printed_env(dev, ns, name),
                    timeout_s=180,
                )
                for name in SHARES
            }
        except AssertionError as exc:
            events = dev.kubectl("get", "events", "-n", ns, check=False).stdout
            raise AssertionError(
                f"{exc}\n--- events\n{events}\n{_agent_log(dev, dra_agent[0])}\n"
                f"{_kubelet_log(real_node)}"
            ) from None

        # The scheduler gave both claims the same device, each its own share.
        allocations = {
            name: get_json(dev, "resourceclaim", name, "-n", ns)["status"]["allocation"]
            for name in SHARES
        }
        results = {name: a["devices"]["results"][0] for name, a in allocations.items()}
        assert {(r["pool"], r["device"]) for r in results.values()} == {
            (realnode.NODE_NAME, "gpu-0")
        }
        assert len({r["shareID"] for r in results.values()}) == 2

        # Each container sees what its claim's CDI spec set.
        for name, mib in SHARES.items():
            print(f"{name} printed {printed[name]}")
            assert printed[name] == {
                "RLIX_GPU_UUIDS": gpu.uuid,
                "RLIX_GPU_INDICES": "0",
                "RLIX_GPU_MEMORY_MIB": str(mib),
                "NVIDIA_VISIBLE_DEVICES": gpu.uuid,
                "CUDA_VISIBLE_DEVICES": gpu.uuid,
            }
        uids = {get_json(dev, "resourceclaim", n, "-n", ns)["metadata"]["uid"] for n in SHARES}
        specs = _cdi_specs(dev, dra_agent)
        assert set(specs) == {f"rlix.io-gpu_{uid}.json" for uid in uids}
        assert {spec["kind"] for spec in specs.values()} == {"rlix.io/gpu"}

        # A restarted agent (its DaemonSet replaces the pod) registers again and
        # still serves what the old one prepared: the specs outlive it on the node.
        agent_ns, old_pod = dra_agent
        dev.kubectl("delete", "pod", old_pod, "-n", agent_ns, "--wait=true", timeout_s=120)
        new_pod = wait_for(
            "the agent's replacement to register with the kubelet",
            lambda: (
                (pod := running_agent(dev, agent_ns))
                and pod != old_pod
                and _registered(dev, agent_ns, pod)
                and pod
            ),
            timeout_s=180,
            every_s=1,
        )
        agent = (agent_ns, new_pod)
        assert set(_cdi_specs(dev, agent)) == {f"rlix.io-gpu_{uid}.json" for uid in uids}

        # Gone pods are unprepared: the kubelet calls NodeUnprepareResources.
        for name in SHARES:
            dev.kubectl("delete", "pod", name, "-n", ns, "--wait=true", timeout_s=120)
        try:
            wait_for(
                "the CDI specs of both claims removed",
                lambda: not _cdi_specs(dev, agent),
                timeout_s=120,
                every_s=1,
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n{_agent_log(dev, agent_ns)}\n{_kubelet_log(real_node)}"
            ) from None
    finally:
        dev.kubectl("delete", "namespace", ns, "--wait=true", check=False, timeout_s=180)
