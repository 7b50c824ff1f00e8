"""Suspend and resume a real trainer process through a real agent process.

The trainer holds a torch model and an Adam optimizer (CPU tensors standing in
for device memory). A suspend must free their storage, a resume must bring it
back bit for bit, and a SIGKILLed-and-restarted agent must still resume it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.agent.testing import AgentProcess
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE, ANNOTATION_SUSPENDED

pytest.importorskip("torch")

UID = "dddddddd-0000-4000-8000-000000000004"
POD = "team-a/trainer-0"

TRAINER = r"""
import ctypes, hashlib, json, sys
import torch
import rlix

def out(**kw):
    print(json.dumps(kw), flush=True)

def tensors():
    ts = [p for p in model.parameters()] + [p.grad for p in model.parameters()]
    for st in opt.state.values():
        ts += [v for v in st.values() if isinstance(v, torch.Tensor)]
    return ts

def digest():
    h = hashlib.sha256()
    for t in tensors():
        h.update(ctypes.string_at(t.data_ptr(), t.nbytes))
    return h.hexdigest()

def live_bytes():
    return sum(t.untyped_storage().nbytes() for t in tensors())

def step():
    opt.zero_grad()
    model(torch.randn(32, 256, generator=gen)).pow(2).mean().backward()
    opt.step()

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step()  # so the optimizer has state worth parking
sys.stdin.readline()  # wait until the test has put this PID in a pod
rlix.register_torch(modules=[model], optimizers=[opt])
out(event="ready", digest=digest(), live=live_bytes())
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "live":
        out(event="live", live=live_bytes())
    elif cmd == "digest":
        out(event="digest", digest=digest())
    elif cmd == "connected":
        out(event="connected", connected=rlix.agent_connected(), suspended=rlix.suspended())
    elif cmd.startswith("phase "):
        with rlix.phase(cmd.split()[1]):
            out(event="in-phase", digest=digest())
    elif cmd == "train":
        with rlix.phase("training"):
            step()
        out(event="trained", digest=digest())
