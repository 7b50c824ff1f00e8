"""Relocation through the agent's protocol, with real agent and trainer processes.

The trainer's CPU tensors stand in for device memory and a sealed memfd for the
CUDA IPC handle (the device path runs in ``hack/gpu-check.py``). What must hold
here is what must hold on a GPU: the pod's process keeps nothing while
relocated, the agent's park file outlives the agent, the bytes come back bit
for bit, and a descriptor a pod hands in is never trusted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_NODE_GPUS
from tests.components.pod_processes import (
    POD,
    UID,
    Trainer,
    connected_trainer,
    pod_process,
    wait_connected,
)
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(tmp_path, pods={UID: POD}, suspend_timeout_s=10.0)
    with a:
        yield a


@pytest.fixture
def trainer(agent: AgentProcess) -> Iterator[Trainer]:
    with connected_trainer(agent) as t:
        yield t


def park_file(agent: AgentProcess, pid: int) -> Path:
    return agent.park_dir / UID / f"{pid}.park"


def memfds(pid: int) -> list[str]:
    """The memfds a process holds open (its exports)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    out = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("/memfd:rlix"):
            out.append(target)
    return out


def test_relocated_to_host_the_process_keeps_nothing_and_gets_it_back_bit_for_bit(
    agent: AgentProcess, trainer: Trainer
) -> None:
    pid = trainer.proc.pid
    before = trainer.ready["digest"]
    reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="host")
    assert reply.ok, (reply, agent.log_text())
    assert reply.body["parked"] == {str(pid): "host"}
    assert trainer.ask("live")["live"] == 0  # every storage freed
    assert memfds(pid) == []  # and no export left open: the agent holds the only copy
    record = agent.control(proto.OP_STATUS).body["suspended"][UID][str(pid)]
    assert record["where"] == "host"
    assert park_file(agent, pid).stat().st_size == record["size"]
    assert record["size"] >= trainer.ready["live"]

    reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
    assert reply.ok, (reply, agent.log_text())
    assert trainer.ask("live")["live"] == trainer.ready["live"]
    assert trainer.ask("digest")["digest"] == before
    assert not park_file(agent, pid).exists()
    assert not (agent.park_dir / UID).exists()
    assert memfds(pid) == []
    assert trainer.ask("train")["digest"] != before  # training goes on


def test_relocated_to_another_gpu_moves_the_memory_in_the_published_state(
    agent: AgentProcess, trainer: Trainer
) -> None:
    before = trainer.ready["digest"]

    def used(gpu: int) -> int:
        return int(agent.control(proto.OP_STATUS).body["gpus"][gpu]["usedMiB"])

    assert used(1) == 0
    reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="gpu:1")
    assert reply.ok, (reply, agent.log_text())
    assert reply.body["parked"] == {str(trainer.proc.pid): "gpu:1"}
    assert used(1) >= 1  # the simulated GPU 1 holds the copy
    assert park_file(agent, trainer.proc.pid).exists()  # and host memory backs it
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
    assert used(1) == 0
    assert trainer.ask("digest")["digest"] == before


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("gpu:7", "this node has 2 GPUs"),
        ("disk", "'target' must be 'self'"),
        ("gpu:-1", "'target' must be 'self'"),
        (3, "'target' must be 'self'"),
    ],
)
def test_bad_targets_are_refused_before_anything_moves(
    agent: AgentProcess, trainer: Trainer, target: Any, message: str
) -> None:
    reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target=target)
    assert reply.error_code == proto.E_BAD_FIELD
    assert message in (reply.error_message or "")
    assert trainer.ask("connected")["suspended"] is False
    assert trainer.ask("live")["live"] == trainer.ready["live"]


def test_agent_sigkilled_while_relocated_resumes_from_the_park_file(
    agent: AgentProcess, trainer: Trainer
) -> None:
    pid = trainer.proc.pid
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="gpu:0").ok
    agent.kill(signal.SIGKILL)
    # The process holds nothing; the bytes are in a file the dead agent left.
    assert trainer.ask("live")["live"] == 0
    assert park_file(agent, pid).exists()
    agent.start()
    wait_connected(agent, pid)
    reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
    assert reply.ok, (reply, agent.log_text())
    assert trainer.ask("digest")["digest"] == before
    assert not park_file(agent, pid).exists()


def test_a_wiped_state_dir_resumes_a_relocated_process_from_its_park_file(
    agent: AgentProcess, trainer: Trainer
) -> None:
    pid = trainer.proc.pid
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="host").ok
    agent.kill(signal.SIGKILL)
    for record in (agent.state_dir / "suspended").glob("*.json"):
        record.unlink()
    agent.start()
    # No record: the trainer is not adopted as suspended on its word, but its
    # bytes are in this agent's park file, so it is brought back from there.
    wait_connected(agent, pid)
    deadline = time.monotonic() + 20
    while trainer.ask("connected")["suspended"]:
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)
    assert UID not in agent.control(proto.OP_STATUS).body["suspended"]
    assert trainer.ask("digest")["digest"] == before
    # The agent frees the park file once the resume reply is in, which the
    # trainer may report before the agent has read it.
    while park_file(agent, pid).exists():
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)


