"""The kubelet's side of the gpu.rlix.io DRA driver, called as the kubelet calls
it: a gRPC client on the registration and DRA sockets. The claims come from an
in-memory claim reader (the real API server and kubelet are the realnode e2e's,
e2e/test_dra_kubelet.py)."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from rlix.agent import cdi
from rlix.agent.claim_preparing import ClaimPreparer
from rlix.agent.kubelet_api import dra_v1_pb2 as dra_pb
from rlix.agent.kubelet_api import pluginregistration_v1_pb2 as reg_pb
from rlix.agent.kubelet_plugin import DRA_SERVICE, REGISTRATION_SERVICE, KubeletPlugin
from rlix.agent.simulated_gpus import SimulatedBackend
from rlix.core import dra

NODE = "node-a"
UID_A = "0b3c2a9e-1111-4c1e-9a55-7f1f00000001"
UID_B = "0b3c2a9e-2222-4c1e-9a55-7f1f00000002"
UID_C = "0b3c2a9e-3333-4c1e-9a55-7f1f00000003"


class Claims:
    """ResourceClaims in memory, stored as the API server returns them."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, name: str, uid: str, results: list[dict[str, Any]]) -> None:
        self.by_key[("ns", name)] = {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }

    def read_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        if (namespace, name) not in self.by_key:
            raise LookupError(f"resourceclaims {name!r} not found")
        return self.by_key[(namespace, name)]


def result(index: int, mib: int, *, request: str = "gpu-0", pool: str = NODE) -> dict[str, Any]:
    return {
        "request": request,
        "driver": dra.DRIVER,
        "pool": pool,
        "device": dra.device_name(index),
        "shareID": f"share-{index}-{mib}",
        "consumedCapacity": {dra.MEMORY: f"{mib}Mi"},
    }


