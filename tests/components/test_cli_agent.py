"""``rlix agent``: status, suspend and resume through a real agent process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rlix.cli.main import main
from tests.components.pod_processes import POD, UID, Trainer, wait_connected
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")

AGENT_POD_UID = "ffffffff-0000-4000-8000-000000000006"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(
        tmp_path,
        pods={UID: POD, AGENT_POD_UID: "rlix/rlix-node-agent-x1"},
        control_pod_uid=AGENT_POD_UID,
    )
    with a:
        yield a


def rlix_agent(agent: AgentProcess, *args: str) -> list[str]:
    return ["agent", f"--socket={agent.socket}", *args]


def test_suspend_and_resume_by_pod_name_with_a_status_in_between(
    agent: AgentProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = Trainer(agent, UID)
    try:
        wait_connected(agent, trainer.proc.pid)
        before = trainer.ready["digest"]
        assert main(rlix_agent(agent, "status")) == 0
        out = capsys.readouterr().out
        assert "node node-a (backend simulated)" in out
        assert POD in out and "running" in out

        assert main(rlix_agent(agent, "suspend", POD, "--target", "host")) == 0
        assert capsys.readouterr().out.strip() == (
            f"suspended {POD}: pid {trainer.proc.pid} -> host"
        )
        assert main(rlix_agent(agent, "status")) == 0
        parked = re.search(r"suspended \(host, ([\d.]+) MiB parked\)", capsys.readouterr().out)
        assert parked is not None and float(parked.group(1)) > 1.0  # weights, grads, Adam
        assert main(rlix_agent(agent, "status", "--json")) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["pods"][UID] == POD and UID in doc["suspended"]
        assert main(rlix_agent(agent, "status", "-o", "yaml")) == 0
        assert yaml.safe_load(capsys.readouterr().out) == doc

        assert main(rlix_agent(agent, "resume", POD)) == 0
        assert capsys.readouterr().out.strip() == f"resumed {POD}: pid {trainer.proc.pid}"
        assert trainer.ask("digest")["digest"] == before
    finally:
        trainer.close()


def test_errors_say_what_is_wrong(
    agent: AgentProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(rlix_agent(agent, "suspend", "team-a/nobody")) == 1
    err = capsys.readouterr().err
    assert "pod 'team-a/nobody' has no process connected to the agent on node node-a" in err
    with pytest.raises(SystemExit) as usage:  # refused by the argument parser itself
        main(rlix_agent(agent, "suspend", UID, "--target", "gpu:x"))
    assert usage.value.code == 2
    assert "'target' must be 'self'" in capsys.readouterr().err
    assert main(rlix_agent(agent, "resume", UID)) == 1
    assert f"not-found: pod {UID} is not suspended" in capsys.readouterr().err
    assert main(["agent", f"--socket={tmp_path / 'none.sock'}", "status"]) == 1
    assert "no agent socket at" in capsys.readouterr().err
    assert main(["agent"]) == 2


def test_control_ops_work_from_the_agents_own_pod_and_no_other(agent: AgentProcess) -> None:
    """`kubectl exec` into the agent's pod is how an administrator reaches it."""
    code = (
        "import sys; from rlix.cli.main import main; sys.stdin.readline(); "
        "sys.exit(main(sys.argv[1:]))"
    )

    def run_in_pod(uid: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *rlix_agent(agent, "status")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        agent.put_in_pod(proc.pid, uid)
        out, err = proc.communicate("go\n", timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    ok = run_in_pod(AGENT_POD_UID)
    assert ok.returncode == 0, ok.stderr
    assert "node node-a" in ok.stdout
    refused = run_in_pod(UID)
    assert refused.returncode == 1
    assert f"control op 'status' refused from inside pod {POD}" in refused.stderr
    assert os.getpid() != 0  # the test process itself stays a host process
