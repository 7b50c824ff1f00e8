"""The demo's job mix: small enough to finish in minutes, shaped like real RL jobs.

Fixed here, not tuned to the policy: more GPUs are asked for than the demo
cluster has, so some jobs must queue for gang admission, and priorities differ
so preemption has something to decide. Memory is declared as a colocated
stack would set it (a trainer's peak about half an 80 GiB GPU, a vLLM rollout
at ``gpu_memory_utilization`` ~0.45), so a trainer of one job and a rollout of
another fit on one GPU by their phases. One urgent job arrives late, while
the others run and no four GPUs of a node are free; the agents publish memory
at ``MEMORY_OVERCOMMIT`` x, so the conductor parks a lower-priority rollout in
place and the urgent job is admitted into its memory (docs/conductor.md, "What
parking frees"); the rollout resumes, bytes intact, when the urgent job ends.
Three lab jobs of one priority fill what the others leave: two share GPUs in
pairs, the third takes the last empty ones (with only two lab jobs, four GPUs
stayed empty and the urgent job was admitted there, parking nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlix.core import names


@dataclass(frozen=True)
class DemoRole:
    name: str
    kind: str
    replicas: int
    gpus: int
    memory_mib: dict[str, int]


@dataclass(frozen=True)
class DemoJob:
    name: str
    priority: int
    iterations: int
    roles: tuple[DemoRole, ...]
    # Seconds per phase of one iteration; rollout is stretched by a long tail.
    phase_seconds: dict[str, float] = field(
        default_factory=lambda: {
            "rollout": 2.5,
            "scoring": 0.5,
            "training": 1.5,
            "weight-sync": 0.3,
        }
    )
    algorithm: str = "GRPO"
    # Seconds after the first submission this job is submitted (both runs alike).
    arrive_s: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(r.replicas * r.gpus for r in self.roles)

    def manifest(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {
                "name": self.name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "rlix-demo"},
            },
            "spec": {
                "algorithm": self.algorithm,
                "priority": self.priority,
                "preemptibleRollout": True,
                "phaseProfile": {k: max(1, round(v)) for k, v in self.phase_seconds.items()},
                "roles": [
                    {
                        "name": r.name,
                        "kind": r.kind,
                        "replicas": r.replicas,
                        "gpusPerReplica": r.gpus,
                        "image": "rlix-demo-trainer:local",
                        "command": ["python", "-m", "rlix.demo.trainer"],
                        "gpuMemoryMiB": r.memory_mib,
                    }
                    for r in self.roles
                ],
            },
        }


# What the agents publish per GPU: physical memory x this (the demo's GPUs are 80 GiB).
MEMORY_OVERCOMMIT = 1.5
TRAIN = {"scoring": 24000, "training": 44000, "weight-sync": 16000, "idle": 12000}
ROLL = {"rollout": 36000, "weight-sync": 16000, "idle": 12000}
COLOCATED = {
    "rollout": 40000,
    "scoring": 24000,
    "training": 48000,
    "weight-sync": 24000,
    "idle": 12000,
}
URGENT = {"training": 70000, "weight-sync": 16000, "idle": 12000}


def demo_jobs() -> list[DemoJob]:
    """46 GPUs of pods for a 32-GPU cluster, then an urgent 4-GPU job at 15 s."""
    return [
        DemoJob(
            "grpo-math",
            100,
            5,
            (
                DemoRole("policy", "trainer", 1, 4, TRAIN),
                DemoRole("rollout", "rollout", 2, 2, ROLL),
            ),
        ),
        DemoJob(
            "ppo-chat",
            50,
            4,
            (
                DemoRole("policy", "trainer", 1, 4, TRAIN),
                DemoRole("rollout", "rollout", 1, 4, ROLL),
            ),
            algorithm="PPO",
        ),
        DemoJob("verl-colocated", 10, 4, (DemoRole("actor", "trainer", 1, 8, COLOCATED),)),
        DemoJob(
            "agentic-tail",
            5,
            3,
            (
                DemoRole("policy", "trainer", 1, 2, TRAIN),
                DemoRole("rollout", "rollout", 4, 2, ROLL),
            ),
            phase_seconds={"rollout": 4.0, "scoring": 0.5, "training": 1.0, "weight-sync": 0.3},
        ),
        DemoJob(
            "lab-a",
            0,
            4,
            (
                DemoRole("policy", "trainer", 1, 2, TRAIN),
                DemoRole("rollout", "rollout", 1, 2, ROLL),
            ),
        ),
        DemoJob(
            "lab-b",
            0,
            4,
            (
                DemoRole("policy", "trainer", 1, 2, TRAIN),
                DemoRole("rollout", "rollout", 1, 2, ROLL),
            ),
        ),
        DemoJob(
            "lab-c",
            0,
            4,
            (
                DemoRole("policy", "trainer", 1, 2, TRAIN),
                DemoRole("rollout", "rollout", 1, 2, ROLL),
            ),
        ),
        DemoJob(
            "urgent-eval",
            200,
            2,
            (DemoRole("policy", "trainer", 1, 4, URGENT),),
            arrive_s=15.0,
        ),
    ]
