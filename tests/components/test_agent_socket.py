"""The real agent process on its real socket: who may do what, and bad input.

Every caller here is a real process; the agent identifies it from SO_PEERCRED
and a fake proc tree that says which PIDs are in which pod.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlix.core import agent_protocol as proto
from rlix.core.names import (
    ANNOTATION_ITERATIONS,
    ANNOTATION_NODE_GPUS,
    ANNOTATION_PHASE,
    ANNOTATION_PHASE_SINCE,
)
from rlix.devcluster.processes import free_port
from tests.support.agent_fakes import AgentProcess, exchange

# tgkill(2): a signal to one thread of a process (not in the os module).
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}[platform.machine()]

UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"

# A "pod" process that relays raw lines from stdin to the agent and prints replies.
RELAY = r"""
import socket, sys
sys.stdin.readline()  # wait until the test has put us in a pod
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); r = s.makefile("rb")
print("ready", flush=True)
for line in sys.stdin:
    s.sendall(line.encode())
    print(r.readline().decode().strip(), flush=True)
"""


class Pod:
    def __init__(self, agent: AgentProcess, uid: str | None, *, driver: str = "systemd") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", RELAY, str(agent.socket)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if uid is not None:
            agent.put_in_pod(self.proc.pid, uid, driver=driver)
        else:
            agent.set_cgroup(self.proc.pid, "0::/system.slice/other.service\n")
        self._say("go")
        assert self._read() == "ready"

    def _say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def send(self, line: str) -> proto.Reply:
        self._say(line)
        reply = proto.decode(self._read().encode())
        assert isinstance(reply, proto.Reply)
        return reply

    def close(self) -> None:
        _reap(self.proc)


def _reap(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    root = tmp_path_factory.mktemp("agent")
    with AgentProcess(root, pods={UID_A: "team-a/trainer-0", UID_B: "team-b/rollout-0"}) as a:
        yield a


def _wait_for(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_phase_report_becomes_pod_annotations(agent: AgentProcess) -> None:
    pod = Pod(agent, UID_A)
    try:
        reply = pod.send('{"v":1,"id":1,"op":"phase","phase":"rollout"}')
        assert reply.ok, reply
        since = reply.body["since"]
        assert since.endswith("Z") and "T" in since  # RFC 3339, UTC

        def published() -> bool:
            ann = agent.published().get(("pod", "team-a/trainer-0"), {})
            return ann.get(ANNOTATION_PHASE) == "rollout"

        _wait_for(published)
        ann = agent.published()[("pod", "team-a/trainer-0")]
        assert ann[ANNOTATION_PHASE_SINCE] == since
        # Same phase again: "since" does not move.
        assert pod.send('{"v":1,"id":2,"op":"phase","phase":"rollout"}').body["since"] == since
        assert ANNOTATION_ITERATIONS not in ann  # it has not trained yet
        # Leaving training is counted, cumulatively, beside the phase.
        for i, phase in enumerate(("training", "weight-sync", "rollout", "training", "idle")):
            assert pod.send(f'{{"v":1,"id":{3 + i},"op":"phase","phase":"{phase}"}}').ok

        def counted() -> bool:
            ann = agent.published().get(("pod", "team-a/trainer-0"), {})
            return ann.get(ANNOTATION_PHASE) == "idle" and ann.get(ANNOTATION_ITERATIONS) == "2"

        _wait_for(counted)
    finally:
        pod.close()


def test_systemd_and_cgroupfs_layouts_both_identify_the_pod(agent: AgentProcess) -> None:
    pod = Pod(agent, UID_B, driver="cgroupfs")
    try:
        reply = pod.send('{"v":1,"id":1,"op":"hello","hooks":[]}')
        assert reply.ok and reply.body["pod"] == "team-b/rollout-0"
    finally:
        pod.close()


def test_a_pod_cannot_claim_another_pods_identity(agent: AgentProcess) -> None:
    pod = Pod(agent, UID_A)
    try:
        forged = pod.send('{"v":1,"id":1,"op":"phase","phase":"training","pod":"team-b/rollout-0"}')
        assert not forged.ok and forged.error_code == proto.E_BAD_FIELD
        assert "peer credentials" in (forged.error_message or "")
        # ... and cannot drive suspend/resume of anyone, itself included.
        for op in ("suspend-pod", "resume-pod"):
            line = json.dumps({"v": 1, "id": 2, "op": op, "pod_uid": UID_B})
            reply = pod.send(line)
            assert not reply.ok and reply.error_code == proto.E_FORBIDDEN
            assert "team-a/trainer-0" in (reply.error_message or "")
        status = pod.send('{"v":1,"id":3,"op":"status"}')
        assert status.error_code == proto.E_FORBIDDEN
        # The forged phase never reached the other pod.
        other = agent.published().get(("pod", "team-b/rollout-0"), {})
        assert other.get(ANNOTATION_PHASE) != "training"
    finally:
        pod.close()


def test_a_host_process_cannot_report_phases(agent: AgentProcess) -> None:
    host = Pod(agent, None)
    try:
        reply = host.send('{"v":1,"id":1,"op":"phase","phase":"rollout"}')
        assert reply.error_code == proto.E_FORBIDDEN and "not in a pod" in (
            reply.error_message or ""
        )
    finally:
        host.close()


def test_an_unidentifiable_process_is_refused(agent: AgentProcess, tmp_path: Path) -> None:
    # A PID with no cgroup file in the (fake) proc tree: refused, not trusted.
    proc = subprocess.Popen(
        [sys.executable, "-c", RELAY, str(agent.socket)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n{}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ready"
        reply = proto.decode(proc.stdout.readline().encode())
        assert isinstance(reply, proto.Reply) and reply.error_code == proto.E_FORBIDDEN
        assert "cannot identify peer pid" in (reply.error_message or "")
    finally:
        _reap(proc)


MALFORMED = [
    ("garbage", "this is not json", proto.E_MALFORMED),
    ("wrong-version", '{"v":99,"id":1,"op":"phase","phase":"rollout"}', proto.E_VERSION),
    ("unknown-op", '{"v":1,"id":1,"op":"format-disk"}', proto.E_UNKNOWN_OP),
    ("unknown-phase", '{"v":1,"id":1,"op":"phase","phase":"napping"}', proto.E_BAD_FIELD),
    ("phase-not-string", '{"v":1,"id":1,"op":"phase","phase":7}', proto.E_BAD_FIELD),
    ("hooks-not-list", '{"v":1,"id":1,"op":"hello","hooks":"torch"}', proto.E_BAD_FIELD),
    (
        "usage-bad-gpu",
        '{"v":1,"id":1,"op":"usage","gpu":99,"memory_mib":1,"utilization":0.1}',
        proto.E_BAD_FIELD,
    ),
    (
        "usage-too-much",
        '{"v":1,"id":1,"op":"usage","gpu":0,"memory_mib":99999999,"utilization":0.1}',
        proto.E_BAD_FIELD,
    ),
    ("agent-only-op", '{"v":1,"id":1,"op":"suspend"}', proto.E_FORBIDDEN),
    (
        "bad-park-manifest",
        '{"v":1,"id":1,"op":"hello","hooks":[],"parked":{"where":1}}',
        proto.E_BAD_FIELD,
    ),
    # Values Python's json would refuse with ValueError / RecursionError: the
    # agent must answer them like any other malformed line (issue 18).
    ("5000-digit-id", '{"v":1,"id":' + "9" * 5000 + ',"op":"status"}', proto.E_MALFORMED),
    (
        "5000-digit-field",
        '{"v":1,"id":1,"op":"usage","gpu":0,"memory_mib":' + "1" * 5000 + ',"utilization":0}',
        proto.E_MALFORMED,
    ),
    (
        "100k-deep",
        '{"v":1,"id":1,"op":"hello","hooks":' + "[" * 100_000 + "]" * 100_000 + "}",
        proto.E_MALFORMED,
    ),
]


def test_malformed_messages_get_clear_errors_and_the_agent_survives(agent: AgentProcess) -> None:
    pod = Pod(agent, UID_A)
    try:
        for name, line, code in MALFORMED:
            reply = pod.send(line)
            assert not reply.ok, name
            assert reply.error_code == code, (name, reply)
            assert reply.error_message, name
        # The same connection still works after all that.
        assert pod.send('{"v":1,"id":2,"op":"phase","phase":"scoring"}').ok
    finally:
        pod.close()
    assert agent.popen is not None and agent.popen.poll() is None
    assert agent.control(proto.OP_STATUS).ok


def test_an_overlong_line_is_answered_then_the_connection_closed(agent: AgentProcess) -> None:
    line = b'{"v":1,"id":1,"op":"status","pad":"' + b"x" * (proto.MAX_LINE_BYTES + 10) + b'"}\n'
    reply = exchange(agent.socket, line)
    assert reply.error_code == proto.E_MALFORMED
    assert f"line over {proto.MAX_LINE_BYTES} bytes" in (reply.error_message or "")
    assert agent.control(proto.OP_STATUS).ok  # the agent is fine


# A "pod" process that opens one connection after another, each greeted, and
# keeps them open: what a runaway client (or a hostile one) does.
HOARDER = r"""
import json, socket, sys, time
sys.stdin.readline()  # wait until the test has put us in a pod
path, n = sys.argv[1], int(sys.argv[2])
def connect():
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    s.sendall(b'{"v":1,"id":1,"op":"hello","hooks":[]}\n')
    return s, json.loads(s.makefile("rb").readline())
