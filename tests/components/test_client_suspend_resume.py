"""Suspend and resume a real trainer process through a real agent process.

The trainer holds a torch model and an Adam optimizer (CPU tensors standing in
for device memory). A suspend must free their storage, a resume must bring it
back bit for bit, and a SIGKILLed-and-restarted agent must still resume it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
from tests.support.agent_fakes import AgentProcess
from tests.support.lines import Lines

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
    assert reply.body["parked"] == {str(trainer.proc.pid): "self"}
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


def test_a_wiped_state_dir_resumes_the_process_instead_of_trusting_its_word(
    agent: AgentProcess, trainer: Trainer
) -> None:
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
    agent.kill(signal.SIGKILL)
    for record in (agent.state_dir / "suspended").glob("*.json"):
        record.unlink()  # an operator wiped the hostPath
    agent.start()
    # The trainer's hello says it is parked; with no record of its own, the
    # agent does not adopt that claim (issue 18.7) but resumes the process.
    wait_connected(agent, trainer.proc.pid)
    wait_resumed(trainer, agent)
    assert "no record of suspending it: resuming it" in agent.log_text()
    assert UID not in agent.control(proto.OP_STATUS).body["suspended"]
    wait_unpublished(agent)  # the killed agent had published it suspended
    assert trainer.ask("digest")["digest"] == before
    assert trainer.ask("train")["digest"] != before


def wait_resumed(trainer: Trainer, agent: AgentProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while trainer.ask("connected")["suspended"]:
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)


def wait_unpublished(agent: AgentProcess, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while ANNOTATION_SUSPENDED in agent.published().get(("pod", POD), {}):
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)


# A process that says in its hello that it is parked, though nobody suspended it.
LIAR = r"""
import json, socket, sys
where = sys.argv[2]
sys.stdin.readline()  # wait until the test has put this PID in a pod
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
parked = {"where": where, "entries": [{"name": "w/x", "nbytes": 8, "checksum": "c"}]}
if where == "host":
    parked["size"] = 8
    parked["entries"][0]["offset"] = 0
s.sendall(json.dumps({"v": 1, "id": 1, "op": "hello", "hooks": ["w"], "parked": parked}).encode()
          + b"\n")
for line in s.makefile("rb"):
    msg = json.loads(line)
    if "re" in msg:
        print(json.dumps({"hello": msg}), flush=True)
    elif msg["op"] == "resume":
        s.sendall(json.dumps({"v": 1, "re": msg["id"], "ok": True,
                              "checksums": {"w/x": "c"}}).encode() + b"\n")
        print(json.dumps({"resumed": msg["manifest"]["where"]}), flush=True)
"""


def test_a_process_claiming_to_be_parked_is_resumed_not_recorded(agent: AgentProcess) -> None:
    """Issue 18.7: the agent's own records decide what is published, never a pod's word."""
    with pod_process(agent, LIAR, str(agent.socket), "self") as proc:
        assert proc.stdout is not None
        # The hello's reply and the agent's resume request may come in either order.
        seen = {**json.loads(proc.stdout.readline()), **json.loads(proc.stdout.readline())}
        assert seen["hello"]["ok"] and seen["hello"]["suspended"] is False
        assert seen["resumed"] == "self"
        assert UID not in agent.control(proto.OP_STATUS).body["suspended"]
        assert not list((agent.state_dir / "suspended").glob("*.json"))
    agent.control(proto.OP_STATUS)
    assert ANNOTATION_SUSPENDED not in agent.published().get(("pod", POD), {})


# A process that is slow to be ready for a suspend, in one of two ways, and
# prints each request as it arrives (read while it waits). "late-hello": it
# connects, then says hello (with its hooks) only when the test says "go".
# "parked": it comes back parked (its agent died mid-suspend) and answers the
# agent's resume only when the test says "go".
SLOW_TO_BE_READY = r"""
import json, socket, sys, threading
mode = sys.argv[2]
sys.stdin.readline()  # wait until the test has put this PID in a pod
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
parked = {"where": "self", "entries": [{"name": "w/x", "nbytes": 8, "checksum": "c"}]}
def send(**msg):
    s.sendall(json.dumps({"v": 1, **msg}).encode() + b"\n")
def reply(msg, **body):
    send(re=msg["id"], ok=True, **body)
def resume(msg):
    sys.stdin.readline()  # "go"
    reply(msg, checksums={"w/x": "c"})
if mode == "late-hello":
    print(json.dumps({"connected": True}), flush=True)
    sys.stdin.readline()  # "go"
