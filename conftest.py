"""Session-wide rule: in CI, only the GPU and kind tiers may skip.

A test that skips because a dependency is missing (torch, ray, ...) would
otherwise turn a broken install into a green run; with CI set, any other skip
fails the session, naming the test and the reason.
"""

from __future__ import annotations

import os

import pytest

ALLOWED = ("gpu", "kind")
_unexpected: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not any(mark in report.keywords for mark in ALLOWED):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") and _unexpected:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["", "In CI only the gpu and kind tiers may skip; these skipped:"]
        lines += [f"  {line}" for line in _unexpected]
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
