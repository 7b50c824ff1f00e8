"""`rlix demo --compare` end to end: two real runs on one real control plane, one table.

Three jobs (24 GPUs of work) on two 8-GPU kwok nodes: first as plain pods on
whole GPUs through kube-scheduler's default profile, then as RLJobs through
RLix (operator, extender, rlix-scheduler, DRA claims, node agents). The test
checks that the table comes from those runs, not who wins: every job of both
runs succeeded, every pod's record is a real binding with the GPUs it was
given, and each number of the table is the one its definition gives on the
records the runs left.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from e2e.test_demo import unique_cluster
from rlix.demo import metrics
from rlix.demo.record import load
from rlix.demo.workload import demo_jobs

JOBS = 3


def test_compare_prints_a_table_computed_from_both_runs(tmp_path: Path) -> None:
    out, numbers = tmp_path / "out", tmp_path / "numbers.json"
    result = subprocess.run(
        [sys.executable, "-m", "rlix.cli.main", "demo", "--compare", "--jobs", str(JOBS),
         "--nodes", "2", "--gpus", "8", "--timeout", "400", "--out", str(out),
         "--json", str(numbers), "--workdir", str(tmp_path / "work"), *unique_cluster()],
        check=False, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    for _, label in metrics.ROWS:
        assert label in result.stdout
    jobs = {j.name: j for j in demo_jobs()[:JOBS]}
    runs = {r.mode: r for r in load(out / "demo_compare.json")}
    assert set(runs) == {"exclusive", "rlix"}
    printed = json.loads(numbers.read_text())
    for mode, run in runs.items():
        assert run.gpus_per_node and sum(run.gpus_per_node.values()) == 16
        assert set(run.jobs) == set(jobs)
        assert all(j.state == "Succeeded" and j.finished_at for j in run.jobs.values())
        for name, job in jobs.items():
            pods = [p for p in run.pods.values() if p.job == name]
            assert len(pods) == sum(r.replicas for r in job.roles), (mode, name)
            want = sorted(r.gpus for r in job.roles for _ in range(r.replicas))
            assert sorted(len(p.gpus) for p in pods) == want, (mode, name)
            # How the GPUs were known: RLix's from the claims' allocations, the
            # baseline's from the device-plugin stand-in.
            source = "claim" if mode == "rlix" else "annotation"
            assert {p.gpus_from for p in pods} == {source}, (mode, name)
            submitted = run.jobs[name].submitted_at
            finished = run.jobs[name].finished_at or 0.0
            for p in pods:
                assert p.bound_at is not None and p.ended_at is not None
                assert submitted <= p.bound_at <= p.ended_at, (mode, p.name)
                assert p.node in run.gpus_per_node
                assert all(0 <= g < run.gpus_per_node[p.node] for g in p.gpus)
            trainers = [p for p in pods if any(r.name == p.role and r.kind == "trainer"
                                               for r in job.roles)]  # fmt: skip
            for p in trainers:  # the agent reported the trainer's phases
                assert {"rollout", "training"} <= {ph for _, ph in p.phases}, (mode, p.name)
                assert p.bound_at is not None and p.bound_at <= finished
        # The table's numbers are the definitions applied to these records.
        assert metrics.compute(run) == printed[mode]
        latency = [j.finished_at - j.submitted_at for j in run.jobs.values() if j.finished_at]
        assert printed[mode]["mean_latency_s"] == round(sum(latency) / len(latency), 1)
        assert 0.0 <= (printed[mode]["gpu_idle_pct"] or 0.0) <= 100.0
    # Whole GPUs through the default scheduler: no GPU can hold two jobs at once.
    assert printed["exclusive"]["gpus_shared"] == 0
    assert printed["exclusive"]["preemptions"] == 0
    md = (out / "demo_compare.md").read_text()
    assert "RLix/excl." in md
    # RLix decided as the chart does by default (for nodes without the gate),
    # and says so where it ran.
    said = "sharing rules 1-6 with the interference matrix from the built-in time-slicing bound"
    assert f"RLix: {said}" in result.stdout
    assert f"decided with {said}" in md
    logs = tmp_path / "work" / "rlix" / "logs"
    for component in ("extender", "operator"):
        assert said in (logs / f"{component}.log").read_text(), component
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "demo_compare.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert "timeline PNG skipped" in result.stdout
