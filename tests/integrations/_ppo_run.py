"""A few RLlib PPO iterations on CartPole, started by test_rllib_ppo.py.

    python _ppo_run.py WORKDIR [--agent SOCKET] [--pause-after N]

Sampling and the Learner run in this process (num_env_runners=0,
num_learners=0). With --agent, the RLix callbacks are configured and the
trainer talks to the agent through a Wiretap; with --pause-after N it stops
after iteration N (between train() calls, inside the open phase block) until
"continue" on stdin. A stdin thread answers "live", "digest" and "suspended"
at any time. One JSON line per event; the last is the result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch

torch.set_num_threads(1)
ITERS = 3


def out(**kw: Any) -> None:
    print(json.dumps(kw), flush=True)


def main() -> int:  # noqa: PLR0915
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--agent")
    ap.add_argument("--pause-after", type=int, default=0)
    a = ap.parse_args()

    import ray
    from ray.rllib.algorithms.ppo import PPOConfig

    tap = None
    if a.agent:
        from _wiretap import Wiretap

        import rlix

        sys.stdin.readline()  # the test has put this PID in a pod
        tap = Wiretap(a.agent, str(a.workdir / "tap.sock"))
        rlix.configure(tap.path)

    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 1024 * 1024,
    )
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=2)
        .debugging(seed=3)
    )
    if a.agent:
        import rlix.integrations.rllib

        config = config.callbacks(rlix.integrations.rllib.callbacks_class())
    algo = config.build_algo()
    learners: list[Any] = []
    algo.learner_group.foreach_learner(learners.append)
    learner = learners[0]

    def materialize() -> None:
        # CPU only: RLlib's weight sync calls Tensor.numpy() on the Learner's
        # parameters, which marks their storages non-resizable, so they could
        # not be parked (resize to 0); the PPO module also holds a constant
        # buffer built from numpy. Give them fresh memory (same values, same
        # tensor objects). On a GPU, get_state copies to host first and the
        # device storages stay resizable; no such step is needed.
        for mid in learner.module.keys():  # noqa: SIM118 (not iterable)
            m = learner.module[mid]
            for t in [*m.parameters(), *m.buffers()]:
                t.data = t.data.clone()

    def tensors() -> list[torch.Tensor]:
        ts: list[torch.Tensor] = []
        for mid in learner.module.keys():  # noqa: SIM118
            ts += list(learner.module[mid].parameters())
            for _, opt in learner.get_optimizers_for_module(module_id=mid):
                for st in opt.state.values():
                    ts += [v for v in st.values() if isinstance(v, torch.Tensor)]
        return ts

    def live_bytes() -> int:
        return sum(t.untyped_storage().nbytes() for t in tensors())

    def digest() -> str:
        h = hashlib.sha256()
        for t in tensors():
            h.update(t.detach().clone().numpy().tobytes())  # .numpy() would pin the storage
        return h.hexdigest()

    go_on = threading.Event()

    def serve() -> None:
        import rlix

        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "live":
                out(event="live", live=live_bytes())
            elif cmd == "digest":
                out(event="digest", digest=digest())
            elif cmd == "suspended":
                out(event="suspended", suspended=rlix.suspended())
            elif cmd == "continue":
                go_on.set()

    threading.Thread(target=serve, daemon=True).start()
    losses = []
    for i in range(1, ITERS + 1):
        result = algo.train()
        losses.append(float(result["learners"]["default_policy"]["total_loss"]))
        if i == a.pause_after:
            out(
                event="paused",
                iteration=i,
                live=live_bytes(),
                digest=digest(),
                hooks=getattr(algo, "_rlix_hooks", []),
            )
            go_on.wait()
            materialize()  # inside the open phase block; the suspend lands at the next switch
    final = digest()
    algo.stop()
    ray.shutdown()
    phases: list[str] = []
    if tap is not None:
        rlix.configure(None)  # close the link, so the tap has read every message sent
        phases = tap.phases()
    out(event="result", losses=losses, digest=final, phases=phases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