def test_a_corrupted_park_file_is_caught_on_resume_and_kept(
    agent: AgentProcess, trainer: Trainer
) -> None:
    pid = trainer.proc.pid
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="host").ok
    path = park_file(agent, pid)
    with path.open("r+b") as f:  # one flipped bit in the first parked tensor
        first = f.read(1)[0]
        f.seek(0)
        f.write(bytes([first ^ 0x01]))
    reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
    assert reply.error_code == proto.E_FAILED
    message = reply.error_message or ""
    assert "integrity check failed" in message
    assert "torch/m0.0.weight" in message
    assert path.exists()  # the evidence stays, and so does the record
    assert UID in agent.control(proto.OP_STATUS).body["suspended"]
    # The trainer refused it too: it stays suspended instead of training on it.
    assert "stays suspended" in message
    assert trainer.ask("connected")["suspended"] is True
    trainer.say("train")
    assert trainer.silent_for(0.5)


# A hand-written client that answers a relocating suspend with a bad export.
RAW_CLIENT = r"""
import fcntl, json, os, socket, sys
mode, path = sys.argv[1], sys.argv[2]
sys.stdin.readline()  # wait until the test has put this PID in a pod
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.sendall(json.dumps({"v": 1, "id": 1, "op": "hello", "hooks": ["raw"]}).encode() + b"\n")
lines = s.makefile("rb")
size = {"over-held": 2 << 20, "over-gpus": (2 << 20) + 4096}.get(mode, 4096)
if mode == "over-held":  # it holds 1 MiB on GPU 0 (answered before the test goes on)
    usage = {"v": 1, "id": 2, "op": "usage", "gpu": 0, "memory_mib": 1, "utilization": 0.5}
    s.sendall(json.dumps(usage).encode() + b"\n")
    while json.loads(lines.readline()).get("re") != 2:
        pass
print("ready", flush=True)

def export_fd():
    if mode == "pipe":
        return os.pipe()[0]
    if mode == "file":
        return os.open(sys.executable, os.O_RDONLY)
    fd = os.memfd_create("rlix-export", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size if mode != "short" else 100)  # sparse: costs this process nothing
    if mode != "unsealed":
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd

for line in lines:
    msg = json.loads(line)
    if "re" in msg:
        continue
    if msg["op"] == "suspend":
        entry = {"name": "raw/x", "nbytes": 16, "checksum": "b2b:16:00",
                 "offset": 8192 if mode == "outside" else 0}
        manifest = {"where": "exported", "size": size, "entries": [entry]}
        export = {"size": size, "memfd": {"fd": 0}, "cuda": []}
        reply = {"v": 1, "re": msg["id"], "ok": True, "fds": 1, "manifest": manifest,
                 "export": export}
        data = json.dumps(reply).encode() + b"\n"
        if mode == "none":
            s.sendall(data)
        else:
            socket.send_fds(s, [data], [export_fd()])
    elif msg["op"] == "resume":
        print("resumed", flush=True)
        s.sendall(json.dumps({"v": 1, "re": msg["id"], "ok": True, "checksums": {}}).encode()
                  + b"\n")
"""


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("pipe", "not a regular file"),
        ("file", "not a memfd"),
        ("unsealed", "must be sealed against shrinking and growing"),
        ("short", "holds 100 bytes, 4096 announced"),
        ("none", "announced 1 file descriptors, 0 arrived"),
        ("outside", "(raw/x) lies outside the 4096-byte export"),
    ],
)
def test_an_untrustworthy_export_is_refused_and_the_process_resumed_in_place(
    agent: AgentProcess, mode: str, message: str
) -> None:
    # An unusable reply ("none") never parked anything to undo.
    refused_in_place(agent, mode, message, resumed=mode != "none")


def refused_in_place(agent: AgentProcess, mode: str, message: str, *, resumed: bool) -> None:
    """RAW_CLIENT in ``mode`` is asked to park to the host: refused with ``message``,
    told to resume where that applies, and nothing left parked."""
    with pod_process(agent, RAW_CLIENT, mode, str(agent.socket)) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        wait_connected(agent, proc.pid)
        reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="host")
        assert reply.error_code == proto.E_FAILED, reply
        assert message in (reply.error_message or ""), reply.error_message
        if resumed:
            assert "resumed in place" in (reply.error_message or "")
            assert proc.stdout.readline().strip() == "resumed"
        assert not (agent.park_dir / UID).exists()  # nothing was allocated for it
        assert UID not in agent.control(proto.OP_STATUS).body["suspended"]


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        # 2 MiB announced by a pod that held 1 MiB on its GPUs when asked
        ("over-held", "more than the 1048576 left of the 1 MiB the pod held on its GPUs"),
        # nothing held that NVML could attribute: the node's two 1 MiB GPUs bound it
        ("over-gpus", "more than the 2097152 left of the 2 MiB this node's GPUs have"),
    ],
)
def test_an_export_larger_than_the_pods_device_memory_is_refused_before_allocating(
    tmp_path: Path, mode: str, message: str
) -> None:
    # The park file is host memory charged to the agent, and a sparse memfd
    # costs its sender nothing: an unbounded announcement could take the
    # node's RAM. What is parked is device memory, so that bounds it.
    with AgentProcess(tmp_path, pods={UID: POD}, suspend_timeout_s=10.0, sim_gpu_memory_mib=1) as a:
        refused_in_place(a, mode, message, resumed=True)


