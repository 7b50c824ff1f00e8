"""`rlix demo --compare`: the record, the metrics, the baseline's pods and the results.

The metrics are checked on hand-built records whose answers are worked out in
the comments; the record is fed pod and ResourceClaim objects shaped as the API
server returns them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlix.cli import demo as demo_cli
from rlix.cli.main import main
from rlix.core import dra, names
from rlix.core.objects import read_pod
from rlix.demo import compare, components, exclusive, metrics, timeline
from rlix.demo.pods import PodRuntime
from rlix.demo.record import JobRecord, PodRecord, RunRecord, epoch, load
from rlix.demo.runner import Demo, sharing_rules
from rlix.demo.workload import demo_jobs

# The H200 matrix the repository ships (``make gpu-check`` writes one like it).
MATRIX = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_interference.json"


def _pod(uid: str, job: str, gpus: list[int], bound: float, ended: float, **kw: Any) -> PodRecord:
    return PodRecord(
        name=f"{job}-{uid}", job=job, role="r", node="n0", gpus=gpus, bound_at=bound,
        ended_at=ended, **kw,
    )  # fmt: skip


def _two_jobs() -> RunRecord:
    """One node, 2 GPUs, window 0..10 s.

    job a: submitted 0, pod on GPU 0 bound 0..10, training 2..10 (active 8 s).
    job b: submitted 0, pod on GPU 0 too (shared) bound 4..8, rollout 4..8,
    suspended 6..7 (active 3 s), finished at 8. GPU 1 is never held.
    """
    run = RunRecord("rlix", {"n0": 2})
    run.jobs = {
        "a": JobRecord("a", 0.0, 10.0, "Succeeded"),
        "b": JobRecord("b", 0.0, 8.0, "Succeeded"),
    }
    run.pods = {
        "1": _pod("1", "a", [0], 0.0, 10.0, phases=[(0.0, "idle"), (2.0, "training")]),
        "2": _pod(
            "2",
            "b",
            [0],
            4.0,
            8.0,
            phases=[(4.0, "rollout")],
            suspended=True,
            suspended_spans=[[6.0, 7.0]],
        ),
    }
    return run


def test_metrics_follow_their_definitions() -> None:
    got = metrics.compute(_two_jobs())
    # GPU 0 active 2..10 (a) U 4..6,7..8 (b) = 8 s; GPU 1 never: 8 of 20 GPU-seconds.
    assert got["gpu_idle_pct"] == 60.0
    assert got["jobs_per_hour"] == 720.0  # 2 jobs in 10 s
    assert got["mean_latency_s"] == 9.0  # (10 + 8) / 2
    # b waits 0..4 (its only pod binds at 4); GPU 1 is empty all of it, GPU 0 held:
    # 4 empty GPU-seconds of 8.
    assert got["fragmentation_pct"] == 50.0
    assert got["gpus_shared"] == 1
    assert got["preemptions"] == 1
    assert got["window_s"] == 10.0


def test_pods_of_one_job_or_at_different_times_do_not_share() -> None:
    run = RunRecord("exclusive", {"n0": 2})
    run.jobs = {"a": JobRecord("a", 0.0, 4.0, "Succeeded"), "b": JobRecord("b", 0.0, 9.0)}
    run.pods = {
        "1": _pod("1", "a", [0, 1], 0.0, 4.0),
        "2": _pod("2", "a", [1], 0.0, 4.0),
        "3": _pod("3", "b", [0], 4.0, 9.0),  # after a left GPU 0
    }
    got = metrics.compute(run)
    assert got["gpus_shared"] == 0
    assert got["jobs_succeeded"] == 1  # b never reported Succeeded
    assert got["gpu_idle_pct"] == 100.0  # no phase was ever reported


def test_table_has_every_row_and_the_ratio() -> None:
    a = {"gpu_idle_pct": 40.0, "jobs_per_hour": 100.0, "gpus_shared": 0}
    b = {"gpu_idle_pct": 20.0, "jobs_per_hour": 150.0, "gpus_shared": 3}
    table = metrics.format_table(a, b)
    for _, label in metrics.ROWS:
        assert label in table
    assert "0.50x" in table and "1.50x" in table
    assert metrics.ratio(3, 0) == "-"


def _api_pod(uid: str, **over: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "namespace": "ns",
            "labels": {names.LABEL_JOB: "a", names.LABEL_ROLE: "policy"},
            "annotations": {},
        },
        "spec": {},
        "status": {"phase": "Pending"},
    }
    for key, value in over.items():
        pod[key].update(value)
    return pod


def test_record_reads_bind_claims_phases_and_suspension() -> None:
    run = RunRecord("rlix", {"n0": 8})
    run.submitted("a", 100.0)
    run.observe([_api_pod("u")], [], now=101.0)
    assert run.pods["u"].bound_at is None
    bound = _api_pod(
        "u",
        spec={"nodeName": "n0", "resourceClaims": [{"name": "g", "resourceClaimName": "p-u"}]},
        status={
            "phase": "Running",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:02Z",
                },
            ],
        },
        metadata={
            "annotations": {
                names.ANNOTATION_PHASE: "rollout",
                names.ANNOTATION_PHASE_SINCE: "2026-01-01T00:00:03.500000Z",
                names.ANNOTATION_GPU_INDICES: "7",  # the plan; the allocation wins
                names.ANNOTATION_SUSPENDED: "true",
            }
        },
    )
    claim = {
        "metadata": {"namespace": "ns", "name": "p-u"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": dra.DRIVER, "pool": "n0", "device": "gpu-3"},
                        {"driver": dra.DRIVER, "pool": "n0", "device": "gpu-1"},
                    ]
                }
            }
        },
    }
    run.observe([bound], [claim], now=105.0)
    rec = run.pods["u"]
    assert rec.bound_at == 105.0  # first seen bound (the condition's time has 1 s resolution)
    assert (rec.node, rec.gpus, rec.gpus_from) == ("n0", [1, 3], "claim")
    assert rec.phases == [(epoch("2026-01-01T00:00:03.5Z"), "rollout")]
    assert rec.suspended and rec.suspended_spans == [[105.0, None]]
    run.observe([], [], now=110.0)  # the pod is gone
    assert rec.ended_at == 110.0
    run.close(111.0)
    assert rec.suspended_spans == [[105.0, 111.0]]


def test_baseline_pods_are_plain_whole_gpu_pods_for_the_default_scheduler() -> None:
    job = demo_jobs()[0]
    pods = exclusive.pod_manifests(job, "ns")
    assert len(pods) == sum(r.replicas for r in job.roles)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert "resourceClaims" not in pod["spec"]
        facts = read_pod({**pod, "metadata": {**pod["metadata"], "uid": "x"}})
        assert facts.workload.job == f"ns/{job.name}"
        assert facts.workload.gpus in {r.gpus for r in job.roles}
    assert sum(read_pod({**p, "metadata": {**p["metadata"], "uid": "x"}}).workload.gpus
               for p in pods) == job.gpus  # fmt: skip


def test_queue_order_is_priority_then_submission() -> None:
    jobs = demo_jobs()
    order = [j.name for j in exclusive.queue_order(list(reversed(jobs)))]
    assert order[:5] == ["urgent-eval", "grpo-math", "ppo-chat", "verl-colocated", "agentic-tail"]
    assert order[5:] == ["lab-c", "lab-b", "lab-a"]  # equal priority: submission order kept


def _running(pod: dict[str, Any], node: str = "n0", phase: str = "Running") -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": phase}}


def test_a_baseline_job_starts_only_as_a_whole_gang_and_ends_with_its_trainer() -> None:
    job = demo_jobs()[0]  # policy x1 (trainer), rollout x2
    pods = exclusive.pod_manifests(job, "ns")
    assert not exclusive.gang_bound(job, [_running(pods[0]), _running(pods[1]), pods[2]])
    everyone = [_running(p) for p in pods]
    assert exclusive.gang_bound(job, everyone)
    assert exclusive.job_state(job, everyone) is None
    trainer_done = [_running(pods[0], phase="Succeeded"), *everyone[1:]]
    assert exclusive.job_state(job, trainer_done) == "Succeeded"
    trainer_failed = [_running(pods[0], phase="Failed"), *everyone[1:]]
    assert exclusive.job_state(job, trainer_failed) == "Failed"


def test_results_write_records_table_and_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    base = _two_jobs()
    base.mode = "exclusive"
    found = compare.results([base, _two_jobs()], tmp_path)
    assert found.png == tmp_path / "demo_compare.png"
    assert found.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "demo_compare.png" in (tmp_path / "demo_compare.md").read_text()
    runs = load(tmp_path / "demo_compare.json")
    assert [metrics.compute(r) for r in runs] == [found.exclusive, found.rlix]


@pytest.mark.parametrize(
    ("given", "flags", "said"),
    [
        (None, [], "sharing rules 1-3"),  # --interference none
        (
            "time-slicing",
            ["--interference", "time-slicing", "--no-phase-gate"],
            "built-in time-slicing bound",
        ),
        (MATRIX, ["--interference", str(MATRIX), "--no-phase-gate"], str(MATRIX)),
    ],
)
def test_the_extender_and_the_operator_get_the_demo_rules(
    given: Path | str | None, flags: list[str], said: str
) -> None:
    """The demo starts its components with the chart's flags for the rules it
    names (its node agents run no phase gate: its trainers sleep through their
    phases, so the chart's default gate could only make them wait),
    and says the line those components log."""
    assert components.rules_args(given) == flags
    assert said in sharing_rules(given)
    if given is not None:
        assert "the nodes run no phase gate" in sharing_rules(given)


def test_the_demo_decides_as_the_chart_does_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    monkeypatch.setattr(Demo, "run", lambda self: seen.append(self.o.interference))
    monkeypatch.setattr(demo_cli, "_report_run", lambda summary, args: 0)
    for argv, want in [
        ([], "time-slicing"),
        (["--interference", "none"], None),
        (["--interference", str(MATRIX)], MATRIX),
    ]:
        assert main(["demo", *argv]) == 0
        assert seen.pop() == want


def test_without_matplotlib_the_png_is_skipped_and_said_why_and_the_rules_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline, "missing_reason", lambda: "matplotlib is not installed")
    base = _two_jobs()
    base.mode = "exclusive"
    line = sharing_rules("time-slicing")
    found = compare.results([base, _two_jobs()], tmp_path, line)
    assert found.png is None and found.png_skipped == "matplotlib is not installed"
    assert not (tmp_path / "demo_compare.png").exists()
    page = (tmp_path / "demo_compare.md").read_text()
    assert "matplotlib is not installed" in page
    # The page says which rules RLix decided with.
    assert f"RLix's extender and operator decided with {line}." in page
    assert json.loads((tmp_path / "demo_compare.json").read_text())[0]["mode"] == "exclusive"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "x"], "--out needs --compare"),
        (["--compare", "--jobs", "0"], "--jobs must be 1..8, got 0"),
        (["--jobs", "9"], "--jobs must be 1..8, got 9"),
        (["--interference", "no-such-matrix.json"], "--interference no-such-matrix.json: "),
    ],
)
def test_bad_demo_arguments_are_refused_before_anything_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_pod_waiting_for_its_gang_holds_its_gpus_from_bind(tmp_path: Path) -> None:
    """The device-plugin stand-in gives GPUs at bind; a later pod cannot get the same ones.

    A baseline pod bound before its gang completes starts its process later;
    were its indices chosen only then, the record would show it on GPUs another
    job's pod held meanwhile (two jobs on one GPU, which whole GPUs forbid).
    """
    job = demo_jobs()[0]
    runtime = PodRuntime(tmp_path, {"n0": tmp_path / "s"}, {job.name: job}, {"n0": 8})
    pods = [read_pod({**p, "metadata": {**p["metadata"], "uid": f"u{i}"}, "spec": {
        **p["spec"], "nodeName": "n0"}}).workload
            for i, p in enumerate(exclusive.pod_manifests(job, "ns"))]  # fmt: skip
    first = runtime.reserve("u0", pods[0])
    assert first == [0, 1, 2, 3]
    assert runtime.reserve("u0", pods[0]) == first  # asked again: the same GPUs
    assert runtime.reserve("u1", pods[1]) == [4, 5]
    assert runtime.reserve("u2", pods[2]) == [6, 7]
    runtime.release("u1")
    assert "u1" not in runtime.reserved
    assert runtime.held["n0"] == {0, 1, 2, 3, 6, 7}
