"""The phase gate on a real agent process (``--phase-gate``), with real trainer
processes using the client library: who waits, who goes in, and when.

Each "pod" is a real process put in a pod by the harness's proc tree; it
reports its memory on a simulated GPU (so the agent knows which GPUs it
holds) and enters ``with rlix.phase(...)`` blocks on the test's command. The
agent decides with the H200 matrix the simulator ships: two busy kernels on one
GPU make less than one GPU's progress, a copy beside a kernel more.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from rlix.agent.main import main
from rlix.cli.main import main as rlix_main
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE, ANNOTATION_WAITING_FOR_TURN
from rlix.core.phases import Phase
from rlix.devcluster.processes import free_ports
from tests.components.pod_processes import wait_connected
from tests.support.agent_fakes import AgentProcess

UID_A = "aaaaaaaa-0000-4000-8000-00000000000a"
UID_B = "bbbbbbbb-0000-4000-8000-00000000000b"
UID_C = "cccccccc-0000-4000-8000-00000000000c"
PODS = {UID_A: "team-a/trainer-0", UID_B: "team-b/trainer-0", UID_C: "team-c/trainer-0"}
MAX_WAIT_S = 4.0

# A trainer: "gpu N" reports 1 GiB on GPU N; "enter P" enters a phase block in
# a thread and prints "in P" once inside, calling safe_point() while it stays;
# "enter P Q" also runs a block of Q nested in it first and prints "back P"
# once that has ended; "exit" leaves it (the outermost block: the client tells
# the gate it is idle).
TRAINER = r"""
import sys, threading, time
import rlix
from rlix.client import api
sys.stdin.readline()  # wait until the test has put us in a pod
rt = api._get()
rlix.register_offload("state", lambda: {"x": (1, "c")}, lambda: {"x": "c"})
deadline = time.monotonic() + 20
while rt.gate_wait_s is None and time.monotonic() < deadline:
    time.sleep(0.02)
print(f"ready {rt.gate_wait_s}", flush=True)
leave = threading.Event()
held = None

def hold(phase, inner=None):
    with rlix.phase(phase):
        print(f"in {phase}", flush=True)
        if inner:
            with rlix.phase(inner):
                print(f"in {inner}", flush=True)
            print(f"back {phase}", flush=True)
        while not leave.wait(0.05):
            rlix.safe_point()  # a long phase's batches: a suspend can land mid-phase

for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "gpu":
        rlix.report_usage(gpu=int(arg), memory_mib=1024, utilization=0.5)
        print("ok", flush=True)
    elif cmd == "enter":
        leave.clear()
        held = threading.Thread(target=hold, args=tuple(arg.split()))
        held.start()
    elif cmd == "exit":
        leave.set()
        held.join()
        print("out", flush=True)
