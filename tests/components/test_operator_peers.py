"""Peer discovery: the headless Service and the torchrun / Ray env of every pod."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlix.core import names
from rlix.core.rljob import RLJob
from rlix.operator.peers import build_service, peer_env, rank_offsets
from rlix.operator.pods import build_pod, desired_pod_names

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def ppo() -> RLJob:
    raw = yaml.safe_load((EXAMPLES / "ppo-rllib.yaml").read_text())
    raw["metadata"].update(namespace="team-a", uid="uid-1")
    return RLJob.model_validate(raw)


def env_of(job: RLJob, pod: str) -> dict[str, str]:
    role, index = desired_pod_names(job)[pod]
    return {e["name"]: e["value"] for e in peer_env(job, role, index, socket_path="/s")}


def test_headless_service_selects_the_job_and_is_owned_by_it() -> None:
    service = build_service(ppo(), owner_uid="uid-1")
    assert service["metadata"]["name"] == "ppo-llama-helpful"
    assert service["metadata"]["namespace"] == "team-a"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {names.LABEL_JOB: "ppo-llama-helpful"}
    assert service["spec"]["publishNotReadyAddresses"] is True
    (owner,) = service["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (names.KIND, "uid-1", True)


def test_every_pod_is_its_service_name_under_the_job_subdomain() -> None:
    job = ppo()
    for name, (role, index) in desired_pod_names(job).items():
        pod = build_pod(job, role, index, owner_uid="uid-1")
        assert pod["spec"]["hostname"] == name
        assert pod["spec"]["subdomain"] == build_service(job, owner_uid="x")["metadata"]["name"]


def test_ranks_cover_the_gang_once_with_the_head_trainer_at_zero() -> None:
    job = ppo()
    envs = [env_of(job, pod) for pod in desired_pod_names(job)]
    ranks = sorted(int(e["RANK"]) for e in envs)
    assert ranks == list(range(9))
    assert {e["WORLD_SIZE"] for e in envs} == {"9"}
    assert all(e["RANK"] == e["NODE_RANK"] for e in envs)
    head = env_of(job, "ppo-llama-helpful-learner-0")
    assert head["RANK"] == "0"
    assert {e["MASTER_ADDR"] for e in envs} == {"ppo-llama-helpful-learner-0.ppo-llama-helpful"}
    assert {e["RLIX_HEAD_ADDR"] for e in envs} == {e["MASTER_ADDR"] for e in envs}
    assert {e["MASTER_PORT"] for e in envs} == {str(names.MASTER_PORT)}
    assert env_of(job, "ppo-llama-helpful-rollout-3")["RLIX_REPLICA_INDEX"] == "3"
    assert env_of(job, "ppo-llama-helpful-rollout-3")["RLIX_REPLICAS"] == "4"


def test_head_role_comes_first_even_when_listed_later() -> None:
    raw = yaml.safe_load((EXAMPLES / "ppo-rllib.yaml").read_text())
    raw["spec"]["roles"].reverse()  # trainer (learner) last
    job = RLJob.model_validate(raw)
    offsets = rank_offsets(job)
    assert offsets["learner"] == 0
    assert sorted(offsets.values()) == sorted(set(offsets.values()))
    assert env_of(job, "ppo-llama-helpful-learner-1")["RANK"] == "1"
