"""Which clients say, with a phase report without "wait", the phase they are in
now, and which ask a parking gate to enter while parked."""

from __future__ import annotations

import pytest

from rlix.core import agent_protocol as proto


def test_this_library_says_so() -> None:
    assert proto.reports_phase_now(f"{proto.CLIENT_NAME}/{proto.CLIENT_REVISION}")


@pytest.mark.parametrize(
    "client",
    [None, 2, "", "rlix-python/1", "rlix-python", "rlix-python/x", "other/9", "rlix-python/-3"],
)
def test_older_or_other_clients_do_not(client: object) -> None:
    assert not proto.reports_phase_now(client)


def test_later_revisions_of_this_library_do() -> None:
    assert proto.reports_phase_now("rlix-python/2")
    assert proto.reports_phase_now("rlix-python/17")


def test_only_revision_3_and_later_ask_a_parking_gate_while_parked() -> None:
    assert proto.asks_gate_while_parked(f"{proto.CLIENT_NAME}/{proto.CLIENT_REVISION}")
    assert proto.asks_gate_while_parked("rlix-python/3")
    assert not proto.asks_gate_while_parked("rlix-python/2")
    assert not proto.asks_gate_while_parked(None)
    assert not proto.asks_gate_while_parked("other/9")
