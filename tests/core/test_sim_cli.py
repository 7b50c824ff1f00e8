"""`rlix simulate`: the table, the JSON and progress on stderr."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from rlix.cli import simulate
from rlix.core.policy.ordering import CLASS_GRACE, DEFAULT_GRACE, STRICT, Grace


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlix")
    simulate.add_parser(parser.add_subparsers())
    return parser.parse_args(["simulate", *argv])


def test_prints_the_claim_shaped_table_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = parse("--mix", "small-lab", "--jobs", "12", "--json", str(out))
    assert args.run(args) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    header = next(line for line in lines if line.startswith("| metric"))
    assert header == (
        "| metric | better | kube-default | gang-binpack | rlix | bound "
        "| rlix/kube-default | rlix/gang-binpack |"
    )
    assert any(line.startswith("| GPU idle % | lower |") for line in lines)
    assert any(line.startswith("| throughput (jobs/h) | higher |") for line in lines)
    assert "events/s" in captured.out
    assert "jobs done" in captured.err or "jobs in" in captured.err  # progress on stderr
    doc = json.loads(out.read_text())
    assert [r["scheduler"] for r in doc["results"]] == ["kube-default", "gang-binpack", "rlix"]
    assert all(r["jobs"] == 12 for r in doc["results"])


def test_one_scheduler_quietly(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--mix", "agentic", "--jobs", "5", "--scheduler", "kube-default", "--quiet")
    assert args.run(args) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "| metric | better | kube-default | bound |" in captured.out


def test_the_grace_shares_reach_the_simulation_and_a_negative_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.core.sim import engine

    seen: list[engine.SimConfig] = []
    real = engine.simulate

    def recording(*a: Any, **kw: Any) -> Any:
        seen.append(a[2])
        return real(*a, **kw)

    monkeypatch.setattr(engine, "simulate", recording)
    strict = parse("--jobs", "3", "--scheduler", "rlix", "--quiet", "--top-grace", "0")
    simulate.run_mix(parse("--jobs", "3", "--scheduler", "rlix", "--quiet"))
    simulate.run_mix(parse("--jobs", "3", "--scheduler", "rlix", "--quiet", "--class-grace", "0",
                           "--top-grace", "0"))  # fmt: skip
    simulate.run_mix(parse("--jobs", "3", "--scheduler", "rlix", "--quiet", "--aging", "2"))
    assert [c.grace for c in seen] == [DEFAULT_GRACE, STRICT, Grace(aging=2.0)]
    assert strict.top_grace == 0.0 and strict.class_grace == CLASS_GRACE
    with pytest.raises(SystemExit):
        parse("--top-grace", "-1")
    assert "'-1' is not a share" in capsys.readouterr().err


def _rlix_disaggregated(capsys: pytest.CaptureFixture[str], jobs: int, rules: str) -> str:
    """`rlix simulate` of the first ``jobs`` disaggregated jobs, RLix alone; its output."""
    args = parse("--mix", "disaggregated", "--jobs", str(jobs), "--scheduler", "rlix",
                 "--quiet", "--rules", rules)  # fmt: skip
    assert args.run(args) == 0
    return capsys.readouterr().out


def test_rules_default_runs_the_cluster_s_rules_and_counts_the_parks_for_memory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The first 20 disaggregated jobs, seed 0: under the cluster's default
    # rules one pair outgrows a GPU and the conductor's rule 3 parks one; with
    # the matrix (the default) rule 6 admits no such pair.
    rows = {}
    for rules in ("default", "matrix"):
        out = _rlix_disaggregated(capsys, 20, rules)
        assert ("the cluster's default rules" in out) == (rules == "default")
        rows[rules] = next(
            line for line in out.splitlines() if line.startswith("| parks for memory")
        )
    assert rows["default"].split("|")[3].strip() not in ("", "0")
    assert rows["matrix"].split("|")[3].strip() == "0"
    with pytest.raises(SystemExit):
        parse("--rules", "none")
    assert "invalid choice: 'none'" in capsys.readouterr().err


def test_rules_time_slicing_decides_with_the_built_in_bound_and_measures_with_the_run_s_matrix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.core.policy.placement.sharing import MEASURED_H200_CELLS, TIME_SLICING_CELLS
    from rlix.core.sim import engine

    seen: list[tuple[Any, Any]] = []
    real = engine.simulate

    def recording(*a: Any, **kw: Any) -> Any:
        seen.append((a[1].policy.rules.interference, a[2].interference.cells))
        return real(*a, **kw)

    monkeypatch.setattr(engine, "simulate", recording)
    for rules in ("time-slicing", "matrix"):
        out = _rlix_disaggregated(capsys, 6, rules)
        assert ("the built-in time-slicing bound" in out) == (rules == "time-slicing")
    assert seen == [
        (TIME_SLICING_CELLS, MEASURED_H200_CELLS),  # decides with the bound, runs as measured
        (MEASURED_H200_CELLS, MEASURED_H200_CELLS),
    ]


def test_park_at_gate_decides_with_rule_6_by_turns_and_needs_a_matrix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.core.sim import engine

    seen: list[tuple[Any, bool]] = []
    real = engine.simulate

    def recording(*a: Any, **kw: Any) -> Any:
        rules = a[1].policy.rules
        seen.append((rules.interference is not None, rules.parks_at_gate))
        return real(*a, **kw)

    monkeypatch.setattr(engine, "simulate", recording)
    args = parse(
        "--mix", "disaggregated", "--jobs", "6", "--scheduler", "rlix", "--quiet",
        "--park-at-gate",
    )  # fmt: skip
    assert args.run(args) == 0
    assert "rlix parks at the gate" in capsys.readouterr().out
    assert seen == [(True, True)]
    refused = parse("--mix", "disaggregated", "--jobs", "6", "--rules", "default", "--park-at-gate")
    assert refused.run(refused) == 2
    assert "--park-at-gate needs rules with an interference matrix" in capsys.readouterr().err


def test_no_phase_gate_decides_and_runs_as_nodes_without_the_gate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlix.core.policy.placement.sharing import MEASURED_H200_CELLS, TIME_SLICING_CELLS
    from rlix.core.sim import engine

    seen: list[tuple[Any, bool, bool]] = []
    real = engine.simulate

    def recording(*a: Any, **kw: Any) -> Any:
        rules = a[1].policy.rules
        seen.append((rules.interference, rules.phase_gate, rules.parks_at_gate))
        return real(*a, **kw)

    monkeypatch.setattr(engine, "simulate", recording)
    for rules in ("time-slicing", "matrix"):
        args = parse(
            "--mix", "disaggregated", "--jobs", "6", "--scheduler", "rlix", "--quiet",
            "--rules", rules, "--no-phase-gate",
        )  # fmt: skip
        assert args.run(args) == 0
        assert "rlix decides for nodes without the phase gate" in capsys.readouterr().out
    assert seen == [
        (TIME_SLICING_CELLS, False, False),
        (MEASURED_H200_CELLS, False, False),
    ]
    for extra, said in (
        (("--rules", "default"), "--no-phase-gate needs rules with an interference matrix"),
        (("--park-at-gate",), "--no-phase-gate and --park-at-gate contradict each other"),
    ):
        refused = parse("--mix", "disaggregated", "--jobs", "6", "--no-phase-gate", *extra)
        assert refused.run(refused) == 2
        assert said in capsys.readouterr().err