@pytest.fixture
def claims() -> Claims:
    return Claims()


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short directory: pytest's own is too long for a unix socket path."""
    with tempfile.TemporaryDirectory(prefix="rlix-dra-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def plugin(tmp_path: Path, claims: Claims) -> Iterator[KubeletPlugin]:
    backend = SimulatedBackend(gpu_count=4, memory_mib=81920)
    preparer = ClaimPreparer(claims, backend.gpus, node=NODE, cdi_dir=tmp_path / "cdi")
    plugin = KubeletPlugin(preparer, kubelet_dir=tmp_path / "kubelet")
    plugin.start()
    yield plugin
    plugin.stop()


def call(socket: Path, service: str, method: str, request: Any, response: Any) -> Any:
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = channel.unary_unary(
            f"/{service}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return stub(request, timeout=10)


def prepare(plugin: KubeletPlugin, *names: tuple[str, str]) -> dra_pb.NodePrepareResourcesResponse:
    request = dra_pb.NodePrepareResourcesRequest(
        claims=[dra_pb.Claim(namespace="ns", name=n, uid=u) for n, u in names]
    )
    return call(
        plugin.dra_socket,
        DRA_SERVICE,
        "NodePrepareResources",
        request,
        dra_pb.NodePrepareResourcesResponse,
    )


def unprepare(plugin: KubeletPlugin, *uids: str) -> dra_pb.NodeUnprepareResourcesResponse:
    request = dra_pb.NodeUnprepareResourcesRequest(
        claims=[dra_pb.Claim(namespace="ns", name="gone", uid=uid) for uid in uids]
    )
    return call(
        plugin.dra_socket,
        DRA_SERVICE,
        "NodeUnprepareResources",
        request,
        dra_pb.NodeUnprepareResourcesResponse,
    )


def spec_env(tmp_path: Path, uid: str) -> dict[str, str]:
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", uid).read_text())
    assert spec["kind"] == "rlix.io/gpu"
    (device,) = spec["devices"]
    assert device["name"] == uid
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


def test_registration_answers_what_the_kubelets_plugin_watcher_asks(
    plugin: KubeletPlugin, tmp_path: Path
) -> None:
    assert plugin.registration_socket == tmp_path / "kubelet/plugins_registry/gpu.rlix.io-reg.sock"
    info = call(
        plugin.registration_socket,
        REGISTRATION_SERVICE,
        "GetInfo",
        reg_pb.InfoRequest(),
        reg_pb.PluginInfo,
    )
    assert info.type == "DRAPlugin"
    assert info.name == dra.DRIVER
    assert info.endpoint == str(tmp_path / "kubelet/plugins/gpu.rlix.io/dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    call(
        plugin.registration_socket,
        REGISTRATION_SERVICE,
        "NotifyRegistrationStatus",
        reg_pb.RegistrationStatus(plugin_registered=False, error="no such version"),
        reg_pb.RegistrationStatusResponse,
    )
    assert (plugin.registration.registered, plugin.registration.error) == (
        False,
        "no such version",
    )


def test_two_claims_on_one_gpu_each_get_their_own_spec(
    plugin: KubeletPlugin, claims: Claims, tmp_path: Path
) -> None:
    claims.add("a", UID_A, [result(2, 30000)])
    claims.add("b", UID_B, [result(2, 50000)])
    response = prepare(plugin, ("a", UID_A), ("b", UID_B))
    for uid in (UID_A, UID_B):
        out = response.claims[uid]
        assert out.error == ""
        (device,) = out.devices
        assert (device.pool_name, device.device_name) == (NODE, "gpu-2")
        assert list(device.request_names) == ["gpu-0"]
        assert list(device.cdi_device_ids) == [f"rlix.io/gpu={uid}"]
    assert response.claims[UID_A].devices[0].share_id == "share-2-30000"
    uuid = SimulatedBackend(gpu_count=4, memory_mib=81920).gpus()[2].uuid
    assert spec_env(tmp_path, UID_A) == {
        "RLIX_GPU_UUIDS": uuid,
        "RLIX_GPU_INDICES": "2",
        "RLIX_GPU_MEMORY_MIB": "30000",
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "CUDA_VISIBLE_DEVICES": uuid,
    }
    assert spec_env(tmp_path, UID_B)["RLIX_GPU_MEMORY_MIB"] == "50000"


def test_a_claim_of_two_gpus_is_one_cdi_device_naming_both(
    plugin: KubeletPlugin, claims: Claims, tmp_path: Path
) -> None:
    claims.add("a", UID_A, [result(0, 1000, request="gpu-0"), result(3, 2000, request="gpu-1")])
    (d0, d1) = prepare(plugin, ("a", UID_A)).claims[UID_A].devices
    assert (d0.device_name, d1.device_name) == ("gpu-0", "gpu-3")
    assert list(d0.cdi_device_ids) == list(d1.cdi_device_ids) == [f"rlix.io/gpu={UID_A}"]
    env = spec_env(tmp_path, UID_A)
    assert env["RLIX_GPU_INDICES"] == "0,3"
    assert env["RLIX_GPU_MEMORY_MIB"] == "1000,2000"


def test_prepare_is_idempotent_and_unprepare_needs_no_claim(
    plugin: KubeletPlugin, claims: Claims, tmp_path: Path
) -> None:
    claims.add("a", UID_A, [result(1, 4096)])
    first = prepare(plugin, ("a", UID_A))
    again = prepare(plugin, ("a", UID_A))  # a restarted kubelet or agent asks again
    assert first == again
    assert cdi.prepared_claims(tmp_path / "cdi") == [UID_A]
    del claims.by_key[("ns", "a")]  # the claim is deleted before its pod is unprepared
    assert unprepare(plugin, UID_A).claims[UID_A].error == ""
    assert cdi.prepared_claims(tmp_path / "cdi") == []
    assert unprepare(plugin, UID_A).claims[UID_A].error == ""  # again: nothing left, no error


def test_a_claim_this_node_cannot_prepare_says_why_and_others_still_prepare(
    plugin: KubeletPlugin, claims: Claims, tmp_path: Path
) -> None:
    claims.add("elsewhere", UID_A, [result(0, 1000, pool="node-b")])
    claims.add("b", UID_B, [result(0, 1000)])
    response = prepare(plugin, ("elsewhere", UID_A), ("b", UID_B), ("missing", UID_C))
    assert "pool 'node-b', not this node's" in response.claims[UID_A].error
    assert "'missing' not found" in response.claims[UID_C].error
    assert response.claims[UID_B].error == ""
    assert cdi.prepared_claims(tmp_path / "cdi") == [UID_B]


def test_a_claim_this_node_cannot_unprepare_says_why_and_others_still_unprepare(
    plugin: KubeletPlugin, claims: Claims, tmp_path: Path
) -> None:
    claims.add("a", UID_A, [result(0, 1000)])
    prepare(plugin, ("a", UID_A))
    response = unprepare(plugin, "../x", UID_A)
    assert "is not a Kubernetes uid" in response.claims["../x"].error
    assert response.claims[UID_A].error == ""
    assert cdi.prepared_claims(tmp_path / "cdi") == []


@pytest.mark.parametrize(
    ("results", "uid", "message"),
    [
        ([result(0, 1000)], UID_B, f"uid is '{UID_A}', the kubelet asked for '{UID_B}'"),
        ([], UID_A, "no allocation of a gpu.rlix.io device"),
        ([result(7, 1000)], UID_A, "device 'gpu-7' is not a GPU of node node-a"),
    ],
)
def test_claims_that_cannot_be_prepared(
    plugin: KubeletPlugin, claims: Claims, results: list[dict[str, Any]], uid: str, message: str
) -> None:
    claims.add("a", UID_A, results)
    out = prepare(plugin, ("a", uid)).claims[uid]
    assert message in out.error
    assert not out.devices


def test_stopping_removes_both_sockets(plugin: KubeletPlugin) -> None:
    plugin.stop()
    assert not plugin.registration_socket.exists()
    assert not plugin.dra_socket.exists()


def test_a_socket_path_too_long_is_refused_by_name(tmp_path: Path, claims: Claims) -> None:
    preparer = ClaimPreparer(claims, list, node=NODE, cdi_dir=tmp_path)
    plugin = KubeletPlugin(preparer, kubelet_dir=tmp_path / ("x" * 100))
    with pytest.raises(OSError, match="at most 107 bytes"):
        plugin.start()


def test_a_claim_uid_never_becomes_a_path(tmp_path: Path) -> None:
    with pytest.raises(cdi.CdiError, match="is not a Kubernetes uid"):
        cdi.write_spec(tmp_path, "../../etc/x", [cdi.PreparedGpu(0, "GPU-0", 1)])


def test_a_vendor_cdi_device_is_added_per_gpu(tmp_path: Path, claims: Claims) -> None:
    """On a real GPU node NVIDIA's own CDI device brings the device nodes."""
    claims.add("a", UID_A, [result(0, 1000, request="gpu-0"), result(3, 2000, request="gpu-1")])
    backend = SimulatedBackend(gpu_count=4, memory_mib=81920)
    preparer = ClaimPreparer(
        claims,
        backend.gpus,
        node=NODE,
        cdi_dir=tmp_path,
        vendor_cdi_device="nvidia.com/gpu={uuid}",
    )
    d0, d3 = preparer.prepare("ns", "a", UID_A)
    uuids = [g.uuid for g in backend.gpus()]
    assert d0.cdi_ids == (f"rlix.io/gpu={UID_A}", f"nvidia.com/gpu={uuids[0]}")
    assert d3.cdi_ids == (f"rlix.io/gpu={UID_A}", f"nvidia.com/gpu={uuids[3]}")
    by_index = ClaimPreparer(
        claims,
        backend.gpus,
        node=NODE,
        cdi_dir=tmp_path,
        vendor_cdi_device="nvidia.com/gpu={index}",
    )
    assert by_index.prepare("ns", "a", UID_A)[1].cdi_ids[1] == "nvidia.com/gpu=3"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("gpu={uuid}", "is not '<vendor>/<class>=<name>'"),
        ("nvidia.com/gpu={serial}", "only {uuid} and {index} may be used"),
        ("nvidia.com/gpu=all", "names no GPU"),
    ],
)
def test_a_bad_vendor_cdi_device_is_refused_by_name(
    tmp_path: Path, claims: Claims, template: str, message: str
) -> None:
    with pytest.raises(cdi.CdiError, match=re.escape(message)):
        ClaimPreparer(claims, list, node=NODE, cdi_dir=tmp_path, vendor_cdi_device=template)
