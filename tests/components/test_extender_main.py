"""``rlix-extender`` starts as a subprocess on a given port (as e2e will run it)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.builders.objects import extender_args, pod_object
from tests.builders.placement import pod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """``rlix-extender --no-watch`` on a free loopback port; its base URL once ready."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlix.extender.main", "--no-watch", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/readyz", timeout=1) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "extender did not start in 30 s"
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def _rules(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/debug/snapshot", timeout=5) as r:
        rules: dict[str, Any] = json.loads(r.read())["sharingRules"]
    return rules


def test_serves_over_loopback_without_a_cluster() -> None:
    with serving() as base:
        assert _rules(base)["interference"] is None
        body = extender_args(pod_object(pod("p").build()), ["n1"])
        req = urllib.request.Request(f"{base}/filter", data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=5) as r:
            answer = json.loads(r.read())
        assert answer["NodeNames"] == []
        assert "not in the rlix extender's cache" in answer["FailedAndUnresolvableNodes"]["n1"]


def test_decides_with_the_interference_matrix_it_is_given() -> None:
    matrix = ROOT / "bench/results/gpu_interference.json"
    with serving("--interference", str(matrix)) as base:
        rules = _rules(base)
    assert rules["interference"]["compute"]["memory"] == 0.573  # the file's cell
    assert rules["minPairProgress"] == 4 / 3


def test_decides_with_the_built_in_time_slicing_bound_when_named() -> None:
    with serving("--interference", "time-slicing") as base:
        rules = _rules(base)
    # Two busy phases split a time-sliced GPU; weight sync's copies overlap kernels.
    assert rules["interference"]["compute"]["memory"] == 1.0
    assert rules["interference"]["memory"]["compute"] == 1.0
    assert rules["interference"]["network"]["compute"] == 0.0
    assert rules["minPairProgress"] == 4 / 3


def test_an_unreadable_matrix_is_a_usage_error_naming_the_file_and_why(tmp_path: Path) -> None:
    bad = tmp_path / "interference.json"
    bad.write_text('{"time_slicing": {"slowdown": {"compute": {"compute": "fast"}}}}')
    out = subprocess.run(
        [sys.executable, "-m", "rlix.extender.main", "--no-watch", f"--interference={bad}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 2
    assert f"rlix-extender: --interference {bad}: " in out.stderr
    assert "time_slicing.slowdown.compute.compute is not a number" in out.stderr


def test_bad_port_is_a_usage_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rlix.extender.main", "--no-watch", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 2
    assert "--port must be 1..65535" in out.stderr
