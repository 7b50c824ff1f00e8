"""GPU backends (simulated, and NVML over a fake pynvml) and background publication."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from rlix.agent.gpus import BackendUnsupportedError, GpuInfo, GpuProcess, gpu_annotation_doc
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.publishing import RecordingPublisher
from rlix.agent.simulated_gpus import SimulatedBackend


def test_simulated_memory_follows_reports_and_parking() -> None:
    sim = SimulatedBackend(gpu_count=2, memory_mib=1000)
    sim.report_usage(10, 0, 600, 0.5)
    sim.report_usage(11, 0, 300, 0.7)
    sim.report_usage(10, 1, 100, 0.1)
    assert [(g.used_mib, g.utilization) for g in sim.gpus()] == [(900, 1.0), (100, 0.1)]
    with pytest.raises(ValueError, match="gpu 0 has 100 MiB free, 200 MiB reported"):
        sim.report_usage(12, 0, 200, 0.1)
    sim.set_parked(frozenset({10}), True)  # memory freed, as NVML would see it
    assert [g.used_mib for g in sim.gpus()] == [300, 0]
    assert sim.processes() == [GpuProcess(pid=11, gpu_index=0, used_mib=300)]
    sim.report_usage(12, 0, 700, 0.2)  # the freed memory can be lent out
    sim.set_parked(frozenset({10}), False)
    assert [g.used_mib for g in sim.gpus()] == [1600, 100]  # over-commit is visible
    sim.forget(12)
    assert [g.used_mib for g in sim.gpus()] == [900, 100]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 5, 1, 0.1), "gpu 5 out of range"),
        ((0, 0, -1, 0.1), "memory_mib"),
        ((0, 0, 1, 1.5), "utilization"),
    ],
)
def test_simulated_rejects_bad_reports(args: tuple[int, int, int, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimulatedBackend(gpu_count=2, memory_mib=10).report_usage(*args)


def test_annotation_doc_matches_the_shared_snapshot_format() -> None:
    from rlix.core.policy.placement.documents import node_from_doc

    gpus = [GpuInfo(0, "GPU-x", "H200", 143771, 1024, 0.25)]
    doc = {"name": "n", "gpuCount": 1, "gpuMemoryMiB": 143771, "gpus": gpu_annotation_doc(gpus)}
    node = node_from_doc(doc)  # the extender's parser reads what the agent writes
    assert node.gpus[0].used_mib == 1024 and node.gpus[0].utilization == 0.25


class _Flaky(RecordingPublisher):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.gate = threading.Event()

    def patch_pod_annotations(self, *, namespace: str, name: str, annotations: Any) -> None:
        self.gate.wait(5)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("API server down")
        super().patch_pod_annotations(namespace=namespace, name=name, annotations=annotations)


def test_publication_coalesces_and_retries_without_losing_the_latest() -> None:
    port = _Flaky(failures=2)
    pub = BackgroundPublisher(port, retry_s=0.01)
    try:
        pub.pod("ns", "p", {"rlix.io/phase": "rollout"})
        pub.pod("ns", "p", {"rlix.io/phase": "training", "rlix.io/phase-since": "t1"})
        port.gate.set()
        assert pub.flush(timeout=10)
        assert port.current[("pod", "ns/p")] == {
            "rlix.io/phase": "training",
            "rlix.io/phase-since": "t1",
        }
        assert port.failures == 0
        assert len(port.patches) <= 2  # coalesced, not one per submission and retry
    finally:
        pub.stop()


def test_a_phase_left_and_the_next_one_entered_at_once_publish_only_the_next() -> None:
    # Under the phase gate a trainer reports idle as it leaves a block and its
    # next phase a moment later: the worker gathers before it publishes, so the
    # pod's annotation never reads the idle in between (a long gathering here,
    # so the moment cannot be missed).
    port = RecordingPublisher()
    pub = BackgroundPublisher(port, coalesce_s=60)
    try:
        pub.pod("ns", "p", {"rlix.io/phase": "idle", "rlix.io/iterations": "1"})
        time.sleep(0.2)
        assert port.patches == []  # still gathering
        pub.pod("ns", "p", {"rlix.io/phase": "rollout"})
        assert pub.flush(timeout=10)  # a flush publishes at once
        assert [p.annotations for p in port.patches] == [
            {"rlix.io/phase": "rollout", "rlix.io/iterations": "1"}
        ]
    finally:
        pub.stop()
    # By default the gathering is short: a lone submission goes out by itself.
    port = RecordingPublisher()
    pub = BackgroundPublisher(port)
    try:
        pub.pod("ns", "p", {"rlix.io/phase": "idle"})
        deadline = time.monotonic() + 10
        while not port.patches and time.monotonic() < deadline:
            time.sleep(0.01)
        assert port.current == {("pod", "ns/p"): {"rlix.io/phase": "idle"}}
    finally:
        pub.stop()


class _Mem:
    total = 80 * (1 << 30)
    used = 3 * (1 << 30)


class _Rates:
    gpu = 42


class _Proc:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


@pytest.fixture
def fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: _Mem()  # type: ignore[attr-defined]
    m.nvmlDeviceGetUtilizationRates = lambda h: _Rates()  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: (  # type: ignore[attr-defined]
        [_Proc(100, 2 * (1 << 30)), _Proc(101, None)] if h == 0 else []
    )
    monkeypatch.setitem(sys.modules, "pynvml", m)
    yield m


def test_nvml_backend_maps_inventory_and_processes(fake_pynvml: types.ModuleType) -> None:
    from rlix.agent.nvml_gpus import NvmlBackend

    nvml = NvmlBackend()
    assert nvml.gpus()[1] == GpuInfo(1, "GPU-1", "NVIDIA H200", 81920, 3072, 0.42)
    # Hidden usage (None) is 0, not a bogus number.
    assert nvml.processes() == [GpuProcess(100, 0, 2048), GpuProcess(101, 0, 0)]
    with pytest.raises(BackendUnsupportedError, match="simulated backend"):
        nvml.report_usage(1, 0, 1, 0.1)
    nvml.close()


def test_nvml_backend_explains_a_missing_driver(fake_pynvml: types.ModuleType) -> None:
    from rlix.agent.nvml_gpus import NvmlBackend

    def fail() -> None:
        raise fake_pynvml.NVMLError("Driver Not Loaded")

    fake_pynvml.nvmlInit = fail  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="--backend simulated"):
        NvmlBackend()


def test_simulated_relocation_moves_memory_to_the_target_gpu() -> None:
    sim = SimulatedBackend(gpu_count=2, memory_mib=1000)
    sim.report_usage(10, 0, 600, 0.5)
    sim.report_usage(20, 1, 300, 0.5)
    sim.set_parked(frozenset({10}), True)
    sim.hold("pod-a", 1, 600)  # relocated into GPU 1's spare HBM
    assert [g.used_mib for g in sim.gpus()] == [0, 900]
    with pytest.raises(ValueError, match="gpu 1 has 100 MiB free"):
        sim.report_usage(21, 1, 200, 0.1)
    sim.hold("pod-a", 1, 0)
    sim.set_parked(frozenset({10}), False)
    assert [g.used_mib for g in sim.gpus()] == [600, 300]
    with pytest.raises(ValueError, match="out of range"):
        sim.hold("pod-a", 7, 1)
