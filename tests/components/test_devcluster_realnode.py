"""The real node's configuration, as files the tools read (no processes started).

The node itself is proven by e2e/test_real_node.py (``make test-node``); these
check what decides whether it can coexist with the machine and the kwok nodes.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
import zipfile
from pathlib import Path

import pytest

from rlix.devcluster import netns_forward, realnode
from rlix.devcluster.cluster import ClusterOptions, DevCluster
from rlix.devcluster.node_payload import (
    LEFT_OUT_PATHS,
    console_scripts,
    requirement_names,
    runtime_requirements,
)


def test_kernel_object_names_fit_and_differ_per_cluster() -> None:
    a, b = realnode.Names.of("rlix-e2e-1234"), realnode.Names.of("rlix-e2e-1235")
    assert len(a.host_veth) <= 15  # IFNAMSIZ - 1
    assert a.host_veth != b.host_veth and a.cgroup != b.cgroup
    assert realnode.Names.of("rlix-e2e-1234") == a  # teardown finds them by name alone


def test_containerd_config_is_self_contained() -> None:
    d = Path("/state/node")
    config = tomllib.loads(realnode._containerd_config(d, "rlix.local/pause:abc"))
    plugins = config["plugins"]
    assert config["version"] == 4
    assert plugins["io.containerd.server.v1.grpc"]["address"] == str(d / "containerd.sock")
    assert config["root"].startswith(str(d))
    # Never the machine's /etc/containerd/conf.d (an empty list would mean exactly that).
    assert config["imports"] == [str(d / "containerd" / "conf.d" / "*.toml")]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    # The gpu.rlix.io kubelet plugin's CDI specs (the chart's nodeAgent.dra.cdiDir).
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    images = plugins["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "rlix.local/pause:abc"


def test_kubelet_config_uses_cgroupfs_under_its_own_root_and_authenticates_callers() -> None:
    config = realnode._kubelet_config(
        node_ip="100.66.1.2",
        socket=Path("/s/containerd.sock"),
        cgroup="rlix-node-abc",
        client_ca=Path("/pki/ca.crt"),
    )
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/rlix-node-abc"
    assert config["failCgroupV1"] is False
    assert config["address"] == "100.66.1.2"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"
    assert config["authorization"]["mode"] == "Webhook"
    # Pods resolve through the node's own CoreDNS on the node IP.
    assert config["clusterDNS"] == ["100.66.1.2"]
    assert config["clusterDomain"] == "cluster.local"


def test_corefile_serves_the_cluster_domain_on_the_node_ip_from_the_api_server() -> None:
    text = realnode._corefile(node_ip="100.66.1.2", kubeconfig=Path("/k/kubeconfig.yaml"))
    lines = [line.strip() for line in text.splitlines()]
    assert lines[0] == "cluster.local:53 {"
    assert "bind 100.66.1.2" in lines  # never the machine's interfaces
    assert "kubernetes cluster.local {" in lines
    assert "kubeconfig /k/kubeconfig.yaml" in lines
    assert not any(line.startswith(("forward", "cache")) for line in lines)
    assert text.count("{") == text.count("}")


def test_forwarder_takes_more_addresses_and_refuses_a_bad_one() -> None:
    assert netns_forward._host_port("10.96.0.1:443") == ("10.96.0.1", 443)
    with pytest.raises(Exception, match="expected HOST:PORT"):
        netns_forward._host_port("10.96.0.1")


def test_cni_config_is_a_bridge_with_host_local_addresses() -> None:
    config = json.loads(json.dumps(realnode._cni_config()))
    bridge = config["plugins"][0]
    assert bridge["type"] == "bridge"
    assert bridge["ipam"]["ranges"] == [[{"subnet": realnode.POD_SUBNET}]]


def test_node_subnet_avoids_every_address_and_route_of_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tag = realnode.tag_of("c")
    first = realnode._free_subnet(tag)

    class Result:
        stdout = f"2: eth0 inet {first.network_address + 1}/29 scope global eth0"

    monkeypatch.setattr(realnode.subprocess, "run", lambda *a, **k: Result())
    second = realnode._free_subnet(tag)
    taken = ipaddress.ip_network(f"{first.network_address}/29", strict=False)
    assert not second.overlaps(taken)
    assert second.subnet_of(ipaddress.IPv4Network("100.66.0.0/16"))


def test_kwok_manages_only_annotated_fake_nodes_and_the_api_server_reaches_kubelets(
    tmp_path: Path,
) -> None:
    cluster = DevCluster(ClusterOptions(name="c", workdir=tmp_path), tmp_path / "bin")
    patches = {p["name"]: p["extraArgs"] for p in cluster._kwokctl_config()["componentsPatches"]}
    kwok = {a["key"]: a for a in patches["kwok-controller"]}
    assert kwok["manage-all-nodes"] == {
        "key": "manage-all-nodes",
        "value": "false",
        "override": True,
    }
    assert kwok["manage-nodes-with-annotation-selector"]["value"] == "kwok.x-k8s.io/node=fake"
    api = {a["key"]: a["value"] for a in patches["kube-apiserver"]}
    assert api["kubelet-preferred-address-types"] == "InternalIP"
    assert api["kubelet-client-certificate"].endswith("pki/admin.crt")


def test_more_than_one_real_node_is_refused() -> None:
    with pytest.raises(ValueError, match="real_nodes must be 0 or 1, got 2"):
        ClusterOptions(real_nodes=2)


def test_payload_takes_the_base_install_and_the_agent_and_cli_extras_for_this_python() -> None:
    lines = [
        "Requires-Dist: pydantic==2.14.3",
        'Requires-Dist: kopf==1.45.2; extra == "operator"',
        'Requires-Dist: kubernetes==37.0.2; extra == "agent"',
        'Requires-Dist: rich==15.0.0; extra == "cli"',
        'Requires-Dist: backports.strenum; python_version < "3.11"',
        "Name: rlix",
    ]
    assert requirement_names(lines, extras=("agent", "cli")) == ["pydantic", "kubernetes", "rich"]
    assert requirement_names(lines, extras=()) == ["pydantic"]
    assert "kubernetes/aio/" in LEFT_OUT_PATHS


def test_payload_leaves_out_the_gpu_only_and_asyncio_distributions(tmp_path: Path) -> None:
    """Walked over the venv's real metadata: the agent's kubernetes client and its
    own dependencies come, cuda-core/cuda-bindings (and numpy, which only they
    need) and aiohttp do not."""
    wheel = tmp_path / "rlix-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "rlix-0.dist-info/METADATA",
            "Name: rlix\nRequires-Dist: pydantic==2.14.3\n"
            'Requires-Dist: kubernetes==37.0.2; extra == "agent"\n'
            'Requires-Dist: cuda-core==1.2.2; extra == "agent"\n'
            'Requires-Dist: cuda-bindings==13.5.0; extra == "agent"\n',
        )
    names = runtime_requirements(wheel, extras=("agent",))
    assert {"pydantic", "kubernetes", "urllib3", "pyyaml"} <= set(names)
    assert not {"cuda-core", "cuda-bindings", "numpy", "aiohttp"} & set(names)


def test_the_operators_payload_keeps_aiohttp_for_kopf(tmp_path: Path) -> None:
    """The operator image (make images) imports kopf, which imports aiohttp at
    load: left out, the operator died at start on the real node."""
    wheel = tmp_path / "rlix-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "rlix-0.dist-info/METADATA",
            'Name: rlix\nRequires-Dist: kopf==1.45.2; extra == "operator"\n'
            'Requires-Dist: cuda-core==1.2.2; extra == "agent"\n',
        )
    names = runtime_requirements(wheel, extras=("agent", "operator"))
    assert {"kopf", "aiohttp"} <= set(names)
    assert "cuda-core" not in names


def test_console_scripts_run_the_wheels_entry_points(tmp_path: Path) -> None:
    wheel = tmp_path / "rlix-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "rlix-0.dist-info/entry_points.txt",
            "[console_scripts]\nrlix = rlix.cli.main:main\n"
            "rlix-node-agent = rlix.agent.main:main\n",
        )
    assert console_scripts(wheel, tmp_path / "bin") == ["rlix", "rlix-node-agent"]
    script = (tmp_path / "bin" / "rlix-node-agent").read_text()
    assert script.startswith("#!/usr/bin/python3\n")
    assert "from rlix.agent.main import main" in script
    assert (tmp_path / "bin" / "rlix").stat().st_mode & 0o111


def test_failure_report_picks_kubelet_and_containerd_errors() -> None:
    assert realnode._is_error('E1130 23:10:52.1 1 kubelet.go:1] "Failed" err="x"')
    assert realnode._is_error('time="2026" level=error msg="failed to start"')
    assert not realnode._is_error('I1130 23:10:52.1 1 kubelet.go:1] "Started"')
    assert not realnode._is_error("Error is a word here")


def test_the_agents_payload_carries_the_kubelet_plugins_grpc(tmp_path: Path) -> None:
    """The agent extra as pyproject.toml declares it: the kubelet plugin's gRPC
    and protobuf runtimes (and grpcio's own typing-extensions) reach the image."""
    extra = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    agent = extra["project"]["optional-dependencies"]["agent"]
    wheel = tmp_path / "rlix-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(
            "rlix-0.dist-info/METADATA",
            "Name: rlix\n" + "".join(f'Requires-Dist: {r}; extra == "agent"\n' for r in agent),
        )
    names = runtime_requirements(wheel, extras=("agent",))
    assert {"grpcio", "protobuf", "typing-extensions"} <= set(names)