"""


class Trainer:
    def __init__(self, agent: AgentProcess, uid: str) -> None:
        env = {**os.environ, "RLIX_AGENT_SOCKET": str(agent.socket)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            agent.put_in_pod(self.proc.pid, uid)
            self.say("go")
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
        assert self.proc.stdout is not None
        import select

        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("trainer said nothing")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(f"trainer exited with {self.proc.wait()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, cmd: str) -> dict[str, Any]:
        self.say(cmd)
        return self.read()

    def silent_for(self, seconds: float) -> bool:
        import select

        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], seconds)
        return not ready

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def wait_connected(agent: AgentProcess, pid: int, timeout: float = 20.0, uid: str = UID) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = agent.control(proto.OP_STATUS).body
        hooks = status["connected"].get(uid, {}).get(str(pid))
        if hooks:  # connected and announced its hooks
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} never connected: {agent.log_text()}")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, pods={UID: POD})
    with a:
        yield a


@pytest.fixture
def trainer(agent: AgentProcess) -> Iterator[Trainer]:
    t = Trainer(agent, UID)
    try:
        wait_connected(agent, t.proc.pid)
        yield t
    finally:
        t.close()


def test_suspend_frees_and_resume_restores_bit_for_bit(
    agent: AgentProcess, trainer: Trainer
) -> None:
    before = trainer.ready["digest"]
    assert trainer.ready["live"] > 400_000  # weights + grads + two Adam moments

    reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
    assert reply.ok, reply
    assert reply.body["parked"] == {str(trainer.proc.pid): "host"}
    assert trainer.ask("live")["live"] == 0  # the storage really is gone
    assert trainer.ask("connected")["suspended"] is True
    record = agent.state_dir / "suspended" / f"{UID}.json"
    assert record.exists()

    reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
    assert reply.ok, reply
    assert reply.body["resumed"] == [trainer.proc.pid]
    assert trainer.ask("live")["live"] == trainer.ready["live"]
    assert trainer.ask("digest")["digest"] == before
    assert not record.exists()
    # Training goes on from exactly where it was.
    assert trainer.ask("train")["digest"] != before


def test_suspend_waits_for_the_phase_boundary_and_phases_wait_for_resume(
    agent: AgentProcess, trainer: Trainer
) -> None:
    assert trainer.ask("phase rollout")["event"] == "in-phase"
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
    # While suspended, the next phase block does not start...
    trainer.say("train")
    assert trainer.silent_for(0.5)
    published = agent.published()[("pod", POD)]
    assert published[ANNOTATION_SUSPENDED] == "true"
    assert published[ANNOTATION_PHASE] == "rollout"
    # ... and starts once resumed, on the restored tensors.
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
    assert trainer.read()["event"] == "trained"
    deadline = time.monotonic() + 10
    while ANNOTATION_SUSPENDED in agent.published()[("pod", POD)]:
        assert time.monotonic() < deadline, "suspended annotation never cleared"
        time.sleep(0.05)
    assert agent.published()[("pod", POD)][ANNOTATION_PHASE] == "training"


def test_agent_sigkilled_while_suspended_still_resumes(
    agent: AgentProcess, trainer: Trainer
) -> None:
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
    agent.kill(signal.SIGKILL)
    # The trainer keeps its parked copy; it is still suspended, not crashed.
    assert trainer.ask("live")["live"] == 0
    agent.start()
    status = agent.control(proto.OP_STATUS).body
    assert str(trainer.proc.pid) in status["suspended"][UID]
    wait_connected(agent, trainer.proc.pid)
    reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
    assert reply.ok, (reply, agent.log_text())
    assert trainer.ask("digest")["digest"] == before


def test_suspending_twice_is_a_conflict(agent: AgentProcess, trainer: Trainer) -> None:
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
    again = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
    assert again.error_code == proto.E_CONFLICT
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok


def test_a_process_without_hooks_is_refused_clearly_on_a_simulated_node(
    agent: AgentProcess,
) -> None:
    code = (
        "import sys, rlix; sys.stdin.readline(); rlix.phase('rollout').__enter__(); "
        "print('in', flush=True); sys.stdin.readline()"
    )
    env = {**os.environ, "RLIX_AGENT_SOCKET": str(agent.socket)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        agent.put_in_pod(proc.pid, UID)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "in"
        deadline = time.monotonic() + 20
        while str(proc.pid) not in agent.control(proto.OP_STATUS).body["connected"].get(UID, {}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
        assert reply.error_code == proto.E_FAILED
        assert "registered no offload hooks" in (reply.error_message or "")
        assert "simulated GPUs have no driver" in (reply.error_message or "")
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_a_restore_that_is_not_bit_for_bit_is_refused_and_the_record_kept(
    agent: AgentProcess,
) -> None:
    code = (
        "import sys, rlix\n"
        "sys.stdin.readline()\n"
        "rlix.register_offload('cache', lambda: {'blob': (4, 'ws64:good')},\n"
        "                      lambda: {'blob': 'ws64:corrupted'})\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    env = {**os.environ, "RLIX_AGENT_SOCKET": str(agent.socket)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        agent.put_in_pod(proc.pid, UID)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ready"
        wait_connected(agent, proc.pid)
        assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
        reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
        assert reply.error_code == proto.E_FAILED
        assert "integrity check failed" in (reply.error_message or "")
        assert "cache/blob" in (reply.error_message or "")
        assert (agent.state_dir / "suspended" / f"{UID}.json").exists()
        assert UID in agent.control(proto.OP_STATUS).body["suspended"]
    finally:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def test_a_wiped_state_dir_adopts_what_the_client_says_it_parked(
    agent: AgentProcess, trainer: Trainer
) -> None:
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
    agent.kill(signal.SIGKILL)
    for record in (agent.state_dir / "suspended").glob("*.json"):
        record.unlink()  # an operator wiped the hostPath
    agent.start()
    # The trainer may reconnect before our first status query, so "not known yet"
    # cannot be observed reliably; the log line proves the record came from the
    # client (the state dir was wiped), and the resume proves it was right.
    wait_connected(agent, trainer.proc.pid)
    deadline = time.monotonic() + 10
    while UID not in agent.control(proto.OP_STATUS).body["suspended"]:
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)
    assert "adopting parked state" in agent.log_text()
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
    assert trainer.ask("digest")["digest"] == before
