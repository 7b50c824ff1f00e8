"""The RLJob models: defaults, aliases and what the operator derives from them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rlix.core.phases import Phase
from rlix.core.rljob import RLJob, RLJobSpec, RoleKind

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _spec(**overrides: object) -> dict[str, object]:
    role = {"name": "policy", "kind": "trainer", "image": "x", "gpuMemoryMiB": {"training": 1}}
    return {"roles": [role], **overrides}


def test_defaults_match_what_a_researcher_expects() -> None:
    spec = RLJobSpec.model_validate(_spec())
    assert spec.priority == 0
    assert spec.preemptible_rollout is True
    assert spec.backoff_limit == 3
    assert spec.roles[0].replicas == 1
    assert spec.roles[0].gpus_per_replica == 1


def test_gpus_is_replicas_times_gpus_per_replica_summed_over_roles() -> None:
    job = RLJob.model_validate(yaml.safe_load((EXAMPLES / "ppo-rllib.yaml").read_text()))
    assert job.spec.gpus == 2 * 4 + 4 * 1 + 2 + 1 + 1
    assert job.key == "default/ppo-llama-helpful"


def test_phase_memory_uses_the_shared_phase_names() -> None:
    job = RLJob.model_validate(yaml.safe_load((EXAMPLES / "verl-colocated.yaml").read_text()))
    trainer = job.spec.roles[0]
    assert trainer.kind is RoleKind.TRAINER
    assert trainer.gpu_memory is not None
    memory = trainer.gpu_memory.by_phase()
    assert set(memory) == set(Phase)
    assert memory[Phase.WEIGHT_SYNC] == 40000


def test_round_trip_keeps_the_wire_names() -> None:
    raw = yaml.safe_load((EXAMPLES / "grpo-trl.yaml").read_text())
    dumped = RLJob.model_validate(raw).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["spec"]["roles"][0]["gpusPerReplica"] == 4
    assert "weight-sync" in dumped["spec"]["roles"][0]["gpuMemoryMiB"]
    assert dumped["spec"]["phaseProfile"]["weight-sync"] == 10


def test_unknown_phase_is_rejected_not_dropped() -> None:
    raw = _spec()
    raw["roles"][0]["gpuMemoryMiB"] = {"generation": 1}  # type: ignore[index]
    with pytest.raises(ValidationError, match="generation"):
        RLJobSpec.model_validate(raw)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_parses(path: Path) -> None:
    RLJob.model_validate(yaml.safe_load(path.read_text()))


def _role(name: str, kind: str) -> dict[str, object]:
    return {"name": name, "kind": kind, "image": "x", "gpuMemoryMiB": {"training": 1}}


PROFILE = {"rollout": 240, "scoring": 20, "training": 90, "weight-sync": 10}
R, S, T, W, IDLE = Phase.ROLLOUT, Phase.SCORING, Phase.TRAINING, Phase.WEIGHT_SYNC, Phase.IDLE


@pytest.mark.parametrize(
    ("roles", "profile", "seconds"),
    [
        # Colocated: the trainer runs every phase and never waits.
        (["trainer"], PROFILE, {"policy": {R: 240, S: 20, T: 90, W: 10}}),
        # Disaggregated: each pool waits through the other's phases.
        (
            ["trainer", "rollout"],
            PROFILE,
            {"policy": {S: 20, T: 90, W: 10, IDLE: 240}, "rollout": {R: 240, W: 10, IDLE: 110}},
        ),
        # Phases left out take no time; a pool with nothing to do in them says nothing.
        (
            ["trainer", "rollout"],
            {"training": 90},
            {"policy": {T: 90}, "rollout": {}},
        ),
        # When a reward model or a critic works depends on the framework: undeclared.
        (["trainer", "reward", "critic"], PROFILE, {"reward": {}, "critic": {}}),
        # No phaseProfile: nothing declared.
        (["trainer", "rollout"], None, {"policy": {}, "rollout": {}}),
    ],
)
def test_a_pods_seconds_per_phase_follow_its_roles_kind(
    roles: list[str], profile: dict[str, int] | None, seconds: dict[str, dict[Phase, int]]
) -> None:
    names = {"trainer": "policy"}
    spec = RLJobSpec.model_validate(
        {
            "roles": [_role(names.get(kind, kind), kind) for kind in roles],
            **({"phaseProfile": profile} if profile else {}),
        }
    )
    for name, want in seconds.items():
        role = spec.role(name)
        assert role is not None
        assert spec.pod_phase_seconds(role) == want, name
