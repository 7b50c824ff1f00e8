"""Waiting for a CRD to serve, without kubectl wait's race on a CRD that has no
conditions yet (``rlix.devcluster.cluster.wait_established``). The e2e tier
runs it against the real API server at every operator start; here the answers
are scripted, to show the case the race left out: a CRD read before its
conditions exist is waited for, not failed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from rlix.devcluster.cluster import wait_established


def scripted(*answers: tuple[int, str, str]) -> tuple[list[tuple[str, ...]], Any]:
    asked: list[tuple[str, ...]] = []
    replies: Iterator[tuple[int, str, str]] = iter(answers)
    last = answers[-1]

    def kubectl(*args: str, check: bool = True, **_: Any) -> subprocess.CompletedProcess[str]:
        assert check is False  # the wait reads the answer itself
        asked.append(args)
        rc, out, err = next(replies, last)
        return subprocess.CompletedProcess(["kubectl", *args], rc, out, err)

    return asked, kubectl


def test_a_crd_without_conditions_yet_is_waited_for_until_it_is_established() -> None:
    asked, kubectl = scripted(
        (1, "", 'Error from server (NotFound): customresourcedefinitions "x.rlix.io" not found'),
        (0, "", ""),  # created, no conditions yet: where `kubectl wait` fails at once
        (0, "False", ""),
        (0, "True", ""),
    )
    wait_established(kubectl, "x.rlix.io", timeout_s=10)
    assert len(asked) == 4
    assert asked[0][:2] == ("get", "crd/x.rlix.io")
    assert 'jsonpath={.status.conditions[?(@.type=="Established")].status}' in asked[0]


def test_a_crd_that_never_serves_times_out_saying_what_it_last_read() -> None:
    _, kubectl = scripted((0, "False", ""))
    with pytest.raises(
        TimeoutError, match=r"CRD x\.rlix\.io does not serve after 0 s: Established is False"
    ):
        wait_established(kubectl, "x.rlix.io", timeout_s=0.3)
    _, missing = scripted((1, "", "not found"))
    with pytest.raises(TimeoutError, match="not found"):
        wait_established(missing, "x.rlix.io", timeout_s=0.3)
