"""The rlix-operator entry point teaches its flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlix.core.policy.ordering import CLASS_GRACE, STRICT, TOP_GRACE, Grace
from rlix.operator.main import build_runtime, main, parse_args


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


def test_the_admitter_and_the_conductor_queue_by_the_grace_given(tmp_path: Path) -> None:
    # Nothing is contacted while the runtime is built; the server is never called.
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
    args = ["--kubeconfig", str(kubeconfig), "--no-webhook", "--metrics-port", "0"]
    runtime = build_runtime(parse_args([*args, "--top-grace", "0.5", "--class-grace", "0"]))
    assert runtime.admitter.grace == Grace(top=0.5, between=0.0)
    # The conductor reads the admitter's, so both see the same jobs in their grace.
    assert runtime.conductor is not None and runtime.conductor.admitter is runtime.admitter
