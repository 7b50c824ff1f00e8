"""The agent's MPS supervisor against a stand-in control binary, for real.

No GPU here, so ``nvidia-cuda-mps-control`` is a small script on PATH that
records what it was given; everything around it is the real thing: the
generated command, ``unshare`` with a private mount namespace, the bind of the
node's MPS ``shm/`` over the daemon's /dev/shm, the environment, the restart
after the daemon dies, the node label and the ``quit`` on shutdown. Needs root
(a mount namespace), as the agent does.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlix.agent.mps import MpsSupervisor, MpsUnavailableError
from rlix.core import mps

# The daemon (-f) writes what it sees, then waits for a client's "quit".
FAKE = """#!/usr/bin/env python3
import json, os, sys, time
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
if "-f" in sys.argv:
    seen = {
        "argv": sys.argv[1:],
        "pipe": pipe,
        "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY"),
        "dev_shm": sorted(os.listdir("/dev/shm")),
        "pid": os.getpid(),
    }
    # Written aside and renamed: the test polls for the file and must never read half of it.
    path = os.path.join(pipe, "seen-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as out:
        json.dump(seen, out)
    os.rename(path + ".tmp", path)
    while not os.path.exists(os.path.join(pipe, "quit")):
        time.sleep(0.05)
else:
    if sys.stdin.read().strip() == "quit":
        open(os.path.join(pipe, "quit"), "w").close()
"""


@pytest.fixture
def fake_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    binary = bin_dir / mps.CONTROL_BINARY
    binary.write_text(FAKE)
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return binary


def seen(paths: mps.MpsPaths) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(Path(paths.pipe).glob("seen-*.json"))]


def wait(what: str, probe: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if probe():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Supervised:
    """A supervisor running in its thread, with the labels it set, until ``stop``."""

    def __init__(self, root: Path, restart_s: float) -> None:
        self.labels: list[bool] = []
        self.supervisor = MpsSupervisor(
            mps.MpsPaths(str(root)), label=self.labels.append, restart_s=restart_s
        )
        self.supervisor.prepare()
        (Path(self.supervisor.paths.shm) / "marker").write_text("shared with the clients")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.supervisor.run, args=(self._stop, 0.05))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()


def first_daemon(supervisor: MpsSupervisor, labels: list[bool]) -> dict[str, object]:
    """What the first daemon saw, once it runs and the node is labelled for it."""
    wait("the daemon to start", lambda: seen(supervisor.paths))
    wait("the label", lambda: labels == [True])
    (first,) = seen(supervisor.paths)
    return first


@pytest.fixture
def supervised(fake_binary: Path, tmp_path: Path) -> Iterator[tuple[MpsSupervisor, list[bool]]]:
    run = Supervised(tmp_path / "mps", restart_s=0.1)
    try:
        yield run.supervisor, run.labels
    finally:
        run.stop()


def test_the_daemon_sees_the_nodes_shm_as_its_dev_shm_and_the_node_is_labelled(
    supervised: tuple[MpsSupervisor, list[bool]],
) -> None:
    supervisor, labels = supervised
    first = first_daemon(supervisor, labels)
    assert first["argv"] == ["-f"]
    assert (first["pipe"], first["log"]) == (supervisor.paths.pipe, supervisor.paths.log)
    assert first["dev_shm"] == ["marker"], "the daemon's /dev/shm is the node's MPS shm/"
    assert "marker" not in os.listdir("/dev/shm"), "the bind stayed in the daemon's namespace"
    assert oct(Path(supervisor.paths.shm).stat().st_mode & 0o7777) == "0o1777"


def test_a_dead_daemon_unlabels_the_node_and_is_restarted(
    supervised: tuple[MpsSupervisor, list[bool]],
) -> None:
    supervisor, labels = supervised
    first = first_daemon(supervisor, labels)
    os.kill(int(str(first["pid"])), signal.SIGKILL)
    wait("a second daemon", lambda: len(seen(supervisor.paths)) == 2)
    wait("the label back", lambda: labels == [True, False, True])
    assert supervisor.starts == 2


def test_shutdown_asks_the_daemon_to_quit_and_drops_the_label(
    fake_binary: Path, tmp_path: Path
) -> None:
    run = Supervised(tmp_path / "mps", restart_s=5.0)
    wait("the label", lambda: run.labels == [True])
    run.stop()
    assert run.labels == [True, False]
    assert (Path(run.supervisor.paths.pipe) / "quit").exists(), "asked through the control client"
    assert not run.supervisor.running()


def test_a_node_without_the_control_binary_is_told_so(tmp_path: Path) -> None:
    supervisor = MpsSupervisor(
        mps.MpsPaths(str(tmp_path / "mps")), label=lambda on: None, binary="no-such-mps-control"
    )
    with pytest.raises(MpsUnavailableError, match="no-such-mps-control not found on PATH"):
        supervisor.prepare()
