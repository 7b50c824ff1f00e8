"""The phase gate's view of the GPUs each pod declares (``rlix.io/gpu-indices``),
read from the conducting loop's listing of the node's pods: a pod that holds
no memory yet (about to load) is on those GPUs in the gate's eyes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import pytest

from rlix.agent.conducting import NodePod
from rlix.agent.declared_gpus import DeclaredGpus
from rlix.agent.phase_gate import PhaseGate
from rlix.core import names
from rlix.core.phases import Phase
from rlix.core.policy.placement.sharing import SharingRules


def pod(uid: str, indices: str | None) -> NodePod:
    notes = {} if indices is None else {names.ANNOTATION_GPU_INDICES: indices}
    return NodePod(uid=uid, namespace="team", name=f"rollout-{uid}", annotations=notes)


def test_each_pod_s_declared_gpus_and_a_malformed_one_is_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listing = [pod("a", "0,1"), pod("b", "3"), pod("c", None), pod("d", "zero"), pod("e", "")]
    gpus = DeclaredGpus()
    assert gpus() == {}  # before the first listing
    gpus.follow(lambda: listing)
    with caplog.at_level(logging.WARNING, logger="rlix.agent.declared_gpus"):
        assert gpus() == {"a": frozenset({0, 1}), "b": frozenset({3})}
        assert gpus() == {"a": frozenset({0, 1}), "b": frozenset({3})}
    [warning] = caplog.messages
    assert names.ANNOTATION_GPU_INDICES in warning and "team/rollout-d" in warning


def test_a_pod_that_holds_nothing_yet_waits_for_its_declared_gpu() -> None:
    # a holds memory on GPU 0 and trains; l holds none yet. Known by its
    # memory alone, l would be on no GPU and go in at once; declaring GPU 0,
    # its training waits for a's, as a neighbour's on GPU 0 does (two
    # kernels on one GPU make less progress than one after the other).
    held: dict[str, frozenset[int]] = {"a": frozenset({0})}
    declared: Mapping[str, frozenset[int]] = {"l": frozenset({0})}
    gate = PhaseGate(
        SharingRules(),
        60.0,
        gpus=lambda: held,
        parked=lambda uid: False,
        declared_gpus=lambda: declared,
    )
    assert gate.enter("a", "a0", Phase.TRAINING, lambda waited, expired: None)
    went = threading.Event()
    assert not gate.enter("l", "l0", Phase.TRAINING, lambda waited, expired: went.set())
    assert gate.status()["waitingS"].keys() == {"l"}
    gate.enter("a", "a0", Phase.IDLE, lambda waited, expired: None)
    assert went.wait(5)