"""


class Trainer:
    def __init__(self, agent: AgentProcess, uid: str, gpu: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"RLIX_AGENT_SOCKET": str(agent.socket), "PATH": "/usr/bin:/bin"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        agent.put_in_pod(self.proc.pid, uid)
        self.say("go")
        assert self.next() == f"ready {MAX_WAIT_S}", agent.log_text()
        self.say(f"gpu {gpu}")
        assert self.next() == "ok"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def next(self, timeout: float = 20.0) -> str:
        return self.lines.get(timeout=timeout)

    def nothing_for(self, seconds: float) -> bool:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"expected no output, got {line!r}")

    def enter(self, phase: str) -> None:
        self.say(f"enter {phase}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    args = ("--phase-gate", f"--phase-gate-max-wait={MAX_WAIT_S}")
    port = free_ports(1)[0]
    with AgentProcess(tmp_path, pods=PODS, sim_gpus=2, metrics_port=port, extra_args=args) as a:
        yield a


@pytest.fixture
def trainers(agent: AgentProcess) -> Iterator[list[Trainer]]:
    made: list[Trainer] = []
    yield made
    for t in made:
        t.close()


def _gate(agent: AgentProcess) -> dict[str, object]:
    doc = agent.control(proto.OP_STATUS).body["phaseGate"]
    assert isinstance(doc, dict)
    return doc


def _published_when(
    agent: AgentProcess, uid: str, ready: Callable[[dict[str, str]], bool]
) -> dict[str, str]:
    """The pod's published annotations once ``ready`` holds of them (the
    publisher gathers for a moment before it writes)."""
    deadline = time.monotonic() + 10
    while True:
        notes = agent.published().get(("pod", PODS[uid]), {})
        if ready(notes) or time.monotonic() > deadline:
            return notes
        time.sleep(0.05)


def _b_waits_for_a(
    agent: AgentProcess, trainers: list[Trainer], a_phase: str, b_phase: str, quiet_s: float
) -> tuple[Trainer, Trainer]:
    """Two trainers on GPU 0: a enters ``a_phase`` and is in; b asks for ``b_phase``
    and says nothing for ``quiet_s`` (it waits at the gate)."""
    a, b = Trainer(agent, UID_A, gpu=0), Trainer(agent, UID_B, gpu=0)
    trainers += [a, b]
    a.enter(a_phase)
    assert a.next() == f"in {a_phase}"
    b.enter(b_phase)
    assert b.nothing_for(quiet_s)
    return a, b


def test_a_busy_phase_waits_for_its_gpu_neighbour_to_leave_its_own(
    agent: AgentProcess, trainers: list[Trainer], capsys: pytest.CaptureFixture[str]
) -> None:
    # Two busy kernels on one GPU: b waits.
    a, b = _b_waits_for_a(agent, trainers, "training", "rollout", 1.0)
    gate = _gate(agent)
    assert gate["working"] == {UID_A: ["compute"]}
    assert list(gate["waitingS"]) == [UID_B]  # type: ignore[call-overload]
    # Its phase is published when it goes in, not while it waits; the pod says
    # what it waits for.
    waiting = agent.published().get(("pod", PODS[UID_B]), {})
    assert waiting.get(ANNOTATION_PHASE) is None
    assert waiting.get(ANNOTATION_WAITING_FOR_TURN) == "rollout"
    # a went in at once: no mark is left on it.
    assert ANNOTATION_WAITING_FOR_TURN not in agent.published()[("pod", PODS[UID_A])]
    assert 'rlix_agent_phase_gate_waiting{node="node-a"} 1.0' in agent.metrics()
    capsys.readouterr()
    assert rlix_main(["agent", f"--socket={agent.socket}", "status"]) == 0
    shown = capsys.readouterr().out
    assert "phase gate on" in shown and f"(a wait lasts at most {MAX_WAIT_S:g} s)" in shown
    (line,) = [x for x in shown.splitlines() if x.startswith(PODS[UID_B])]
    assert "waiting at the phase gate" in line
    a.say("exit")
    assert a.next() == "out"
    assert b.next() == "in rollout"
    assert _gate(agent)["working"] == {UID_B: ["memory"]}
    notes = _published_when(agent, UID_B, lambda n: n.get(ANNOTATION_PHASE) == "rollout")
    assert ANNOTATION_WAITING_FOR_TURN not in notes  # the mark went with the phase
    metrics = agent.metrics()
    assert 'rlix_agent_phase_gate_wait_seconds_count{node="node-a",outcome="turn"} 1.0' in metrics
    assert 'rlix_agent_phase_gate_waiting{node="node-a"} 0.0' in metrics


def test_pods_on_other_gpus_and_copies_beside_kernels_go_in_at_once(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    a, b, c = (Trainer(agent, UID_A, 0), Trainer(agent, UID_B, 1), Trainer(agent, UID_C, 0))
    trainers += [a, b, c]
    a.enter("training")
    assert a.next() == "in training"
    b.enter("training")  # GPU 1: nobody there
    assert b.next() == "in training"
    c.enter("weight-sync")  # a copy beside a GEMM gains
    assert c.next() == "in weight-sync"


def test_a_wait_ends_at_its_bound_beside_a_neighbour_that_never_leaves(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    _, b = _b_waits_for_a(agent, trainers, "training", "scoring", 1.0)
    assert b.next(timeout=MAX_WAIT_S + 20) == "in scoring"
    assert _gate(agent)["working"] == {UID_A: ["compute"], UID_B: ["compute"]}
    metrics = agent.metrics()
    assert 'rlix_agent_phase_gate_wait_seconds_count{node="node-a",outcome="bound"} 1.0' in metrics
    assert 'outcome="turn"' not in metrics


def test_a_neighbour_that_exits_frees_the_gpu(agent: AgentProcess, trainers: list[Trainer]) -> None:
    a, b = _b_waits_for_a(agent, trainers, "rollout", "rollout", 0.5)
    a.close()
    assert b.next() == "in rollout"


def test_a_process_that_leaves_while_it_waits_takes_its_mark_with_it(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    _, b = _b_waits_for_a(agent, trainers, "training", "training", 0.5)
    notes = _published_when(agent, UID_B, lambda n: ANNOTATION_WAITING_FOR_TURN in n)
    assert notes.get(ANNOTATION_WAITING_FOR_TURN) == "training"
    b.close()
    notes = _published_when(agent, UID_B, lambda n: ANNOTATION_WAITING_FOR_TURN not in n)
    assert ANNOTATION_WAITING_FOR_TURN not in notes, notes


def test_a_process_waiting_at_the_gate_can_be_suspended_and_resumed(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    _, b = _b_waits_for_a(agent, trainers, "training", "training", 0.5)
    # Waiting at the gate is a phase boundary: the suspend does not wait for the gate.
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID_B, timeout=20).ok
    gate = _gate(agent)
    assert gate["waitingS"] == {} and gate["working"] == {UID_A: ["compute"]}
    assert b.nothing_for(0.5)  # parked: it enters nothing until resumed
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID_B, timeout=20).ok
    assert b.next() == "in training"


def test_a_pod_suspended_mid_phase_works_again_once_resumed(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    """a is parked in the middle of its training (at a safe point) and resumed:
    it carries on in training without a new phase report, and the gate counts
    it as working again, so b's training waits for it as it would have."""
    a = Trainer(agent, UID_A, gpu=0)
    trainers.append(a)
    a.enter("training")
    assert a.next() == "in training"
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID_A, timeout=20).ok
    assert _gate(agent)["working"] == {}  # parked: it holds no GPU
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID_A, timeout=20).ok
    assert _gate(agent)["working"] == {UID_A: ["compute"]}
    _b_trains_once_a_is_out(agent, trainers, a)


