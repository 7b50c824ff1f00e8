"""The rlix-operator entry point teaches its flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rlix.core.policy.ordering import CLASS_GRACE, STRICT, TOP_GRACE, Grace
from rlix.core.policy.placement.sharing import DEFAULT_RULES, SharingRules
from rlix.core.policy.rlix_policy import RLixPolicy
from rlix.operator.handlers import Runtime
from rlix.operator.main import build_runtime, main, parse_args
from rlix.operator.queueing import RLixAdmission

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ("compute", "memory", "network")


def test_help_shows_examples_and_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--kubeconfig", "--webhook-port", "--metrics-port", "--no-webhook"):
        assert flag in text
    assert "crds/rlix.io_rljobs.yaml" in text


def test_defaults_are_cluster_wide_with_the_webhook_on_localhost() -> None:
    args = parse_args([])
    assert args.namespace == [] and not args.no_webhook
    assert (args.webhook_host, args.webhook_port) == ("127.0.0.1", 9443)


def test_the_grace_shares_default_to_the_policys_and_refuse_a_negative(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = parse_args([])
    assert (args.top_grace, args.class_grace) == (TOP_GRACE, CLASS_GRACE)
    strict = parse_args(["--top-grace", "0", "--class-grace", "0"])
    assert Grace(strict.top_grace, strict.class_grace) == STRICT
    with pytest.raises(SystemExit):
        parse_args(["--top-grace", "-1"])
    assert "--top-grace: '-1' is not a share: give a number >= 0" in capsys.readouterr().err
    assert args.aging == 0.0  # aging is off unless asked for
    with pytest.raises(SystemExit):
        parse_args(["--aging", "-2"])
    assert "--aging: '-2' is not a share" in capsys.readouterr().err


def _kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig naming a server nobody calls: building the runtime contacts nothing."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return kubeconfig


def test_the_admitter_and_the_conductor_queue_by_the_grace_given(tmp_path: Path) -> None:
    args = ["--kubeconfig", str(_kubeconfig(tmp_path)), "--no-webhook", "--metrics-port", "0"]
    flags = ["--top-grace", "0.5", "--class-grace", "0", "--aging", "3"]
    runtime = build_runtime(parse_args([*args, *flags]))
    assert runtime.admitter.grace == Grace(top=0.5, between=0.0, aging=3.0)
    # The conductor reads the admitter's, so both see the same jobs in their grace.
    assert runtime.conductor is not None and runtime.conductor.admitter is runtime.admitter


def test_admission_and_the_conductor_decide_sharing_with_the_one_matrix_given(
    tmp_path: Path,
) -> None:
    args = ["--kubeconfig", str(_kubeconfig(tmp_path)), "--no-webhook", "--metrics-port", "0"]

    def rules(runtime: Runtime) -> tuple[SharingRules, SharingRules]:
        assert isinstance(runtime.admitter.policy, RLixAdmission)
        assert runtime.conductor is not None
        assert isinstance(runtime.conductor.policy, RLixPolicy)
        return runtime.admitter.policy.rules, runtime.conductor.policy.rules

    assert rules(build_runtime(parse_args(args))) == (DEFAULT_RULES, DEFAULT_RULES)

    # The H200 measurement, with its MPS table's cells changed: the mode picks the table.
    doc = json.loads((ROOT / "bench/results/gpu_interference.json").read_text())
    doc["mps"] = {"slowdown": {a: {b: 0.25 for b in SHAPES} for a in SHAPES}}
    matrix = tmp_path / "interference.json"
    matrix.write_text(json.dumps(doc))
    given = [*args, "--interference", str(matrix)]
    sliced = rules(build_runtime(parse_args(given)))
    assert sliced == (SharingRules(), SharingRules())  # the shipped cells are that file's
    mps, _ = rules(build_runtime(parse_args([*given, "--interference-mode", "mps"])))
    assert mps.interference is not None and {v for _, _, v in mps.interference} == {0.25}


def test_a_matrix_that_cannot_be_read_stops_the_operator_naming_the_file_and_cell(
    tmp_path: Path,
) -> None:
    args = ["--kubeconfig", str(_kubeconfig(tmp_path)), "--no-webhook", "--metrics-port", "0"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"time_slicing": {"slowdown": {"compute": {}}}}))
    for path, why in ((bad, "time_slicing.slowdown.compute.compute"), (tmp_path / "no", "No such")):
        with pytest.raises(SystemExit) as exit_:
            build_runtime(parse_args([*args, "--interference", str(path)]))
        message = str(exit_.value.code)
        assert message.startswith(f"rlix-operator: --interference {path}: "), message
        assert why in message, message