held = [connect() for _ in range(n)]
print(json.dumps([r.get("ok") for _, r in held]), flush=True)
print(json.dumps(connect()[1]), flush=True)  # one more than the agent allows
held.pop()[0].close()
for _ in range(200):  # the agent counts the close once its reader sees it
    s, reply = connect()
    if reply.get("ok"):
        break
    time.sleep(0.05)
print(json.dumps(reply), flush=True)
sys.stdin.readline()
"""


def test_a_pod_holds_at_most_so_many_connections_and_the_next_is_told_why(
    tmp_path: Path,
) -> None:
    # An agent of its own: the hoarder's connections close with it, and the
    # module's agent would count them until each reader has seen its close.
    pods = {UID_A: "team-a/trainer-0", UID_B: "team-b/rollout-0"}
    with AgentProcess(tmp_path, pods=pods) as agent:
        hoard_and_get_refused(agent)


def hoard_and_get_refused(agent: AgentProcess) -> None:
    limit = proto.MAX_POD_CONNECTIONS
    proc = subprocess.Popen(
        [sys.executable, "-c", HOARDER, str(agent.socket), str(limit)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        agent.put_in_pod(proc.pid, UID_B)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == [True] * limit
        refused = json.loads(proc.stdout.readline())
        assert refused["ok"] is False and refused["error"]["code"] == proto.E_FORBIDDEN
        assert f"pod team-b/rollout-0 has {limit} connections" in refused["error"]["message"]
        assert json.loads(proc.stdout.readline())["ok"] is True  # one closed: room again
        # Another pod is not held to this one's count.
        other = Pod(agent, UID_A)
        try:
            assert other.send('{"v":1,"id":1,"op":"hello","hooks":[]}').ok
        finally:
            other.close()
    finally:
        _reap(proc)
    assert agent.control(proto.OP_STATUS).ok


def test_out_of_descriptors_the_agent_waits_and_accepts_again(tmp_path: Path) -> None:
    # A host process (no per-pod count) opens connections until the agent has
    # no descriptor left: accept fails with EMFILE. Once they close, the agent
    # must serve again rather than have stopped accepting for good.
    hoard: list[socket.socket] = []
    with AgentProcess(tmp_path, pods={UID_A: "team-a/trainer-0"}, nofile=64) as a:
        try:
            for _ in range(100):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(a.socket))  # the listen backlog takes what accept cannot
                hoard.append(s)
            _wait_for(lambda: "cannot accept connections" in a.log_text())
        finally:
            for s in hoard:
                s.close()
        assert a.control(proto.OP_STATUS, timeout=20.0).ok
        assert a.popen is not None and a.popen.poll() is None


def test_simulated_usage_is_published_as_node_gpu_state(agent: AgentProcess) -> None:
    pod = Pod(agent, UID_B)
    try:
        line = '{"v":1,"id":1,"op":"usage","gpu":1,"memory_mib":4096,"utilization":0.5}'
        assert pod.send(line).ok

        def seen() -> bool:
            raw = agent.published().get(("node", agent.node), {}).get(ANNOTATION_NODE_GPUS)
            return raw is not None and json.loads(raw)[1]["usedMiB"] == 4096

        _wait_for(seen)
        gpus = json.loads(agent.published()[("node", agent.node)][ANNOTATION_NODE_GPUS])
        assert [g["index"] for g in gpus] == [0, 1]
        assert gpus[1] == {"index": 1, "memoryMiB": 81920, "usedMiB": 4096, "utilization": 0.5}
        status = agent.control(proto.OP_STATUS).body
        mine = {"pid": pod.proc.pid, "gpu": 1, "usedMiB": 4096, "podUID": UID_B}
        assert mine in status["processes"]  # per-process memory, attributed to its pod
    finally:
        pod.close()

    def released() -> bool:  # the process exited: its simulated memory is freed
        procs = agent.control(proto.OP_STATUS).body["processes"]
        return all(p["pid"] != pod.proc.pid for p in procs)

    _wait_for(released)


def test_controller_errors_name_the_problem(agent: AgentProcess) -> None:
    missing = agent.control(proto.OP_SUSPEND_POD, pod_uid="cccccccc-0000-4000-8000-000000000003")
    assert missing.error_code == proto.E_NOT_FOUND and "no process" in (missing.error_message or "")
    not_suspended = agent.control(proto.OP_RESUME_POD, pod_uid=UID_A)
    assert not_suspended.error_code == proto.E_NOT_FOUND
    no_uid = exchange(agent.socket, b'{"v":1,"id":1,"op":"suspend-pod"}\n')
    assert no_uid.error_code == proto.E_BAD_FIELD


def test_a_sigterm_that_lands_on_another_thread_still_stops_the_agent(tmp_path: Path) -> None:
    # The kernel hands a process's SIGTERM to any thread that does not block it;
    # Python runs the handler only on the main thread, when that thread next
    # returns to the interpreter. Sent to a worker thread (tgkill), the signal
    # used to leave the main thread blocked in accept() for good: the agent
    # outlived its pod's grace period (a CI run caught it once, 2026-12-05).
    agent = AgentProcess(tmp_path).start()
    assert agent.popen is not None
    pid = agent.popen.pid
    workers = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert workers, "the agent runs its publishing threads"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(SYS_TGKILL, pid, workers[0], signal.SIGTERM) == 0, ctypes.get_errno()
    try:
        assert agent.popen.wait(timeout=10) == 0, agent.log_text()
    finally:
        agent.kill()


def test_the_harness_chooses_another_metrics_port_when_another_process_took_its_own(
    tmp_path: Path,
) -> None:
    """A port chosen free can be bound by another process on the machine (a
    second test session) before the agent binds it; the harness then starts
    the agent on another one instead of failing the test that asked."""
    taken = free_port()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with AgentProcess(tmp_path, metrics_port=taken) as agent:
            assert agent.metrics_port != taken
            assert "rlix_" in agent.metrics()
    assert "Address already in use" in agent.log_text()