send(id=1, op="hello", hooks=["w"], parked=parked if mode == "parked" else None)
for line in s.makefile("rb"):
    msg = json.loads(line)
    if "re" in msg:
        continue
    print(json.dumps({"asked": msg["op"]}), flush=True)
    if msg["op"] == "resume":
        threading.Thread(target=resume, args=(msg,)).start()
    elif msg["op"] == "suspend":
        reply(msg, manifest=parked)
"""


@pytest.mark.parametrize("mode", ["late-hello", "parked"])
def test_a_suspend_waits_until_every_process_of_the_pod_is_ready_for_it(
    agent: AgentProcess, mode: str
) -> None:
    """Both happen right after an agent restart. Sent before the hello, the
    suspend would take the process for one without hooks (transparent suspend,
    refused here). Sent before the resume of a process that came back parked is
    answered, it would be answered "parked" and recorded, and the resume would
    then run the process under a record that says it is parked."""
    with pod_process(agent, SLOW_TO_BE_READY, str(agent.socket), mode) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        lines = Lines(proc.stdout)
        first = {"late-hello": {"connected": True}, "parked": {"asked": "resume"}}[mode]
        assert json.loads(lines.readline(60)) == first
        deadline = time.monotonic() + 20
        while str(proc.pid) not in agent.control(proto.OP_STATUS).body["connected"].get(UID, {}):
            assert time.monotonic() < deadline, agent.log_text()
            time.sleep(0.05)
        answers: list[proto.Reply] = []
        suspend = threading.Thread(
            target=lambda: answers.append(agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)),
            daemon=True,
        )
        suspend.start()
        assert lines.silent_for(1.0), f"asked before it was ready: {lines.readline(1)}"
        assert not answers, answers
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert json.loads(lines.readline(60)) == {"asked": "suspend"}
        suspend.join(timeout=30)
        assert answers and answers[0].ok, answers
        status = agent.control(proto.OP_STATUS).body
        assert list(status["suspended"]) == [UID], status


def test_a_process_claiming_the_agent_holds_its_memory_is_refused(agent: AgentProcess) -> None:
    with pod_process(agent, LIAR, str(agent.socket), "host") as proc:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())["hello"]
        assert hello["error"]["code"] == proto.E_CONFLICT
        assert "no record of it and holds no park file" in hello["error"]["message"]
        assert UID not in agent.control(proto.OP_STATUS).body["suspended"]
    assert ANNOTATION_SUSPENDED not in agent.published().get(("pod", POD), {})


# A trainer that sits inside a phase until told to leave it, and says when the
# agent's suspend request has reached it (it can only park after the phase).
IN_PHASE = r"""
import json, sys, threading, time
import rlix
from rlix.client import api

def out(**kw):
    print(json.dumps(kw), flush=True)

sys.stdin.readline()  # wait until the test has put this PID in a pod
state = {"blob": b"x" * 64}
def offload():
    out(event="parked")
    return {"blob": (64, "c64")}
def restore():
    out(event="restored")
    return {"blob": "c64"}
rlix.register_offload("cache", offload, restore)
runtime = api._get()
out(event="ready")
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "enter":
        with rlix.phase("rollout"):
            out(event="in-phase")
            while not runtime._suspend_requested:
                time.sleep(0.01)
            out(event="suspend-requested")
            sys.stdin.readline()  # "leave"
    elif cmd == "state":
        out(event="state", suspended=rlix.suspended(), connected=rlix.agent_connected())
