"""`rlix demo` end to end: every RLix component, real control plane, simulated trainers.

The demo starts its own cluster beside the session's (a name unique to the
test, so two sessions on one machine cannot tear down each other's), runs
the operator, extender, rlix-scheduler and one node agent per node, submits seven
RLJobs that ask more GPUs than the cluster has and an urgent one later, and runs a
trainer process per role pod through the real client library. It must finish every
job, park a rollout in place for the urgent one, and bring it back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from e2e.conftest import E2E_PREFIX
from e2e.kube import wait_for
from rlix.demo.workload import demo_jobs


def unique_cluster() -> list[str]:
    """``--cluster-name`` for one demo: unique, and reaped by a later session if orphaned."""
    return ["--cluster-name", f"{E2E_PREFIX}demo-{uuid.uuid4().hex[:8]}"]


def test_demo_completes_with_summary(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    result = subprocess.run(
        [sys.executable, "-m", "rlix.cli.main", "demo", "--json", str(out),
         "--workdir", str(tmp_path / "work"), "--timeout", "600", *unique_cluster()],
        check=False, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    summary = json.loads(out.read_text())
    jobs = demo_jobs()
    assert summary["jobs"] == summary["jobs_succeeded"] == len(jobs)
    # Every trainer iteration was reported through the agent and reached the status.
    assert summary["iterations"] == sum(j.iterations for j in jobs)
    assert 0.0 <= summary["gpu_idle_pct"] <= 100.0
    assert 0 <= summary["gpus_shared"] <= 32  # read from the claims' allocations
    assert "GPUs shared" in result.stdout
    assert "RLix demo summary" in result.stdout
    # The urgent job arrives while no four GPUs of a node are free: a
    # lower-priority rollout is parked in place for it (the pod kept), and
    # every pod parked comes back before its job ends (its trainer waits).
    assert summary["preemptions"] >= 1, result.stderr[-5000:]
    assert summary["resumed"] == summary["preemptions"], result.stderr[-5000:]
    assert "parked in place for urgent-eval (Priority)" in result.stderr
    # Jobs had to queue: more GPUs were asked for than the cluster has.
    assert sum(j.gpus for j in jobs) > 32
    assert "Queued=" in result.stderr


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                found.append(int(proc.name))
    return found


def test_demo_stopped_by_sigterm_leaves_nothing_running(tmp_path: Path) -> None:
    work = tmp_path / "work"
    demo = subprocess.Popen(
        [sys.executable, "-m", "rlix.cli.main", "demo", "--workdir", str(work), *unique_cluster()],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert demo.stderr is not None
    for line in demo.stderr:  # wait until RLix's own processes run
        if "[4/5]" in line:
            break
    assert _processes_mentioning(str(work)), "agents should be running by now"
    demo.send_signal(signal.SIGTERM)
    rc = demo.wait(timeout=120)
    demo.stderr.close()
    assert rc == 130
    leftover = wait_for(
        "every process the demo started to exit",
        lambda: not _processes_mentioning(str(work)) or None,
        timeout_s=30,
    )
    assert leftover
