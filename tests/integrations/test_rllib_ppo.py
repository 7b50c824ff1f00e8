"""RLlib PPO (new API stack) on CartPole with the RLix callbacks, against a real
node-agent process.

Sampling and the Learner run in the trainer process. The test suspends the
pod between two ``train()`` calls: the suspend lands at the next phase
boundary (the start of sampling), the Learner's module and Adam state are
parked (0 bytes live), and after the resume training goes on. Losses and final
weights must equal those of a plain RLlib run with the same seed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from rlix.core import agent_protocol as proto
from tests.integrations._harness import Run
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")
pytest.importorskip("ray.rllib")

UID = "ffffffff-0000-4000-8000-000000000007"
POD = "team-b/ppo-0"
SCRIPT = Path(__file__).with_name("_ppo_run.py")
ITERS = 3


def test_ppo_reports_sampling_and_learning_and_survives_suspend_resume(tmp_path: Path) -> None:
    with AgentProcess(tmp_path / "agent", pods={UID: POD}) as agent:
        run = Run(SCRIPT, tmp_path / "rlix", "--agent", str(agent.socket), "--pause-after", "1")
        try:
            agent.put_in_pod(run.proc.pid, UID)
            run.say("go")
            paused = run.read()
            assert paused["event"] == "paused" and paused["iteration"] == 1
            assert paused["hooks"] == ["rllib-learner", "rllib-env-runner"]
            live, before = paused["live"], paused["digest"]
            assert live > 0

            # The trainer is between train() calls, inside its open phase block:
            # the suspend waits for the next boundary, which "continue" brings.
            replies: list[proto.Reply] = []
            suspend = threading.Thread(
                target=lambda: replies.append(agent.control(proto.OP_SUSPEND_POD, pod_uid=UID))
            )
            suspend.start()
            run.say("continue")
            suspend.join(timeout=120)
            assert replies and replies[0].ok, (replies, agent.log_text())
            assert replies[0].body["parked"] == {str(run.proc.pid): "self"}
            assert run.ask("live")["live"] == 0  # learner module and Adam state parked
            assert run.ask("suspended")["suspended"] is True
            record = json.dumps(
                json.loads((agent.state_dir / "suspended" / f"{UID}.json").read_text())
            )
            assert "rllib-learner/" in record and "rllib-env-runner/" in record

            assert agent.control(proto.OP_RESUME_POD, pod_uid=UID).ok
            result = run.read()
            assert result["event"] == "result"
            assert run.proc.wait(timeout=120) == 0
            assert agent.control(proto.OP_STATUS).body["phases"][UID]["phase"] == "idle"
        finally:
            run.close()
        # The digest right after resume is not observable (training has gone on),
        # but the loss curve below is: a single wrong byte would change it.
        assert before != result["digest"]

    baseline = Run(SCRIPT, tmp_path / "baseline")
    try:
        base = baseline.read()
        assert base["event"] == "result"
    finally:
        baseline.close()

    assert result["phases"] == ["idle", *["rollout", "training", "weight-sync"] * ITERS, "idle"]
    assert len(base["losses"]) == ITERS
    assert result["losses"] == base["losses"]
    assert result["digest"] == base["digest"]
