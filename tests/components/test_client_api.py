"""The public client API: pinned surface, cheap import, silent no-op without an agent."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rlix
from rlix.client.runtime import Runtime


def test_public_surface_is_pinned() -> None:
    assert rlix.__all__ == [
        "Phase",
        "__version__",
        "active_replicas",
        "agent_connected",
        "cap_torch_memory",
        "configure",
        "loading",
        "memory_budget_mib",
        "phase",
        "register_engine",
        "register_offload",
        "register_torch",
        "report_usage",
        "safe_point",
        "suspended",
        "watch_active_replicas",
    ]
    for name in rlix.__all__:
        assert hasattr(rlix, name), name


def test_import_is_cheap_and_reads_no_environment() -> None:
    code = (
        "import os, sys, json\n"
        "os.environ['RLIX_AGENT_SOCKET'] = '/nonexistent/agent.sock'\n"
        "import rlix\n"
        "heavy = [m for m in ('torch', 'pydantic', 'socket', 'kubernetes', 'pynvml',"
        " 'rlix.client.runtime') if m in sys.modules]\n"
        "print(json.dumps(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_no_agent_means_silent_no_ops() -> None:
    rt = Runtime(None)
    assert rt.link is None
    with rt.phase("rollout") as p:
        assert p is rlix.Phase.ROLLOUT
        assert rt.phase_now is rlix.Phase.ROLLOUT
        rt.safe_point()
        with rt.phase(rlix.Phase.TRAINING):
            assert rt.phase_now is rlix.Phase.TRAINING
        assert rt.phase_now is rlix.Phase.ROLLOUT
    assert rt.phase_now is None
    assert not rt.suspended


def test_phase_names_are_validated_even_without_an_agent() -> None:
    rt = Runtime(None)
    with pytest.raises(ValueError, match="unknown phase 'rolout'; valid phases: rollout"):
        rt.phase("rolout").__enter__()


def test_module_level_api_in_no_op_mode() -> None:
    rlix.configure(None)
    try:
        with rlix.phase("weight-sync"):
            rlix.safe_point()
        rlix.register_offload("cache", lambda: None, lambda: None)
        with pytest.raises(ValueError, match="already registered"):
            rlix.register_offload("cache", lambda: None, lambda: None)
        with pytest.raises(ValueError, match="no '/'"):
            rlix.register_offload("a/b", lambda: None, lambda: None)
        assert not rlix.agent_connected()
        assert not rlix.suspended()
    finally:
        rlix.configure(None)


def test_an_unreachable_agent_does_not_block_the_trainer(tmp_path: object) -> None:
    rt = Runtime("/nonexistent/rlix/agent.sock")
    try:
        with rt.phase("rollout"):  # reports are dropped while disconnected
            pass
        assert rt.link is not None and not rt.link.connected.is_set()
    finally:
        assert rt.link is not None
        rt.link.close()
