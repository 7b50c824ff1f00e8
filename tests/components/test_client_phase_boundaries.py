"""When a suspend takes effect: at a phase boundary or a safe point, never in
the middle of a phase; and a process that parks late is still recorded."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.client.hooks import CallableHook
from rlix.client.runtime import Runtime
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE
from rlix.core.phases import Phase
from tests.support.agent_fakes import HOST_CGROUP, AgentProcess

UID = "ffffffff-0000-4000-8000-000000000006"


class Harness:
    """This test process is the pod (its runtime's connection) and, for the
    short control connections it opens, the host-side controller."""

    def __init__(self, agent: AgentProcess) -> None:
        self.agent = agent
        self.events: list[str] = []
        agent.put_in_pod(os.getpid(), UID)
        self.rt = Runtime(str(agent.socket))
        self.rt.register(CallableHook("h", self._offload, self._restore))
        # Be identified as the pod before ever flipping to "host" (below): the
        # agent reads the cgroup file when it accepts the connection.
        link = self.rt.link
        assert link is not None and link.connected.wait(20), agent.log_text()
        hello = link.request(proto.OP_HELLO, hooks=["h"]).result(20)
        assert hello.ok and hello.body["pod"] == "t/p", hello

    def _offload(self) -> dict[str, tuple[int, str]]:
        self.events.append("offload")
        return {"x": (1, "c")}

    def _restore(self) -> dict[str, str]:
        self.events.append("restore")
        return {"x": "c"}

    def control(self, op: str, **args: str) -> proto.Reply:
        self.agent.set_cgroup(os.getpid(), HOST_CGROUP)
        try:
            return self.agent.control(op, **args)
        finally:
            self.agent.put_in_pod(os.getpid(), UID)

    def status(self) -> dict[str, dict[str, dict[str, list[str]]]]:
        return dict(self.control(proto.OP_STATUS).body)

    def close(self) -> None:
        assert self.rt.link is not None
        self.rt.link.close()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    with AgentProcess(tmp_path, pods={UID: "t/p"}, suspend_timeout_s=1.0) as agent:
        h = Harness(agent)
        try:
            yield h
        finally:
            h.close()


def test_a_safe_point_lets_a_suspend_happen_inside_a_long_phase(harness: Harness) -> None:
    stop = threading.Event()
    steps: list[int] = []

    def rollout() -> None:
        with harness.rt.phase("rollout"):
            while not stop.is_set():
                harness.rt.safe_point()
                steps.append(len(harness.events))  # events seen when a step ran
                time.sleep(0.01)

    worker = threading.Thread(target=rollout)
    worker.start()
    try:
        assert harness.control(proto.OP_SUSPEND_POD, pod_uid=UID).ok
        assert harness.events == ["offload"]
        seen = len(steps)
        time.sleep(0.3)
        assert len(steps) == seen  # no step runs while parked
        assert harness.control(proto.OP_RESUME_POD, pod_uid=UID).ok
        deadline = time.monotonic() + 5
        while len(steps) == seen:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # No step ever ran with the memory parked.
        assert all(n != 1 for n in steps)
    finally:
        stop.set()
        worker.join(10)


def test_without_a_safe_point_the_suspend_waits_for_the_phase_to_end(harness: Harness) -> None:
    inside = threading.Event()
    leave = threading.Event()

    def training() -> None:
        with harness.rt.phase("training"):
            inside.set()
            leave.wait(10)

    worker = threading.Thread(target=training)
    worker.start()
    try:
        assert inside.wait(5)
        reply = harness.control(proto.OP_SUSPEND_POD, pod_uid=UID)  # agent waits 1 s
        assert reply.error_code == proto.E_FAILED
        assert "parks at its next phase boundary" in (reply.error_message or "")
        assert harness.events == []  # nothing moved mid-phase
        leave.set()
        worker.join(10)
        # The late park is still recorded, so the pod can be resumed.
        deadline = time.monotonic() + 5
        while UID not in harness.status()["suspended"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert harness.events == ["offload"]
        assert harness.control(proto.OP_RESUME_POD, pod_uid=UID).ok
        assert harness.events == ["offload", "restore"]
    finally:
        leave.set()
        worker.join(10)


def test_a_burst_of_phase_switches_cannot_deadlock_the_link(harness: Harness) -> None:
    # Regression: sending under the lock the reader needs deadlocked once the
    # socket buffers filled (the trainer blocked in sendall, the agent blocked
    # sending replies nobody drained).
    done = threading.Event()

    def burst() -> None:
        for i in range(20000):
            with harness.rt.phase("rollout" if i % 2 else "training"):
                pass
        done.set()

    worker = threading.Thread(target=burst, daemon=True)
    worker.start()
    assert done.wait(120), "phase switches stalled"
    assert harness.status()["connected"][UID]  # the link is still up


def test_report_usage_reaches_the_simulated_gpus(harness: Harness) -> None:
    from rlix.client import api

    api._state["runtime"] = harness.rt  # the module-level API, on this connection
    try:
        api.report_usage(gpu=1, memory_mib=2048, utilization=0.25)
        deadline = time.monotonic() + 10
        while True:
            procs: Any = harness.status()["processes"]
            mine = [p for p in procs if p["pid"] == os.getpid()]
            if mine:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # (podUID reads None here: this process is "host" while it asks for status)
        assert [(p["gpu"], p["usedMiB"]) for p in mine] == [(1, 2048)]
    finally:
        del api._state["runtime"]


def _published_phase(harness: Harness, want: str) -> None:
    """Wait until the agent has published ``want`` as the pod's phase (reports
    go without waiting for their answers)."""
    deadline = time.monotonic() + 10
    while harness.agent.published().get(("pod", "t/p"), {}).get(ANNOTATION_PHASE) != want:
        assert time.monotonic() < deadline, harness.agent.published()
        time.sleep(0.05)


def test_the_end_of_a_nested_block_reports_the_enclosing_phase_again(harness: Harness) -> None:
    with harness.rt.phase("training"):
        with harness.rt.phase("weight-sync"):
            _published_phase(harness, "weight-sync")
        assert harness.rt.phase_now is Phase.TRAINING
        _published_phase(harness, "training")  # it trains again, and says so
    assert harness.rt.phase_now is None


def test_with_blocks_open_in_two_threads_the_newest_still_open_is_the_phase(
    harness: Harness,
) -> None:
    rollout_in, rollout_out = threading.Event(), threading.Event()

    def rollout() -> None:
        with harness.rt.phase("rollout"):
            rollout_in.set()
            rollout_out.wait(10)

    worker = threading.Thread(target=rollout)
    worker.start()
    try:
        assert rollout_in.wait(5)
        with harness.rt.phase("scoring"):
            _published_phase(harness, "scoring")
            rollout_out.set()  # the rollout thread's block ends first
            worker.join(10)
            assert harness.rt.phase_now is Phase.SCORING
        # The scoring block ends last: no block is open, and nothing is reported
        # (without the phase gate the last phase stays published, as before).
        assert harness.rt.phase_now is None
    finally:
        rollout_out.set()
        worker.join(10)


def test_a_wait_at_the_gate_that_is_interrupted_opens_no_block(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupted(BaseException):  # as KeyboardInterrupt would, past every handler
        pass

    def interrupted(phase: Phase, **_: object) -> None:
        raise Interrupted

    with harness.rt.phase("rollout"):
        monkeypatch.setattr(harness.rt, "gate_wait_s", 5.0)
        monkeypatch.setattr(harness.rt, "_enter_through_gate", interrupted)
        with pytest.raises(Interrupted), harness.rt.phase("training"):
            pass
        assert harness.rt.phase_now is Phase.ROLLOUT  # still only the rollout block
        monkeypatch.setattr(harness.rt, "gate_wait_s", None)
    assert harness.rt.phase_now is None
