"""Real trainer processes for the agent and client tests: the pod side.

A trainer is a real Python process (``import rlix``) whose PID the test puts
"in a pod" through the agent harness's fake proc tree; everything else (the
socket, peer credentials, the client library) is the real thing.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlix.core import agent_protocol as proto
from tests.support.agent_fakes import AgentProcess
from tests.support.lines import Lines

UID = "dddddddd-0000-4000-8000-000000000004"
POD = "team-a/trainer-0"

TRAINER = Path(__file__).with_name("_pod_trainer.py")


def spawn_in_pod(
    agent: AgentProcess, code: str, *argv: str, uid: str = UID
) -> subprocess.Popen[str]:
    """Start ``python -c code *argv`` and make it a process of pod ``uid``.

    The program reads one line before it talks to the agent; "go" is sent once
    the PID is in the pod, so the agent identifies it as such.
    """
    return _spawn(agent, ["-c", code, *argv], uid)


def _spawn(agent: AgentProcess, args: list[str], uid: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RLIX_AGENT_SOCKET": str(agent.socket)}
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdin is not None
        agent.put_in_pod(proc.pid, uid)
        proc.stdin.write("go\n")
        proc.stdin.flush()
    except BaseException:
        close_process(proc)
        raise
    return proc


def close_process(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


class Trainer:
    def __init__(self, agent: AgentProcess, uid: str) -> None:
        self.proc = _spawn(agent, [str(TRAINER)], uid)
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)
        try:
            self.ready = self.read()
        except BaseException:
            self.close()
            raise
        assert self.ready["event"] == "ready"

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 60.0) -> dict[str, Any]:
        try:
            line = self.lines.readline(timeout)
        except TimeoutError:
            raise TimeoutError("trainer said nothing") from None
        if not line:
            raise EOFError(f"trainer exited with {self.proc.wait()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, cmd: str) -> dict[str, Any]:
        self.say(cmd)
        return self.read()

    def silent_for(self, seconds: float) -> bool:
        return self.lines.silent_for(seconds)

    def close(self) -> None:
        close_process(self.proc)


def wait_connected(agent: AgentProcess, pid: int, timeout: float = 20.0, uid: str = UID) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent.control(proto.OP_STATUS).body
        hooks = status["connected"].get(uid, {}).get(str(pid))
        if hooks:  # connected and announced its hooks
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} never connected: {agent.log_text()}")


@contextlib.contextmanager
def pod_process(
    agent: AgentProcess, code: str, *argv: str, uid: str = UID
) -> Iterator[subprocess.Popen[str]]:
    """``spawn_in_pod`` for a ``with`` block; the process is killed after it."""
    proc = spawn_in_pod(agent, code, *argv, uid=uid)
    try:
        yield proc
    finally:
        close_process(proc)


@contextlib.contextmanager
def connected_trainer(agent: AgentProcess, uid: str = UID) -> Iterator[Trainer]:
    """A trainer that has connected and announced its hooks."""
    t = Trainer(agent, uid)
    try:
        wait_connected(agent, t.proc.pid, uid=uid)
        yield t
    finally:
        t.close()
