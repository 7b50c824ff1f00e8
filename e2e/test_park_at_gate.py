"""Parking at the gate (``--park-at-gate``): two pods whose peaks do not fit one GPU
together take turns with their memory, each parked bit for bit while the other works.

Real control plane; the node agent runs as a process against it, on one of the
session's kwok nodes, with simulated GPUs (the backend's memory follows what
each trainer process reports through the real client library, and refuses a
report that would run the GPU over). The pods declare their peak
(``rlix.io/gpu-memory-mib``), which the agent reads from its listing of the
node's pods. Each trainer keeps a buffer that its offload hook copies to host
memory and clears, and its restore hook copies back; the agent refuses a
restore whose checksums differ, and the trainer prints the buffer's digest
on demand, so "bit for bit" is checked on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.kube import apply, get_json, wait_for
from e2e.kwok_agent import agent_on_kwok_node
from rlix.cli.main import main as rlix_main
from rlix.core import agent_protocol as proto
from rlix.core import names
from rlix.core.suspension import (
    ANNOTATION_DESIRED,
    ANNOTATION_OBSERVED,
    DesiredSuspension,
    ObservedSuspension,
    Outcome,
    State,
)
from tests.components.pod_processes import close_process, spawn_in_pod
from tests.support.agent_fakes import AgentProcess
from tests.support.lines import Lines

MAX_WAIT_S = 3.0  # short: a pod held for memory waits past it, which the test checks

# A trainer: "mem N" reports N MiB on GPU 0 ("ok", or "refused: ..." where the
# simulated GPU has no room for it); "enter P" enters a phase block in a thread and prints "in
# P" once inside, calling safe_point() while it stays; "load" enters rlix.loading()
# the same way ("in loading"); "exit" leaves either ("out"); "digest" prints its
# buffer's digest.
TRAINER = r"""
import hashlib, os, sys, threading, time
import rlix
from rlix.client import api
from rlix.core import agent_protocol as proto
sys.stdin.readline()  # wait until the test has put us in a pod
device = bytearray(os.urandom(1 << 20))  # stands in for the pod's device memory
host = None

def offload():
    global host
    host = bytes(device)
    device[:] = bytes(len(device))  # freed: nothing of it is left behind
    return {"buffer": (len(host), hashlib.sha256(host).hexdigest())}

def restore():
    global host
    device[:] = host
    host = None
    return {"buffer": hashlib.sha256(device).hexdigest()}

rlix.register_offload("state", offload, restore)
rt = api._get()
deadline = time.monotonic() + 60
while not rt.gate_parks and time.monotonic() < deadline:
    time.sleep(0.02)
print(f"ready {rt.gate_parks}", flush=True)
leave = threading.Event()
held = None

def hold(phase):
    with rlix.phase(phase):
        print(f"in {phase}", flush=True)
        while not leave.wait(0.05):
            rlix.safe_point()

def load():
    with rlix.loading():
        print("in loading", flush=True)
        leave.wait()

for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "mem":  # rlix.report_usage's request, answered (it does not wait)
        usage = dict(gpu=0, memory_mib=int(arg), utilization=0.5)
        reply = rt.link.request(proto.OP_USAGE, **usage).result(timeout=30)
        print("ok" if reply.ok else f"refused: {reply.error_message}", flush=True)
    elif cmd == "enter":
        leave.clear()
        held = threading.Thread(target=hold, args=(arg,))
        held.start()
    elif cmd == "load":
        leave.clear()
        held = threading.Thread(target=load)
        held.start()
    elif cmd == "exit":
        leave.set()
        held.join()
        print("out", flush=True)
    elif cmd == "digest":
        print(hashlib.sha256(device).hexdigest(), flush=True)