def test_a_client_op_carrying_descriptors_is_refused(agent: AgentProcess) -> None:
    code = (
        "import json, os, socket, sys\n"
        "sys.stdin.readline()\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1])\n"
        "line = json.dumps({'v': 1, 'id': 5, 'op': 'phase', 'phase': 'rollout', 'fds': 1})\n"
        "socket.send_fds(s, [line.encode() + b'\\n'], [os.pipe()[0]])\n"
        "print(s.makefile('rb').readline().decode().strip(), flush=True)\n"
    )
    with pod_process(agent, code, str(agent.socket)) as proc:
        assert proc.stdout is not None
        reply = json.loads(proc.stdout.readline())
        assert reply["re"] == 5 and reply["ok"] is False
        assert reply["error"]["code"] == proto.E_BAD_FIELD
        assert "takes no file descriptors" in reply["error"]["message"]


def test_a_process_that_dies_while_relocated_has_its_park_file_released(
    agent: AgentProcess, trainer: Trainer
) -> None:
    pid = trainer.proc.pid
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="gpu:1").ok
    assert park_file(agent, pid).exists()
    assert agent.control(proto.OP_STATUS).body["gpus"][1]["usedMiB"] >= 1
    trainer.close()  # SIGKILL: nobody will ever resume it
    # The reaper logs the death once it has freed everything; the record goes
    # first (a crash between never leaves it pointing at a freed copy), so
    # "no longer suspended" alone is observed before the HBM copy is dropped.
    released = f"pid {pid} of {POD} exited while suspended"
    deadline = time.monotonic() + 20
    while released not in agent.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.1)
    status = agent.control(proto.OP_STATUS).body
    assert UID not in status["suspended"]
    assert not park_file(agent, pid).exists()
    assert status["gpus"][1]["usedMiB"] == 0
    assert not (agent.state_dir / "suspended" / f"{UID}.json").exists()


def test_park_files_without_an_owner_are_freed_at_start_and_while_running(
    agent: AgentProcess, trainer: Trainer
) -> None:
    """Issue 18.6: what a killed agent leaves on the tmpfs is host memory that
    nobody else returns; the agent frees whatever no record owns."""
    pid = trainer.proc.pid
    before = trainer.ready["digest"]
    assert agent.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="host").ok
    agent.kill(signal.SIGKILL)
    exited = subprocess.Popen(["true"])
    exited.wait()
    other = agent.park_dir / "eeeeeeee-0000-4000-8000-000000000005"
    other.mkdir(parents=True)
    (other / f"{exited.pid}.park").write_bytes(b"x" * 4096)  # its owner exited, no record
    cut_short = agent.park_dir / UID / f"{pid}.tmp"
    cut_short.write_bytes(b"x" * 4096)  # a copy the SIGKILL interrupted
    agent.start()
    assert not other.exists() and not cut_short.exists()
    assert park_file(agent, pid).exists()  # a record owns this one: the only copy
    assert "no record holds it" in agent.log_text()

    stray = agent.park_dir / UID / f"{exited.pid}.park"
    stray.write_bytes(b"x")
    deadline = time.monotonic() + 20
    while stray.exists():  # the periodic pass
        assert time.monotonic() < deadline, agent.log_text()
        time.sleep(0.05)
    assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
    assert trainer.ask("digest")["digest"] == before
    assert not (agent.park_dir / UID).exists()


def test_the_node_state_is_published_when_memory_moves_not_only_on_the_interval(
    tmp_path: Path,
) -> None:
    # The conductor reads a GPU's published use as a floor for what it owes: a
    # parked pod's memory must leave it when it leaves the GPU, not up to one
    # publish interval later (here an hour), or a second victim gets parked.
    slow = AgentProcess(
        tmp_path, pods={UID: POD}, suspend_timeout_s=10.0, extra_args=("--publish-interval=3600",)
    )
    with slow, connected_trainer(slow) as trainer:

        def published_used(gpu: int) -> int:
            raw = slow.published().get(("node", slow.node), {}).get(ANNOTATION_NODE_GPUS)
            return int(json.loads(raw)[gpu]["usedMiB"]) if raw else -1

        assert published_used(1) == 0  # the publication at start
        assert slow.control(proto.OP_SUSPEND_POD, pod_uid=UID, target="gpu:1").ok
        deadline = time.monotonic() + 10
        while published_used(1) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert published_used(1) >= 1, slow.log_text()  # the copy on GPU 1, published
        assert slow.control(proto.OP_RESUME_POD, pod_uid=UID).ok
        deadline = time.monotonic() + 10
        while published_used(1) != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert published_used(1) == 0, slow.log_text()
        assert trainer.ask("digest")["digest"] == trainer.ready["digest"]
