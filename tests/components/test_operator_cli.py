"""The rlix-operator entry point teaches its flags."""

from __future__ import annotations

import pytest

from rlix.operator.main import main, parse_args


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
