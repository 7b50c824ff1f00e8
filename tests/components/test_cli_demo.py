"""``rlix demo`` ends a run or a comparison that stops short with one line and an exit code."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest

from rlix.cli.main import main
from rlix.demo.runner import Demo
from rlix.devcluster.toolchain import ToolchainMissingError


@pytest.fixture(autouse=True)
def _sigterm_kept() -> Iterator[None]:
    """The demo makes SIGTERM unwind like Ctrl-C; the test process keeps its own."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _raise(exc: BaseException) -> Callable[[Demo], object]:
    def stop(self: Demo) -> object:
        raise exc

    return stop


@pytest.mark.parametrize("verb", ["run", "compare"])
@pytest.mark.parametrize(
    "stop",
    [
        (RuntimeError("the operator never became ready"), 1, "the operator never became ready"),
        (ToolchainMissingError("no kube-apiserver"), 1, "no kube-apiserver"),
        (KeyboardInterrupt(), 130, "interrupted; everything it started was stopped"),
    ],
)
def test_a_demo_that_stops_short_says_why_in_one_line(
    verb: str,
    stop: tuple[BaseException, int, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    exc, code, line = stop
    monkeypatch.setattr(Demo, verb, _raise(exc))
    argv = ["demo", "--compare"] if verb == "compare" else ["demo"]
    assert main(argv) == code
    out = capsys.readouterr()
    assert out.err == f"rlix demo: {line}\n"
    assert out.out == ""
