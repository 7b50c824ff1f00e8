"""A plain PyTorch RL loop with RLix: the whole integration is five lines.

A REINFORCE policy on a tiny two-armed bandit ("rollout" samples actions,
"scoring" computes rewards and advantages, "training" takes an optimizer step,
"weight-sync" copies the policy into a separate rollout copy, as trainers with
an inference engine do). Run it anywhere:

    python examples/plain_pytorch_loop.py --steps 20

Outside RLix (RLIX_AGENT_SOCKET unset) every rlix call is a no-op. Inside an
RLix pod, the node agent sees the phases and can suspend the process between
phases: the registered policy, rollout copy and Adam state are parked in host
memory and restored bit for bit, so the run continues as if never paused.

Prints one JSON line per step: {"step", "loss", "reward"}; the test
(tests/integrations/test_plain_loop.py) drives it through a real agent.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import rlix


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--wait-between-steps",
        action="store_true",
        help="read one stdin line after each step (lets a test act between steps)",
    )
    a = ap.parse_args(argv)

    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    # (0) The first allocation: where the node agent's gate parks, it waits for
    # room beside the pods working on this pod's GPUs.
    with rlix.loading():
        policy = torch.nn.Sequential(
            torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )
        rollout_copy = torch.nn.Sequential(
            torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )
        rollout_copy.load_state_dict(policy.state_dict())
        opt = torch.optim.Adam(policy.parameters(), lr=0.05)
    payout = torch.tensor([0.2, 0.8])

    # (1) Tell RLix what to park on suspend.
    rlix.register_torch(modules=[policy, rollout_copy], optimizers=[opt], name="policy")

    for step in range(a.steps):
        with rlix.phase("rollout"):  # (2) one block per phase
            obs = torch.randn(a.batch, 4, generator=gen)
            with torch.no_grad():
                probs = torch.softmax(rollout_copy(obs), dim=-1)
            actions = torch.multinomial(probs, 1, generator=gen).squeeze(1)
            rlix.safe_point()  # a long rollout lets a pending suspend land between batches
        with rlix.phase("scoring"):  # (3)
            rewards = (torch.rand(a.batch, generator=gen) < payout[actions]).float()
            advantages = rewards - rewards.mean()
        with rlix.phase("training"):  # (4)
            logp = torch.log_softmax(policy(obs), dim=-1).gather(1, actions[:, None]).squeeze(1)
            loss = -(logp * advantages).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with rlix.phase("weight-sync"):
            rollout_copy.load_state_dict(policy.state_dict())
        print(
            json.dumps({"step": step, "loss": loss.item(), "reward": rewards.mean().item()}),
            flush=True,
        )
        if a.wait_between_steps:
            sys.stdin.readline()  # outside any phase block: a suspend lands at once
    with rlix.phase("idle"):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
