"""The committed kubelet API messages are what hack/protos.sh generates from the
committed .proto files, and those keep the kubelet's wire contract: the same
package, services, messages and field numbers as k8s.io/kubelet v1.37's
pkg/apis/dra/v1 and pkg/apis/pluginregistration/v1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlix.agent.kubelet_api import dra_v1_pb2, pluginregistration_v1_pb2

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "rlix" / "agent" / "kubelet_api"


def test_generated_modules_are_current(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [str(ROOT / "hack" / "protos.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
    )
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == sorted(p.name for p in API.glob("*_pb2.py*"))
    for name in generated:
        assert (tmp_path / name).read_text() == (API / name).read_text(), (
            f"{name} differs from what its .proto generates: run `make protos`"
        )


def _fields(message: object) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_the_dra_v1_wire_contract() -> None:
    service = dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert sorted(m.name for m in service.methods) == [
        "NodePrepareResources",
        "NodeUnprepareResources",
    ]
    assert _fields(dra_v1_pb2.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert _fields(dra_v1_pb2.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert _fields(dra_v1_pb2.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert _fields(dra_v1_pb2.NodeUnprepareResourceResponse) == {"error": 1}
    assert _fields(dra_v1_pb2.NodePrepareResourcesRequest) == {"claims": 1}
    assert _fields(dra_v1_pb2.NodePrepareResourcesResponse) == {"claims": 1}


def test_the_plugin_registration_wire_contract() -> None:
    service = pluginregistration_v1_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert _fields(pluginregistration_v1_pb2.PluginInfo) == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }
    assert _fields(pluginregistration_v1_pb2.RegistrationStatus) == {
        "plugin_registered": 1,
        "error": 2,
    }