"""


class Trainer:
    def __init__(self, agent: AgentProcess, uid: str) -> None:
        self.proc = spawn_in_pod(agent, TRAINER, uid=uid)
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)
        assert self.next() == "ready True", agent.log_text()
        self.digest = self.ask("digest")

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def next(self, timeout: float = 30.0) -> str:
        return self.lines.readline(timeout).strip()

    def ask(self, line: str) -> str:
        self.say(line)
        return self.next()

    def quiet_for(self, seconds: float) -> bool:
        return self.lines.silent_for(seconds)


@pytest.fixture
def agent(cluster: Any, tmp_path: Path) -> Iterator[AgentProcess]:
    args = (
        "--phase-gate",
        "--park-at-gate",
        f"--phase-gate-max-wait={MAX_WAIT_S}",
        "--conduct-interval=0.3",
    )
    with agent_on_kwok_node(cluster, tmp_path / "agent", extra_args=args) as a:
        yield a


def _pod(
    cluster: Any,
    namespace: str,
    agent: AgentProcess,
    name: str,
    peak_mib: int,
    *,
    notes: dict[str, str] | None = None,
) -> str:
    apply(
        cluster,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "annotations": {
                    names.ANNOTATION_GPU_MEMORY_MIB: json.dumps(peak_mib),
                    **(notes or {}),
                },
            },
            "spec": {
                "nodeName": agent.node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "main", "image": "example.com/trainer:1"}],
            },
        },
    )
    uid: str = get_json(cluster, "pod", name, "-n", namespace)["metadata"]["uid"]
    return uid


def _status(agent: AgentProcess) -> dict[str, Any]:
    return dict(agent.control(proto.OP_STATUS).body)


def _annotations(cluster: Any, namespace: str, name: str) -> dict[str, str]:
    got: dict[str, str] = get_json(cluster, "pod", name, "-n", namespace)["metadata"].get(
        "annotations", {}
    )
    return got


def _conductor_wants(
    cluster: Any, namespace: str, name: str, generation: int, state: State
) -> ObservedSuspension:
    """Write the conductor's desired suspension on pod ``name``; the agent's report of it."""
    desired = DesiredSuspension(generation, state, "Manual", "user")
    cluster.kubectl(
        "annotate", "--overwrite", "pod", name, "-n", namespace,
        f"{ANNOTATION_DESIRED}={desired.to_json()}",
    )  # fmt: skip

    def observed() -> ObservedSuspension | None:
        raw = _annotations(cluster, namespace, name).get(ANNOTATION_OBSERVED)
        seen = ObservedSuspension.parse(raw) if raw else None
        return seen if seen is not None and seen.generation == generation else None

    return wait_for(f"the agent's report of generation {generation} on {name}", observed)


class Pair:
    """Two trainers on GPU 0 of the agent's node: a holds its peak; b holds its
    weights, its KV cache to come in rollout; each peak is 0.6 of the GPU."""

    def __init__(self, cluster: Any, namespace: str, agent: AgentProcess) -> None:
        labels = get_json(cluster, "node", agent.node)["metadata"]["labels"]
        gpu_mib = int(labels[names.NODE_LABEL_GPU_MEMORY_MIB])
        self.peak, weights = gpu_mib * 6 // 10, gpu_mib // 4  # two peaks: 1.2 GPUs
        self.uid_a = _pod(cluster, namespace, agent, "trainer-a", self.peak)
        self.uid_b = _pod(cluster, namespace, agent, "rollout-b", self.peak)
        self.trainers: list[Trainer] = []
        self.a = self._trainer(agent, self.uid_a)
        self.b = self._trainer(agent, self.uid_b)
        assert self.a.ask(f"mem {self.peak}") == "ok"
        assert self.b.ask(f"mem {weights}") == "ok"
        self.peaks_read(agent)

    def _trainer(self, agent: AgentProcess, uid: str) -> Trainer:
        t = Trainer(agent, uid)
        self.trainers.append(t)
        return t

    def peaks_read(self, agent: AgentProcess) -> None:
        both = {self.uid_a: self.peak, self.uid_b: self.peak}
        wait_for(
            "the gate to read both pods' declared peaks",
            lambda: _status(agent)["phaseGate"]["peaksMiB"] == both,
        )

    def b_goes_in_once_a_is_parked(self, agent: AgentProcess) -> None:
        """b's rollout may grow to its peak, which does not fit beside a: a, idle,
        is parked first, and b goes in and grows into the room a left."""
        self.b.say("enter rollout")
        assert self.b.next() == "in rollout", agent.log_text()
        status = _status(agent)
        assert status["phaseGate"]["gateParked"] == [self.uid_a]
        assert list(status["suspended"]) == [self.uid_a]
        assert self.b.ask(f"mem {self.peak}") == "ok"

    def a_comes_back_bit_for_bit_once_b_is_out(self, agent: AgentProcess) -> None:
        assert self.b.ask("exit") == "out"
        self.a.say("enter training")
        assert self.a.next() == "in training", agent.log_text()
        status = _status(agent)
        assert status["phaseGate"]["gateParked"] == [self.uid_b]
        assert list(status["suspended"]) == [self.uid_b]
        assert self.a.ask("digest") == self.a.digest

    def close(self) -> None:
        for t in self.trainers:
            close_process(t.proc)


@pytest.fixture
def pair(cluster: Any, namespace: str, agent: AgentProcess) -> Iterator[Pair]:
    made = Pair(cluster, namespace, agent)
    try:
        yield made
    finally:
        made.close()


def test_two_pods_whose_peaks_do_not_fit_together_take_turns_with_their_memory(
    cluster: Any, namespace: str, agent: AgentProcess, pair: Pair,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    a, b = pair.a, pair.b
    pair.b_goes_in_once_a_is_parked(agent)
    # A turn, not a suspension: nothing tells the conductor a is suspended.
    assert names.ANNOTATION_SUSPENDED not in _annotations(cluster, namespace, "trainer-a")
    capsys.readouterr()
    assert rlix_main(["agent", f"--socket={agent.socket}", "status"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "trainer-a" in x]
    assert "parked at the phase gate" in line, line

    # a's turn: b, idle now, is parked; a comes back, bit for bit, and goes in.
    pair.a_comes_back_bit_for_bit_once_b_is_out(agent)

    # b asks again while a works: its memory does not fit beside a's peak, so
    # it waits, past the wait's bound too, and goes in when a is out.
    b.say("enter rollout")
    assert b.quiet_for(MAX_WAIT_S + 2.0)
    assert list(_status(agent)["phaseGate"]["waitingS"]) == [pair.uid_b]
    assert a.ask("exit") == "out"
    assert b.next() == "in rollout", agent.log_text()
    assert b.ask("digest") == b.digest
    assert _status(agent)["phaseGate"]["gateParked"] == [pair.uid_a]
    assert names.ANNOTATION_SUSPENDED not in _annotations(cluster, namespace, "rollout-b")
    assert "Traceback" not in agent.log_text()


def test_a_restarted_agent_brings_back_the_pod_its_gate_had_parked(
    agent: AgentProcess, pair: Pair
) -> None:
    """The agent is killed while a is parked at the gate and b works: the
    restarted agent reads a's record (who parked it, what it held), takes it
    back into the line, and brings it back at its turn, bit for bit."""
    pair.b_goes_in_once_a_is_parked(agent)
    agent.kill()  # SIGKILL, as a node agent pod's crash
    agent.start()  # same state dir, as the restarted DaemonSet pod
    both = {pair.uid_a, pair.uid_b}
    wait_for(
        "both trainers to reconnect to the restarted agent",
        lambda: set(_status(agent)["connected"]) == both,
    )
    status = _status(agent)
    assert status["phaseGate"]["gateParked"] == [pair.uid_a], status
    assert list(status["suspended"]) == [pair.uid_a]
    pair.peaks_read(agent)
    # The simulated backend starts empty, where NVML would still show what b
    # holds: b says it again.
    assert pair.b.ask(f"mem {pair.peak}") == "ok"
    # b reconnected inside its rollout block: the gate counts it as working.
    wait_for(
        "b to work again in the restarted gate's view",
        lambda: _status(agent)["phaseGate"]["working"] == {pair.uid_b: ["memory"]},
    )
    pair.a_comes_back_bit_for_bit_once_b_is_out(agent)


def test_a_suspension_wanted_of_a_pod_the_gate_parked_makes_it_one(
    cluster: Any, namespace: str, agent: AgentProcess, pair: Pair
) -> None:
    """The conductor wants a suspended while the gate has it parked for b's
    turn: the agent reports it suspended without parking it twice, publishes it
    as suspended, and the gate no longer brings it back at its turn."""
    pair.b_goes_in_once_a_is_parked(agent)
    seen = _conductor_wants(cluster, namespace, "trainer-a", 1, State.SUSPENDED)
    assert seen.outcome is Outcome.SUSPENDED
    wait_for(
        "trainer-a published as suspended",
        lambda: (
            _annotations(cluster, namespace, "trainer-a").get(names.ANNOTATION_SUSPENDED) == "true"
        ),
    )
    assert _status(agent)["phaseGate"]["gateParked"] == []
    assert pair.b.ask("exit") == "out"
    pair.a.say("enter training")
    assert pair.a.quiet_for(2.0)  # suspended: nothing brings it back but a resume
    assert list(_status(agent)["suspended"]) == [pair.uid_a]


def test_a_resume_the_conductor_wants_waits_for_its_turn_at_the_gate(
    cluster: Any, namespace: str, agent: AgentProcess, pair: Pair
) -> None:
    """The conductor suspends a while it trains, and b goes into rollout and
    grows to its peak. The conductor's resume of a is handed to the gate: a's
    memory stays parked while b works (restored now, it would not fit beside
    b), the pod is no longer published as suspended, and once b is out the
    gate brings a back mid-phase, bit for bit, parking b, idle, to make room."""
    a, b = pair.a, pair.b
    a.say("enter training")
    assert a.next() == "in training", agent.log_text()
    seen = _conductor_wants(cluster, namespace, "trainer-a", 1, State.SUSPENDED)
    assert seen.outcome is Outcome.SUSPENDED, seen
    b.say("enter rollout")
    assert b.next() == "in rollout", agent.log_text()
    assert b.ask(f"mem {pair.peak}") == "ok"

    seen = _conductor_wants(cluster, namespace, "trainer-a", 2, State.RUNNING)
    assert (seen.state, seen.outcome) == (State.RUNNING, Outcome.RESUMED), seen
    assert seen.parked_bytes > 0, seen  # still parked: it comes back at its turn
    wait_for(
        "trainer-a no longer published as suspended",
        lambda: names.ANNOTATION_SUSPENDED not in _annotations(cluster, namespace, "trainer-a"),
    )
    status = _status(agent)
    assert status["phaseGate"]["gateParked"] == [pair.uid_a], status
    assert status["phaseGate"]["gateStopped"] == [pair.uid_a], status
    assert list(status["suspended"]) == [pair.uid_a]

    assert b.ask("exit") == "out"
    wait_for(
        "the gate to bring a back, parking b",
        lambda: list(_status(agent)["suspended"]) == [pair.uid_b],
    )
    assert _status(agent)["phaseGate"]["working"] == {pair.uid_a: ["compute"]}
    assert a.ask("digest") == a.digest
    assert a.ask("exit") == "out"
    assert "Traceback" not in agent.log_text()


def test_a_first_load_waits_for_room_on_the_gpus_the_pod_declares(
    cluster: Any, namespace: str, agent: AgentProcess
) -> None:
    """A pod that holds nothing yet, on GPU 0 by its rlix.io/gpu-indices (as the
    operator writes on a pod whose claim pins its GPUs), loads inside
    rlix.loading(): while a works at its peak there, the load waits (its peak
    does not fit beside a's); once a is out, a, idle, is parked, and the load
    goes in and grows to its peak."""
    gpu_mib = int(
        get_json(cluster, "node", agent.node)["metadata"]["labels"][names.NODE_LABEL_GPU_MEMORY_MIB]
    )
    peak = gpu_mib * 6 // 10  # two peaks: 1.2 GPUs
    uid_a = _pod(cluster, namespace, agent, "trainer-a", peak)
    uid_c = _pod(
        cluster, namespace, agent, "loader-c", peak, notes={names.ANNOTATION_GPU_INDICES: "0"}
    )
    a, c = Trainer(agent, uid_a), Trainer(agent, uid_c)
    try:
        assert a.ask(f"mem {peak}") == "ok"
        wait_for(
            "the gate to read both pods' declared peaks",
            lambda: _status(agent)["phaseGate"]["peaksMiB"] == {uid_a: peak, uid_c: peak},
        )
        a.say("enter training")
        assert a.next() == "in training", agent.log_text()
        c.say("load")
        assert c.quiet_for(MAX_WAIT_S + 2.0)  # past the bound too: memory does not give way
        assert list(_status(agent)["phaseGate"]["waitingS"]) == [uid_c]
        assert a.ask("exit") == "out"
        assert c.next() == "in loading", agent.log_text()
        status = _status(agent)
        assert status["phaseGate"]["gateParked"] == [uid_a], status
        assert c.ask(f"mem {peak}") == "ok"
        assert c.ask("exit") == "out"
        a.say("enter training")  # a's turn: c, idle, is parked, and a comes back whole
        assert a.next() == "in training", agent.log_text()
        assert a.ask("digest") == a.digest
        assert a.ask("exit") == "out"
    finally:
        close_process(a.proc)
        close_process(c.proc)
    assert "Traceback" not in agent.log_text()
