"""Suspend and resume a real trainer process through a real agent process.

The trainer holds a torch model and an Adam optimizer (CPU tensors standing in
for device memory). A suspend must free their storage, a resume must bring it
back bit for bit, and a SIGKILLed-and-restarted agent must still resume it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_fakes import AgentProcess
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE, ANNOTATION_SUSPENDED
from tests.components.pod_processes import (
    POD,
    UID,
    Trainer,
    connected_trainer,
    pod_process,
    wait_connected,
)

pytest.importorskip("torch")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, pods={UID: POD})
    with a:
        yield a


@pytest.fixture
def trainer(agent: AgentProcess) -> Iterator[Trainer]:
    with connected_trainer(agent) as t:
        yield t


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
    with pod_process(agent, code) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in"
        deadline = time.monotonic() + 20
        while str(proc.pid) not in agent.control(proto.OP_STATUS).body["connected"].get(UID, {}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
        assert reply.error_code == proto.E_FAILED
        assert "registered no offload hooks" in (reply.error_message or "")
        assert "simulated GPUs have no driver" in (reply.error_message or "")


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
    with pod_process(agent, code) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        wait_connected(agent, proc.pid)
        assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
        reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
        assert reply.error_code == proto.E_FAILED
        assert "integrity check failed" in (reply.error_message or "")
        assert "cache/blob" in (reply.error_message or "")
        assert (agent.state_dir / "suspended" / f"{UID}.json").exists()
        assert UID in agent.control(proto.OP_STATUS).body["suspended"]


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
