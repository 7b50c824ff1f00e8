"""The Wiretap's record holds every message the client sent once the client has closed.

The race this pins: the client's send returns when its bytes are in the socket,
before the relay thread has read them, so a record read right after the last
send used to miss the tail (a TRL run once reported its phases without the
final ``idle``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.integrations._wiretap import Wiretap

MESSAGES = 3000  # far more than one read of the relay takes in


def _sink(path: Path) -> socket.socket:
    """An upstream that reads and drops everything: the tap needs someone to relay to."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def drain() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(65536):
                pass

    threading.Thread(target=drain, daemon=True).start()
    return server


def test_phases_read_after_close_include_the_last_message_sent(tmp_path: Path) -> None:
    upstream = _sink(tmp_path / "agent.sock")
    tap = Wiretap(str(tmp_path / "agent.sock"), str(tmp_path / "tap.sock"))
    sent = ["rollout", "scoring", "training"] * (MESSAGES // 3) + ["idle"]
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(tap.path)
    lines = (json.dumps({"id": i, "op": "phase", "phase": p}) + "\n" for i, p in enumerate(sent))
    client.sendall("".join(lines).encode())
    client.close()
    try:
        assert tap.phases() == sent
    finally:
        upstream.close()


def test_phases_wait_for_a_connection_the_accept_thread_has_taken_but_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window a loaded CI machine once hit: the accept thread had taken the
    connection off the backlog but not yet counted it, and phases() saw an
    empty backlog and nothing open, and answered []. A slow accept holds that
    window open for a fraction of a second."""

    class SlowAccept(socket.socket):
        def accept(self) -> tuple[socket.socket, object]:
            taken = super().accept()
            time.sleep(0.3)
            return taken

    monkeypatch.setattr(socket, "socket", SlowAccept)
    upstream = _sink(tmp_path / "agent.sock")
    tap = Wiretap(str(tmp_path / "agent.sock"), str(tmp_path / "tap.sock"))
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(tap.path)
    client.sendall(b'{"id": 1, "op": "phase", "phase": "idle"}\n')
    client.close()
    try:
        assert tap.phases() == ["idle"]
    finally:
        upstream.close()


def test_phases_refuse_to_answer_while_the_client_is_still_connected(tmp_path: Path) -> None:
    upstream = _sink(tmp_path / "agent.sock")
    tap = Wiretap(str(tmp_path / "agent.sock"), str(tmp_path / "tap.sock"))
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(tap.path)
    client.sendall(b'{"id": 1, "op": "phase", "phase": "idle"}\n')
    try:
        while not tap.sent:  # until the tap has accepted the connection and read the line
            time.sleep(0.01)
        with pytest.raises(TimeoutError, match=r"rlix\.configure\(None\)"):
            tap.phases(timeout=0.2)
    finally:
        client.close()
        upstream.close()
    assert tap.phases() == ["idle"]