"""


@pytest.mark.parametrize("restart", ["before-the-park", "after-the-park"])
def test_agent_killed_while_a_suspend_waits_for_the_phase_boundary_converges(
    agent: AgentProcess, restart: str
) -> None:
    """Issue 18.6: the park answer is lost with the agent; the restarted agent
    learns the process's state and resumes it, instead of leaving it parked."""
    with pod_process(agent, IN_PHASE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        lines = Lines(proc.stdout)

        def say(line: str) -> None:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()

        def read() -> dict[str, object]:
            try:
                line = lines.readline(60)
            except TimeoutError:
                raise AssertionError(f"the trainer said nothing: {agent.log_text()}") from None
            event: dict[str, object] = json.loads(line)
            return event

        assert read()["event"] == "ready"
        wait_connected(agent, proc.pid)
        say("enter")
        assert read()["event"] == "in-phase"

        def suspend() -> None:
            with contextlib.suppress(OSError, proto.ProtocolError):  # the agent dies under it
                agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, timeout=30)

        waiter = threading.Thread(target=suspend, daemon=True)
        waiter.start()
        assert read()["event"] == "suspend-requested"
        agent.kill(signal.SIGKILL)
        waiter.join(timeout=30)
        if restart == "before-the-park":
            agent.start()
            wait_connected(agent, proc.pid)
            say("leave")  # parks now; its answer is for a connection that is gone
            assert read()["event"] == "parked"
        else:
            say("leave")
            assert read()["event"] == "parked"
            agent.start()
        assert read()["event"] == "restored"
        # "restored" is printed inside the restore hook, before the runtime
        # marks itself resumed: ask until it has (bounded), never just once.
        deadline = time.monotonic() + 30
        while True:
            say("state")
            state = read()
            if not state["suspended"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert state == {"event": "state", "suspended": False, "connected": True}
        assert UID not in agent.control(proto.OP_STATUS).body["suspended"]


class InPhase:
    """The IN_PHASE trainer: lines in, JSON events out."""

    def __init__(self, proc: subprocess.Popen[str], agent: AgentProcess) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.agent = proc, agent
        self.lines = Lines(proc.stdout)

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, object]:
        try:
            line = self.lines.readline(60)
        except TimeoutError:
            raise AssertionError(f"the trainer said nothing: {self.agent.log_text()}") from None
        event: dict[str, object] = json.loads(line)
        return event

    def settled_state(self) -> dict[str, object]:
        """Ask until it says it is resumed (bounded): "restored" precedes the flip."""
        deadline = time.monotonic() + 30
        while True:
            self.say("state")
            state = self.read()
            if not state["suspended"] or time.monotonic() > deadline:
                return state
            time.sleep(0.05)


def resume_while_stopped(agent: AgentProcess, pid: int) -> proto.Reply:
    """Restart the agent and ask a resume while ``pid`` cannot reconnect yet."""
    os.kill(pid, signal.SIGSTOP)
    answers: list[proto.Reply] = []
    try:
        agent.start()
        resume = threading.Thread(
            target=lambda: answers.append(agent.control(proto.OP_RESUME_POD, pod_uid=UID)),
            daemon=True,
        )
        resume.start()
        time.sleep(0.5)  # order only: the resume is asked before the trainer can return
    finally:
        os.kill(pid, signal.SIGCONT)
    resume.join(timeout=60)
    (answer,) = answers
    return answer


@pytest.mark.parametrize("kill", ["mid-suspension", "after-suspension"])
def test_a_controller_that_lost_its_suspend_answer_resumes_through_a_restarted_agent(
    agent: AgentProcess, kill: str
) -> None:
    """Issue 18.6, the chaos run's chaos-072: the agent dies with the suspend answer.

    The controller never learns whether the pod parked, so it resumes it (the
    only safe move for an unknown outcome). It does so as soon as the restarted
    agent answers, before the trainer has reconnected (the trainer is stopped
    meanwhile, so its reconnect backoff cannot win the race). ``mid-suspension``:
    the agent dies while the suspend waits for the phase boundary, so no record
    exists and the trainer parks with nobody listening. ``after-suspension``:
    the record was saved, only the answer was lost. Either way the trainer ends
    resumed, bit for bit, with no record and no park file left.
    """
    record = agent.state_dir / "suspended" / f"{UID}.json"
    with pod_process(agent, IN_PHASE) as proc:
        t = InPhase(proc, agent)
        assert t.read()["event"] == "ready"
        wait_connected(agent, proc.pid)
        t.say("enter")
        assert t.read()["event"] == "in-phase"

        def suspend() -> None:
            with contextlib.suppress(OSError, proto.ProtocolError):  # the agent dies under it
                agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, timeout=30)

        waiter = threading.Thread(target=suspend, daemon=True)
        waiter.start()
        assert t.read()["event"] == "suspend-requested"
        if kill == "mid-suspension":
            agent.kill(signal.SIGKILL)
        t.say("leave")
        assert t.read()["event"] == "parked"
        deadline = time.monotonic() + 30
        while kill == "after-suspension" and not record.exists():
            assert time.monotonic() < deadline, agent.log_text()
            time.sleep(0.02)
        agent.kill(signal.SIGKILL)
        waiter.join(timeout=30)
        answer = resume_while_stopped(agent, proc.pid)
        if kill == "after-suspension":
            assert answer.ok, (answer, agent.log_text())
        else:
            # No record: nothing for the controller to resume; the trainer's own
            # hello tells the agent it parked, and the agent resumes it.
            assert answer.error_code == proto.E_NOT_FOUND, answer
        assert t.read()["event"] == "restored"
        assert t.settled_state() == {"event": "state", "suspended": False, "connected": True}
        status = agent.control(proto.OP_STATUS).body
        assert UID not in status["suspended"], status
        assert not record.exists()
        assert not [p for p in agent.park_dir.rglob("*") if p.is_file()]
