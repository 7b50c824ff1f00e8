"""The demo's simulated trainer parks and restores its stand-in device memory.

Its hooks are plain bytes, not torch tensors; `make demo` never suspended one
until the chaos run did, and the first suspend failed inside the hook.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator

import pytest

from rlix.core.suspension import ActiveReplicas
from rlix.demo import trainer
from rlix.demo.trainer import DeviceBuffer


def test_offload_then_restore_is_bit_for_bit() -> None:
    buffer = DeviceBuffer(1 << 16, seed=7)
    original = bytes(buffer.device or b"")
    parked = buffer.offload()
    assert buffer.device is None
    ((nbytes, checksum),) = parked.values()
    assert nbytes == len(original)
    restored = buffer.restore()
    assert restored == {"weights": checksum}
    assert bytes(buffer.device or b"") == original


def test_a_corrupted_restore_does_not_match() -> None:
    buffer = DeviceBuffer(4096, seed=1)
    ((_, checksum),) = buffer.offload().values()
    assert buffer.parked is not None
    buffer.parked = b"\x00" + buffer.parked[1:]
    assert buffer.restore() != {"weights": checksum}


def test_suspending_twice_is_refused() -> None:
    buffer = DeviceBuffer(16, seed=0)
    buffer.offload()
    with pytest.raises(AssertionError, match="suspended twice"):
        buffer.offload()


def test_a_trainer_does_not_finish_while_its_whole_rollout_is_parked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rollout is parked during the last iteration's training: the trainer
    must wait in weight sync (which writes into the rollout's memory) until
    the rollout is back, not end the job with it parked (a full CI run saw
    the demo finish ppo-chat with its rollout never resumed)."""
    phases: list[str] = []
    parked = threading.Event()
    lent_back = threading.Event()

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        phases.append(name)
        if name == "training" and phases.count("training") == 2:
            parked.set()  # the conductor parks the rollout mid-training
        yield

    def active_replicas() -> ActiveReplicas:
        if parked.is_set() and not lent_back.is_set():
            return ActiveReplicas("rollout", 1, 1, active=(), suspended=(0,))
        return ActiveReplicas("rollout", 1, 1, active=(0,), suspended=())

    monkeypatch.setattr(trainer.rlix, "phase", phase)
    monkeypatch.setattr(trainer.rlix, "active_replicas", active_replicas)
    monkeypatch.setattr(trainer, "_report", lambda *_: None)
    args = trainer.build_parser().parse_args(
        ["--iterations", "2", "--phase-seconds", json.dumps(dict.fromkeys(trainer.ORDER, 0.05))]
    )
    done = threading.Thread(target=trainer.run, args=(args,), daemon=True)
    done.start()
    assert parked.wait(10)
    done.join(1.5)
    assert done.is_alive(), f"finished with its rollout parked: {phases}"
    assert phases[-1] == "weight-sync"
    lent_back.set()
    done.join(10)
    assert not done.is_alive()
    assert phases[-1] == "idle"
