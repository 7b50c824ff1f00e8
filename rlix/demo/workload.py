"""The demo's job mix: small enough to finish in minutes, shaped like real RL jobs.

Fixed here, not tuned to the policy: more GPUs are asked for than the demo
cluster has, so some jobs must queue for gang admission, and priorities differ
so preemption has something to decide.
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


TRAIN = {"scoring": 30000, "training": 60000, "weight-sync": 20000, "idle": 16000}
ROLL = {"rollout": 52000, "weight-sync": 20000, "idle": 12000}
COLOCATED = {
    "rollout": 48000,
    "scoring": 30000,
    "training": 64000,
    "weight-sync": 30000,
    "idle": 12000,
}


def demo_jobs() -> list[DemoJob]:
    """42 GPUs of work for a 32-GPU cluster: two jobs wait for admission at first."""
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
    ]
