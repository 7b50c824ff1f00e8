"""hack/gpu-check.py: what can be checked without a GPU (planning, units, table,
and a clear, honest exit when there is no GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "gpu-check.py"


@pytest.fixture(scope="module")
def gc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_bandwidth_units(gc: ModuleType) -> None:
    assert gc.gbps(53 * 10**9, 1.0) == 53.0
    assert gc.gbps(10**9, 0.5) == 2.0
    with pytest.raises(ValueError, match="seconds must be > 0"):
        gc.gbps(1, 0)


def test_meminfo_parsing(gc: ModuleType) -> None:
    text = "MemTotal:       131072000 kB\nMemAvailable:   100000000 kB\n"
    assert gc.mem_available_bytes(text) == 100000000 * 1024
    with pytest.raises(ValueError, match="no MemAvailable"):
        gc.mem_available_bytes("MemTotal: 1 kB\n")


def test_sizes_that_do_not_fit_are_skipped_with_the_reason(gc: ModuleType) -> None:
    gib = 1 << 30
    plan = gc.plan_sizes([1, 16, 64], free_device=139 * gib, free_host=60 * gib)
    assert plan[0] == (1, None) and plan[1] == (16, None)
    assert plan[2][0] == 64 and "host memory" in plan[2][1]
    plan = gc.plan_sizes([64], free_device=40 * gib, free_host=500 * gib)
    assert "on the GPU" in plan[0][1]


def test_table_lines_up(gc: ModuleType) -> None:
    rows = [
        gc.Row("floor: pinned copy HBM->host", 1, 0.02, 50.0, None, "ok"),
        gc.Row("rlix suspend", 64, 1.5, 42.7, 0.81, "ok, NVML freed 59.6 GiB"),
        gc.Row("relocate -> cuda:1", None, None, None, None, "skipped: only one GPU"),
    ]
    lines = gc.format_table(rows).splitlines()
    assert len({len(line) for line in lines}) == 1  # every line the same width
    assert "81%" in lines[3] and "42.7" in lines[3] and "skipped: only one GPU" in lines[4]


def test_without_a_gpu_it_says_why_and_exits_77(gc: ModuleType) -> None:
    if gc.gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: run `make gpu-check` instead")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert out.returncode == gc.SKIPPED_EXIT == 77
    assert out.stdout.startswith("gpu-check: SKIPPED: ")


# ------------------------------------------------------------------ relocation
def test_relocation_targets_use_another_gpu_or_say_it_is_the_same_one(gc: ModuleType) -> None:
    host, gpu = gc.relocation_targets(8)
    assert (host.name, host.gpu) == ("host", None)
    assert (gpu.name, gpu.label, gpu.gpu) == ("gpu:1", "gpu:1", 1)
    _, gpu = gc.relocation_targets(1)
    assert (gpu.name, gpu.gpu) == ("gpu:0", 0)
    assert gpu.label == "gpu:0 (same GPU: only one here)"


def test_park_dir_is_shm_when_it_has_room_else_disk_else_skipped(gc: ModuleType) -> None:
    gib = 1 << 30
    shm, disk = Path("/dev/shm"), Path("/var/tmp")
    n = 10 * gib

    def choose(shm_free: int | None, disk_free: int | None) -> tuple[Path | None, str]:
        base: tuple[Path | None, str] = gc.choose_park_base(
            n, shm_dir=shm, shm_free=shm_free, disk_dir=disk, disk_free=disk_free
        )
        return base

    base, text = choose(12 * gib, 500 * gib)  # 1.2 x 10 GiB fits exactly
    assert base == shm and "/dev/shm (host memory)" in text
    base, text = choose(11 * gib, 500 * gib)
    assert base == disk and "on disk in /var/tmp" in text and "11.0 GiB free" in text
    base, text = choose(None, 500 * gib)
    assert base == disk and "/dev/shm: absent" in text
    base, text = choose(1 * gib, 2 * gib)
    assert base is None and "needs 12.0 GiB" in text


def test_free_bytes_of_a_real_and_a_missing_path(gc: ModuleType, tmp_path: Path) -> None:
    free = gc.free_bytes(tmp_path)
    assert isinstance(free, int) and free > 0
    assert gc.free_bytes(tmp_path / "missing") is None


def test_relocation_sizes_that_do_not_fit_the_gpus_are_skipped(gc: ModuleType) -> None:
    gib, gb = 1 << 30, 10**9
    host, gpu1 = gc.relocation_targets(2)
    _, gpu0 = gc.relocation_targets(1)
    free = [139 * gib, 139 * gib]
    assert gc.device_skip_reason(16 * gb, host, free) is None
    assert gc.device_skip_reason(16 * gb, gpu1, free) is None
    assert gc.device_skip_reason(16 * gb, gpu0, free[:1]) is None
    # 100 GB fits one GPU, but not twice on the same one.
    assert gc.device_skip_reason(100 * gb, host, free) is None
    assert gc.device_skip_reason(100 * gb, gpu1, free) is None
    reason = gc.device_skip_reason(100 * gb, gpu0, free[:1])
    assert reason is not None and "on GPU 0" in reason
    reason = gc.device_skip_reason(16 * gb, gpu1, [139 * gib, 10 * gib])
    assert reason is not None and "on GPU 1" in reason and "10.0 free" in reason
    reason = gc.device_skip_reason(16 * gb, gpu1, free[:1])
    assert reason == "no GPU 1 on this machine"


def _measured(gc: ModuleType, **kw: object) -> object:
    n = 16 * 10**9
    base: dict[str, object] = {
        "nbytes": n,
        "live_before": n,
        "live_suspended": 0,
        "live_resumed": n,
        "digest_same": True,
        "pod_nvml_before": n + (500 << 20),
        "pod_nvml_suspended": 500 << 20,
        "agent_nvml_before": 0,
        "agent_nvml_suspended": n + (500 << 20),
    }
    return gc.Relocated(**{**base, **kw})


def test_relocation_rows_and_verdicts(gc: ModuleType) -> None:
    _, gpu1 = gc.relocation_targets(2)
    host = gc.relocation_targets(2)[0]
    park = "park in /dev/shm (host memory)"
    rows = gc.relocation_rows(gpu1, 16, _measured(gc), suspend_s=2.0, resume_s=1.0, park=park)
    assert [r.check for r in rows] == [
        "relocate -> gpu:1 (suspend)",
        "relocate -> gpu:1 (resume)",
    ]
    assert rows[0].gbps == 8.0 and rows[1].gbps == 16.0 and rows[0].size_gb == 16
    assert rows[0].result.startswith("ok: ") and park in rows[0].result
    assert "agent on GPU 1 +" in rows[0].result
    assert rows[1].result == "bit for bit"
    assert not any(gc.is_failure(r.result) for r in rows)

    # The pod kept its storages, or NVML still sees its memory: NOT FREED.
    assert gc.suspend_verdict(_measured(gc, live_suspended=4096), host, park).startswith(
        "NOT FREED"
    )
    nf = gc.suspend_verdict(_measured(gc, pod_nvml_suspended=16 * 10**9), host, park)
    assert nf.startswith("NOT FREED") and gc.is_failure(nf)
    # The agent does not hold the copy on the target GPU: NOT HELD.
    nh = gc.suspend_verdict(_measured(gc, agent_nvml_suspended=1 << 30), gpu1, park)
    assert nh.startswith("NOT HELD") and gc.is_failure(nh)
    # ...which a host target does not check.
    assert gc.suspend_verdict(_measured(gc, agent_nvml_suspended=0), host, park).startswith("ok")
    # NVML missing, or blind to per-process memory (containers): said, not failed.
    no_nvml = gc.suspend_verdict(
        _measured(gc, pod_nvml_before=None, pod_nvml_suspended=None), host, park
    )
    assert no_nvml.startswith("ok") and "NVML unavailable" in no_nvml
    blind = gc.suspend_verdict(
        _measured(gc, pod_nvml_before=0, pod_nvml_suspended=0, agent_nvml_suspended=0),
        gpu1,
        park,
    )
    assert blind.startswith("ok") and "does not attribute" in blind

    bad = gc.resume_verdict(_measured(gc, digest_same=False))
    assert bad == "CHECKSUM MISMATCH" and gc.is_failure(bad)
    short = gc.resume_verdict(_measured(gc, live_resumed=0))
    assert short.startswith("bit for bit, SIZE MISMATCH") and gc.is_failure(short)
    assert gc.is_failure("FAILED: suspend-pod: failed: boom")
    assert not gc.is_failure("skipped: needs 20.0 GiB on GPU 0, 10.0 free")


def test_one_line_tail_keeps_the_end(gc: ModuleType) -> None:
    assert gc.one_line_tail("a\n\n b \nc\n") == "a | b | c"
    tail = gc.one_line_tail("x" * 1000 + "\nthe end", limit=20)
    assert tail.endswith("x | the end") and len(tail) == 23


def test_the_relocation_orchestration_runs_on_cpu_against_a_simulated_agent(
    gc: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same agent/pod/suspend-pod/resume-pod steps the GPU check takes, with
    the simulated backend and host tensors (memfd exports instead of CUDA IPC)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(gc, "CHUNK_BYTES", 1 << 20)  # several pieces, uint8 and int32
    park_base = tmp_path / "parks"
    park_base.mkdir()
    targets = gc.relocation_targets(2)
    rows = gc.check_relocation(
        0.003,
        targets,
        park_base=park_base,
        park="park in a test dir",
        nvml=None,
        backend="simulated",
        device="cpu",
    )
    assert [r.check for r in rows] == [
        "relocate -> host (suspend)",
        "relocate -> host (resume)",
        "relocate -> gpu:1 (suspend)",
        "relocate -> gpu:1 (resume)",
    ], rows
    for suspend, resume in (rows[0:2], rows[2:4]):
        assert suspend.result.startswith("ok: pod live 0.0 GiB, NVML unavailable"), suspend
        assert "agent on GPU" not in suspend.result or "not measured" in suspend.result
        assert resume.result == "bit for bit", resume
        assert suspend.seconds is not None and suspend.seconds > 0
    assert list(park_base.iterdir()) == []  # the park dir is cleaned up


def test_a_relocation_that_cannot_start_is_failed_and_cleaned_up(
    gc: ModuleType, tmp_path: Path
) -> None:
    park_base = tmp_path / "parks"
    park_base.mkdir()
    targets = gc.relocation_targets(1)
    rows = gc.check_relocation(
        0.001,
        targets,
        park_base=park_base,
        park="park in a test dir",
        nvml=None,
        backend="no-such-backend",  # the agent refuses it and exits
        device="cpu",
    )
    assert [r.check for r in rows] == ["relocate -> host", f"relocate -> {targets[1].label}"]
    assert rows[0].result.startswith("FAILED: RuntimeError: agent exited")
    assert rows[1].result == "skipped: an earlier step failed"
    assert list(park_base.iterdir()) == []
