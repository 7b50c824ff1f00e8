"""examples/plain_pytorch_loop.py against a real node-agent process.

The example runs unchanged (through runpy), with a Wiretap in front of the
agent to record the phases it reports. It is suspended between two steps (the
process is in no phase block then, so the suspend lands at once) and resumed;
its losses must equal those of the same example run without any agent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlix.core import agent_protocol as proto
from tests.integrations._harness import Run
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")

UID = "abababab-0000-4000-8000-000000000007"
POD = "team-c/loop-0"
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plain_pytorch_loop.py"
STEPS = 4

SCRIPT = Path(__file__).with_name("_plain_loop_run.py")


def test_plain_loop_reports_phases_and_resumes_to_the_same_losses(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RLIX_AGENT_SOCKET"}
    plain = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", str(STEPS)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=240,
    )
    expected = [json.loads(line)["loss"] for line in plain.stdout.splitlines()]
    assert len(expected) == STEPS

    with AgentProcess(tmp_path / "agent", pods={UID: POD}) as agent:
        workdir = tmp_path / "run"
        run = Run(SCRIPT, workdir, str(agent.socket), "--steps", str(STEPS), "--wait-between-steps")
        try:
            agent.put_in_pod(run.proc.pid, UID)
            run.say("go")
            losses = [run.read()["loss"]]  # step 0 done; now waiting, in no phase
            reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
            assert reply.ok, (reply, agent.log_text())
            record = (agent.state_dir / "suspended" / f"{UID}.json").read_text()
            assert "policy/m0." in record and "policy/m1." in record and "policy/o0." in record
            assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
            for _ in range(STEPS - 1):
                run.say("next")
                losses.append(run.read()["loss"])
            run.say("next")
            phases = run.read()
            assert run.proc.wait(timeout=60) == 0
        finally:
            run.close()
    assert losses == expected
    assert phases["phases"] == [
        "weight-sync",  # rlix.loading(): the model built and loaded
        *["rollout", "scoring", "training", "weight-sync"] * STEPS,
        "idle",
    ]
