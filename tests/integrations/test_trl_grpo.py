"""TRL GRPO with rlix.integrations.trl against a real node-agent process.

A tiny Llama (random weights from a config) and a word-level tokenizer are built
locally; nothing is downloaded. The run with RLix attached is suspended after
step 1 through the agent's control socket and resumed; its loss curve and final
weights must equal those of a plain TRL run with the same seed, and the agent
must have been told rollout -> scoring -> training for every step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_PHASE
from tests.integrations._harness import Run
from tests.support.agent_fakes import AgentProcess

pytest.importorskip("torch")
pytest.importorskip("trl")

UID = "eeeeeeee-0000-4000-8000-000000000007"
POD = "team-a/grpo-0"
SCRIPT = Path(__file__).with_name("_grpo_run.py")
STEPS = 3


def test_grpo_reports_phases_and_survives_suspend_resume_with_identical_losses(
    tmp_path: Path,
) -> None:
    # The plain TRL run (no rlix at all) runs alongside the one under test.
    baseline = Run(SCRIPT, tmp_path / "baseline")
    try:
        with AgentProcess(tmp_path / "agent", pods={UID: POD}) as agent:
            run = Run(SCRIPT, tmp_path / "rlix", "--agent", str(agent.socket), "--pause-after", "1")
            try:
                agent.put_in_pod(run.proc.pid, UID)
                run.say("go")
                paused = run.read()
                assert paused["event"] == "paused" and paused["step"] == 1
                assert paused["hooks"] == ["trl-policy", "trl-reference", "trl-optimizer"]
                live = paused["live"]
                assert live > 0

                # The controller's suspend lands at the trainer's safe point between steps.
                reply = agent.control(proto.OP_SUSPEND_POD, pod_uid=UID)
                assert reply.ok, (reply, agent.log_text())
                assert reply.body["parked"] == {str(run.proc.pid): "self"}
                assert run.ask("live")["live"] == 0  # policy, reference, Adam state: all gone
                assert run.ask("suspended")["suspended"] is True
                record = json.loads((agent.state_dir / "suspended" / f"{UID}.json").read_text())
                names = json.dumps(record)
                for hook in ("trl-policy/", "trl-reference/", "trl-optimizer/"):
                    assert hook in names, record

                reply = agent.control(proto.OP_RESUME_POD, pod_uid=UID)
                assert reply.ok, (reply, agent.log_text())
                assert run.ask("live")["live"] == live
                run.say("continue")
                result = run.read()
                assert result["event"] == "result"
                assert run.proc.wait(timeout=120) == 0
                status = agent.control(proto.OP_STATUS).body
                assert status["phases"][UID]["phase"] == "idle"
                assert UID not in status["suspended"]
                assert agent.published()[("pod", POD)][ANNOTATION_PHASE] == "idle"
            finally:
                run.close()
        base = baseline.read()
        assert base["event"] == "result"
    finally:
        baseline.close()

    assert result["phases"] == ["idle", *["rollout", "scoring", "training"] * STEPS, "idle"]
    assert len(base["losses"]) == STEPS
    assert result["losses"] == base["losses"]  # exact, not approximate
    assert result["rewards"] == base["rewards"]
    assert result["digest"] == base["digest"]


def test_attach_is_idempotent_and_a_noop_without_an_agent() -> None:
    """Without RLIX_AGENT_SOCKET the same script runs unchanged."""
    import rlix.integrations.trl as rtrl

    class FakeTrainer:
        def __init__(self) -> None:
            self.callbacks: list[Any] = []
            self.calls: list[str] = []

        def add_callback(self, cb: Any) -> None:
            self.callbacks.append(cb)

        def _generate(self, prompts: list[str]) -> list[str]:
            self.calls.append("generate")
            return prompts

        def train(self) -> str:
            for cb in self.callbacks:
                cb.on_train_begin(None, None, None)
                cb.on_step_begin(None, None, None)
                cb.on_epoch_begin(None, None, None)  # an event it does not use
            self._generate(["p"])
            raise RuntimeError("boom")

    trainer = FakeTrainer()
    cb = rtrl.attach(trainer, register=False)
    assert rtrl.attach(trainer) is cb
    assert trainer.callbacks == [cb]
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    assert trainer.calls == ["generate"]
    assert cb.switcher.current is None  # a failed train() leaves no phase block open
    with pytest.raises(AttributeError):
        _ = cb.not_an_event


def test_rloo_reports_the_same_phases_and_registers_its_models(tmp_path: Path) -> None:
    """Built inside ``rlix.loading()`` (docs/integrations.md: what a role
    that sets ``loadsThroughGate`` does, since TRL loads the model given by
    name in the trainer's constructor): the load comes first, as a weight
    sync the agent's phase gate is told is a load, then the same busy phases
    as GRPO's."""
    with AgentProcess(tmp_path / "agent", pods={UID: POD}, extra_args=("--phase-gate",)) as agent:
        run = Run(
            SCRIPT,
            tmp_path / "rloo",
            "--agent",
            str(agent.socket),
            "--trainer",
            "rloo",
            "--loading",
        )
        try:
            agent.put_in_pod(run.proc.pid, UID)
            run.say("go")
            result = run.read()
            assert result["event"] == "result"
            assert run.proc.wait(timeout=120) == 0
            hooks = agent.control(proto.OP_STATUS).body["connected"].get(UID, {})
        finally:
            run.close()
    # With the gate, the client also says when it leaves each block (idle).
    busy = [p for p in result["phases"] if p != "idle"]
    assert busy == ["weight-sync", *["rollout", "scoring", "training"] * STEPS]
    assert result["loads"] == ["weight-sync"]
    assert len(result["losses"]) == STEPS
    # The trainer has exited, so the agent may already have dropped it; when it
    # still lists it, the hooks are the three the integration registers.
    for names in hooks.values():
        assert names == ["trl-policy", "trl-reference", "trl-optimizer"]
