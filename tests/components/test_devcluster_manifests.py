"""The objects `rlix cluster up` creates, checked without a cluster."""

from __future__ import annotations

import socket

import pytest

from rlix.core import names
from rlix.devcluster import manifests, processes


def test_gpu_nodes_follow_nvidia_conventions() -> None:
    nodes = manifests.gpu_nodes(3, gpus=4, gpu_memory_mib=40960)
    assert [n["metadata"]["name"] for n in nodes] == ["rlix-gpu-0", "rlix-gpu-1", "rlix-gpu-2"]
    node = nodes[1]
    labels = node["metadata"]["labels"]
    assert labels[names.NODE_LABEL_GPU_COUNT] == "4"
    assert labels[names.NODE_LABEL_GPU_MEMORY_MIB] == "40960"
    assert node["status"]["allocatable"][names.GPU_RESOURCE] == "4"
    assert node["status"]["capacity"][names.GPU_RESOURCE] == "4"
    # kwok only manages nodes that carry its annotation.
    assert node["metadata"]["annotations"][manifests.KWOK_NODE_ANNOTATION] == "fake"


@pytest.mark.parametrize(
    ("count", "gpus", "mem"), [(-1, 8, 1), (1, -1, 1), (1, 8, 0)], ids=["nodes", "gpus", "memory"]
)
def test_gpu_nodes_reject_nonsense(count: int, gpus: int, mem: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        manifests.gpu_nodes(count, gpus=gpus, gpu_memory_mib=mem)


def test_scheduler_config_keeps_default_profile_out() -> None:
    cfg = manifests.rlix_scheduler_config(kubeconfig="/k", extender_url="http://127.0.0.1:9/")
    assert [p["schedulerName"] for p in cfg["profiles"]] == [names.SCHEDULER_NAME]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:9"
    assert ext["nodeCacheCapable"] is True
    assert ext["ignorable"] is False
    assert (ext["filterVerb"], ext["preemptVerb"]) == ("filter", "preempt")
    # The filter answers with RLix's best nodes only: a prioritize call would
    # score them all alike and cost a round trip per pod.
    assert "prioritizeVerb" not in ext and "weight" not in ext


def test_free_port_is_free() -> None:
    port = processes.free_port()
    assert 0 < port < 65536
    assert not processes.port_in_use(port)


def test_free_ports_are_distinct() -> None:
    ports = processes.free_ports(16)
    assert len(set(ports)) == 16
    assert not any(processes.port_in_use(p) for p in ports)


def test_a_port_handed_out_is_not_offered_again_before_it_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A component binds its port some time after it is chosen (an e2e
    # extender's only once its cluster is up, and the cluster picks ports of
    # its own in between). Until then the port looks free; a second call must
    # still not hand it out while other ports are left.
    first, left = sorted(processes.free_ports(2))
    span = range(first, max(left + 1, first + 1000))
    monkeypatch.setattr(processes, "_FIRST_PORT", first)
    monkeypatch.setattr(processes, "_ephemeral_range", lambda: (span.stop, 65535))
    # Every port of the span handed out but one (the others are free or not).
    monkeypatch.setattr(processes, "_HANDED_OUT", set(span) - {left})
    assert processes.free_port() == left
    # Now all are: the round starts again rather than fail.
    assert left in processes._HANDED_OUT
    assert processes.free_port() in span
    assert len(processes._HANDED_OUT) == 1


def test_free_ports_stay_out_of_the_ephemeral_range() -> None:
    """Outgoing connections take source ports from the ephemeral range; a port
    chosen there can be taken before the component binds it (seen in CI)."""
    low, _ = processes._ephemeral_range()
    ports = processes.free_ports(64)
    assert all(20000 <= p < max(low, 21000) for p in ports)


def test_a_taken_port_is_never_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    port = processes.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        # A span of 1,000 ports starting at the taken one: 990 of them must not
        # include it (and asking for all 1,000 says how many were free).
        monkeypatch.setattr(processes, "_FIRST_PORT", port)
        monkeypatch.setattr(processes, "_ephemeral_range", lambda: (port + 1000, 65535))
        assert port not in processes.free_ports(990)
        with pytest.raises(RuntimeError, match=r"only \d+ of 1000 free ports"):
            processes.free_ports(1000)