def _until(agent: AgentProcess, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, (agent.published(), _gate(agent), agent.log_text())
        time.sleep(0.05)


def _b_trains_once_a_is_out(agent: AgentProcess, trainers: list[Trainer], a: Trainer) -> None:
    """b, on a's GPU, asks to train while a trains: it waits, and goes in once a is out."""
    b = Trainer(agent, UID_B, gpu=0)
    trainers.append(b)
    b.enter("training")
    assert b.nothing_for(0.5)
    a.say("exit")
    assert a.next() == "out"
    assert b.next() == "in training"


def test_a_nested_block_s_end_puts_the_process_back_in_the_enclosing_phase(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    """a trains with a weight sync nested in its training block. When the sync
    ends a is training again: its phase annotation says so, the gate counts it
    as working in a compute phase, and b's training waits for it (before, the
    agent kept a in weight-sync, a copy, and let b in beside a GEMM)."""
    a = Trainer(agent, UID_A, gpu=0)
    trainers.append(a)
    a.enter("training weight-sync")
    assert [a.next(), a.next(), a.next()] == ["in training", "in weight-sync", "back training"]

    def back_in_training() -> bool:
        phase = agent.published().get(("pod", PODS[UID_A]), {}).get(ANNOTATION_PHASE)
        return phase == "training" and _gate(agent)["working"] == {UID_A: ["compute"]}

    _until(agent, back_in_training)  # the report is sent without waiting for its answer
    _b_trains_once_a_is_out(agent, trainers, a)


def test_a_restarted_agent_follows_a_process_that_reconnects_mid_phase(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    """The agent is killed while a trains. a reconnects to the new agent from
    inside its training block and says so (its hello names a client that
    reports its phase now); the new gate counts it as working, so b's training
    waits for it, as it would have before the restart."""
    a = Trainer(agent, UID_A, gpu=0)
    trainers.append(a)
    a.enter("training")
    assert a.next() == "in training"
    agent.kill(signal.SIGKILL)
    agent.start()
    wait_connected(agent, a.proc.pid, uid=UID_A)
    a.say("gpu 0")  # the simulated GPU forgot its memory with the old agent
    assert a.next() == "ok"
    _until(agent, lambda: _gate(agent)["working"] == {UID_A: ["compute"]})
    _b_trains_once_a_is_out(agent, trainers, a)


def test_a_mark_a_killed_agent_left_goes_with_the_pods_next_phase(
    agent: AgentProcess, trainers: list[Trainer]
) -> None:
    """b waits at the gate when the agent is killed: its mark stays on the pod
    until the new agent publishes b's next phase, which removes it."""
    _, b = _b_waits_for_a(agent, trainers, "training", "training", 0.5)
    notes = _published_when(agent, UID_B, lambda n: ANNOTATION_WAITING_FOR_TURN in n)
    assert notes.get(ANNOTATION_WAITING_FOR_TURN) == "training"
    agent.kill(signal.SIGKILL)
    agent.start()
    wait_connected(agent, b.proc.pid, uid=UID_B)
    notes = _published_when(agent, UID_B, lambda n: ANNOTATION_WAITING_FOR_TURN not in n)
    assert ANNOTATION_WAITING_FOR_TURN not in notes, notes
    assert notes.get(ANNOTATION_PHASE) == "training", notes


# A process that, once the test has put it in a pod, sends each line of its
# input to the agent on one connection and prints each reply.
_LINES = r"""
import socket, sys
lines = sys.stdin.readlines()  # the test has put us in a pod by then
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); r = s.makefile("rb")
for line in lines:
    s.sendall(line.encode()); print(r.readline().decode().strip(), flush=True)
"""


def _as_pod(agent: AgentProcess, uid: str, *requests: bytes) -> list[proto.Reply]:
    with subprocess.Popen(
        [sys.executable, "-c", _LINES, str(agent.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        agent.put_in_pod(proc.pid, uid)
        out, _ = proc.communicate(b"".join(requests).decode(), timeout=20)
    replies = [proto.decode(line.encode()) for line in out.strip().splitlines()]
    assert all(isinstance(r, proto.Reply) for r in replies), out
    return replies  # type: ignore[return-value]


def test_a_bad_wait_field_is_refused_by_name(agent: AgentProcess) -> None:
    # From a host process the phase op is refused before its fields are read;
    # a pod's report goes through the field check.
    line = proto.encode_request(1, proto.OP_PHASE, phase="rollout", wait="yes")
    (reply,) = _as_pod(agent, UID_A, line)
    assert not reply.ok
    assert reply.error_code == proto.E_BAD_FIELD and "'wait'" in (reply.error_message or "")


def test_a_bad_safe_points_field_is_refused_by_name(agent: AgentProcess) -> None:
    line = proto.encode_request(1, proto.OP_PHASE, phase="training", wait=True, safe_points=1)
    (reply,) = _as_pod(agent, UID_A, line)
    assert not reply.ok
    assert reply.error_code == proto.E_BAD_FIELD and "'safe_points'" in (reply.error_message or "")


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"phase": "weight-sync", "loading": "yes"}, "'loading' must be true or false"),
     ({"phase": "training", "loading": True}, "'loading' goes with weight-sync")],
    ids=["not-a-bool", "not-a-sync"],
)  # fmt: skip
def test_a_bad_loading_field_is_refused_by_name(
    agent: AgentProcess, fields: dict[str, object], named: str
) -> None:
    line = proto.encode_request(1, proto.OP_PHASE, wait=True, **fields)
    (reply,) = _as_pod(agent, UID_A, line)
    assert not reply.ok
    assert reply.error_code == proto.E_BAD_FIELD and named in (reply.error_message or "")


@pytest.mark.parametrize(
    ("gate", "stops"),
    [({"maxWaitS": 30, "parksAtGate": True, "stopsAtSafePoints": True}, True),
     ({"maxWaitS": 30, "parksAtGate": True}, False),
     ({"maxWaitS": 30, "stopsAtSafePoints": True}, False)],
    ids=["says-so", "older-agent", "no-parking"],
)  # fmt: skip
def test_the_client_says_it_stops_at_safe_points_only_to_an_agent_that_takes_it(
    gate: dict[str, object], stops: bool
) -> None:
    # An older agent refuses a field it does not know: the client sends
    # "safe_points" only where the hello's reply says the agent takes it.
    from rlix.client.runtime import Runtime

    sent: list[dict[str, object]] = []

    class Link:
        def request(self, op: str, **args: object) -> Future[proto.Reply]:
            sent.append(args)
            done: Future[proto.Reply] = Future()
            done.set_result(proto.Reply(re=1, ok=True, body={}))
            return done

    rt = Runtime(None)
    rt._greeted(proto.OP_HELLO, proto.Reply(re=1, ok=True, body={"phaseGate": gate}))
    assert rt.gate_stops is stops
    rt.link = Link()  # type: ignore[assignment]
    rt._enter_through_gate(Phase.TRAINING, safe_points=True)
    rt._enter_through_gate(Phase.ROLLOUT)
    assert sent == [
        {"phase": "training", "wait": True, **({"safe_points": True} if stops else {})},
        {"phase": "rollout", "wait": True},
    ]


class RecordingLink:
    """What a Runtime sends, each request answered ok at once; connected."""

    def __init__(self) -> None:
        self.connected = threading.Event()
        self.connected.set()
        self.sent: list[tuple[str, dict[str, object]]] = []

    def request(self, op: str, **args: object) -> Future[proto.Reply]:
        self.sent.append((op, args))
        done: Future[proto.Reply] = Future()
        done.set_result(proto.Reply(re=1, ok=True, body={}))
        return done

    def notify(self, op: str, **args: object) -> None:
        self.request(op, **args)


@pytest.mark.parametrize("answered", [True, False], ids=["hello-answered", "no-answer"])
def test_the_first_phase_block_waits_for_the_hello_reply_to_know_the_gate(
    answered: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A load opened before the agent's answer to the hello would go in without
    # asking the gate (into memory a partner holds): the first block waits for
    # that answer, bounded, and then asks the gate. An agent that never
    # answers costs the wait's bound once, and the block goes in as without
    # a gate.
    from rlix.client import runtime

    monkeypatch.setattr(runtime, "GREETING_WAIT_S", 0.5)
    rt = runtime.Runtime(None)
    link = RecordingLink()
    rt.link = link  # type: ignore[assignment]
    gate = {"maxWaitS": 30, "parksAtGate": True, "takesLoading": True}
    reply = proto.Reply(re=1, ok=True, body={"phaseGate": gate})
    if answered:
        threading.Timer(0.2, rt._greeted, args=(proto.OP_HELLO, reply)).start()
    with rt.loading() as phase:
        assert phase is Phase.WEIGHT_SYNC
    first = link.sent[0]
    if answered:  # and it says it is a load, which this agent takes
        assert first == (proto.OP_PHASE, {"phase": "weight-sync", "wait": True, "loading": True})
    else:
        assert first == (proto.OP_PHASE, {"phase": "weight-sync"})
    link.sent.clear()
    rt._greeted(proto.OP_HELLO, reply)
    with rt.phase("training"):  # later blocks do not wait for anything more
        pass
    assert link.sent[0] == (proto.OP_PHASE, {"phase": "training", "wait": True})
    # An older agent refuses a field it does not know: "loading" goes only
    # where the hello's reply says it is taken.
    link.sent.clear()
    older = {"maxWaitS": 30, "parksAtGate": True}
    rt._greeted(proto.OP_HELLO, proto.Reply(re=1, ok=True, body={"phaseGate": older}))
    with rt.loading():
        pass
    assert link.sent[0] == (proto.OP_PHASE, {"phase": "weight-sync", "wait": True})


def test_without_the_gate_the_hello_says_so_and_a_wait_is_answered_at_once(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path, pods=PODS) as agent:
        assert agent.control(proto.OP_STATUS).body["phaseGate"] is None
        hello, phase = _as_pod(
            agent,
            UID_A,
            proto.encode_request(1, proto.OP_HELLO, hooks=[]),
            proto.encode_request(2, proto.OP_PHASE, phase="training", wait=True),
        )
    assert hello.ok and hello.body["phaseGate"] is None
    assert phase.ok and "since" in phase.body


def test_the_matrix_needs_the_gate_and_a_bad_one_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = ["--no-kube", "--backend=simulated", "--node-name=n", f"--state-dir={tmp_path}"]
    matrix = tmp_path / "m.json"
    matrix.write_text('{"time_slicing": {"slowdown": {"compute": {}}}}')
    assert main([*base, f"--interference={matrix}"]) == 2
    assert "give --phase-gate too" in capsys.readouterr().err
    assert main([*base, "--phase-gate", "--phase-gate-max-wait=0"]) == 2
    assert "--phase-gate-max-wait must be > 0" in capsys.readouterr().err
    assert main([*base, "--park-at-gate"]) == 2
    assert "--park-at-gate parks for the phase gate's turns: give --phase-gate too" in (
        capsys.readouterr().err
    )
    socket_path = tmp_path / "s.sock"
    code = main([*base, f"--socket={socket_path}", "--phase-gate", f"--interference={matrix}"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--interference {matrix}" in err and "compute.compute" in err


@pytest.mark.parametrize(
    ("gate", "bound"),
    [({"maxWaitS": 30}, 30.0), (None, None), ({"maxWaitS": True}, None),
     ({"maxWaitS": -1}, None), ({"maxWaitS": "600"}, None), ("on", None)],
    ids=["bound", "no-gate", "bool", "negative", "string", "not-an-object"],
)  # fmt: skip
def test_the_client_takes_the_gate_only_from_a_well_formed_hello_reply(
    gate: object, bound: float | None
) -> None:
    from rlix.client.runtime import Runtime

    rt = Runtime(None)
    rt._greeted(proto.OP_HELLO, proto.Reply(re=1, ok=True, body={"phaseGate": gate}))
    assert rt.gate_wait_s == bound
    rt._greeted(proto.OP_PHASE, proto.Reply(re=2, ok=True, body={"phaseGate": {"maxWaitS": 5}}))
    assert rt.gate_wait_s == bound  # only the hello's reply says it


def test_the_benchmarks_overlap_counts_only_time_both_were_busy() -> None:
    from tests.support.scripts import load_script

    bench = load_script(Path(__file__).parents[2] / "bench" / "phase_gate.py", "bench_gate")
    mine = [[0.0, 1.0], [2.0, 3.0]]
    assert bench.overlap_share(mine, [[1.0, 2.0]]) == 0.0  # touching is not overlapping
    assert bench.overlap_share(mine, [[0.5, 2.5]]) == 0.5
    assert bench.overlap_share(mine, [[-1.0, 4.0]]) == 1.0


def test_the_gate_keeps_its_last_reading_of_gpus_when_a_reading_fails() -> None:
    from rlix.agent.phase_gate import PhaseGate
    from rlix.core.phases import Phase
    from rlix.core.policy.placement.sharing import SharingRules

    readings: list[dict[str, frozenset[int]] | Exception] = [
        {"a": frozenset({0}), "b": frozenset({0})},
        {"a": frozenset({0}), "b": frozenset({0})},
        RuntimeError("NVML is gone"),
    ]
    parked: set[str] = set()
    clock = [0.0]
    answered: list[tuple[str, float, bool]] = []

    def gpus() -> dict[str, frozenset[int]]:
        reading = readings.pop(0) if len(readings) > 1 else readings[0]
        if isinstance(reading, Exception):
            raise reading
        return reading

    gate = PhaseGate(
        SharingRules(), 60.0, gpus=gpus, parked=parked.__contains__, clock=lambda: clock[0]
    )
    assert gate.enter("a", "a0", Phase.TRAINING, lambda w, e: answered.append(("a", w, e)))
    assert not gate.enter("b", "b0", Phase.TRAINING, lambda w, e: answered.append(("b", w, e)))
    clock[0] = 2.0
    gate.poke()  # the reading fails: b still shares GPU 0 with a
    assert answered == [] and gate.status()["waitingS"] == {"b": 2.0}
    parked.add("b")  # b is suspended while it waits: answered at once
    gate.poke()
    assert answered == [("b", 2.0, False)]
