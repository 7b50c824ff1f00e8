"""The operator's log says how each GPU node's GPUs are handed out, once per change."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from rlix.core import names
from rlix.operator.snapshots import log_gpu_mode
from rlix.operator.store import Store


def gpu_node(*, claims: bool) -> dict[str, Any]:
    notes = {names.ANNOTATION_NODE_GPU_CLAIMS: "true"} if claims else {}
    return {
        "metadata": {
            "name": "n1",
            "labels": {names.NODE_LABEL_GPU_COUNT: "8", names.NODE_LABEL_GPU_MEMORY_MIB: "81920"},
            "annotations": notes,
        },
        "status": {"allocatable": {names.GPU_RESOURCE: "8"}},
    }


def test_the_mode_is_logged_when_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rlix.operator.snapshots")
    log_gpu_mode(None, gpu_node(claims=False))
    log_gpu_mode(gpu_node(claims=False), gpu_node(claims=False))  # a heartbeat: silent
    log_gpu_mode(gpu_node(claims=False), gpu_node(claims=True))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "node n1: 8 whole GPUs (nvidia.com/gpu; no gpu.rlix.io consumable capacity): "
        "no GPU sharing, and parking frees nothing the scheduler can reuse",
        "node n1: 8 GPUs shared by memory through pinned gpu.rlix.io ResourceClaims",
    ]


def test_the_store_knows_which_nodes_take_claims() -> None:
    store = Store()
    store.put_node(gpu_node(claims=True))
    assert store.claims_node("n1")
    store.put_node(gpu_node(claims=False))
    assert not store.claims_node("n1")
    assert not store.claims_node("absent")
