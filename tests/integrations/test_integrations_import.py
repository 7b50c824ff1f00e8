"""The integrations keep the base client tiny: importing them loads no framework."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rlix
from rlix.integrations import PhaseSwitcher


def test_importing_the_integrations_loads_no_framework() -> None:
    code = (
        "import sys, json, rlix.integrations.trl, rlix.integrations.rllib; "
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'trl', 'ray', "
        "'accelerate', 'datasets') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_phase_switcher_validates_before_leaving_the_current_phase() -> None:
    rlix.configure(None)
    sw = PhaseSwitcher()
    sw.switch("rollout")
    with pytest.raises(ValueError, match="unknown phase"):
        sw.switch("rolout")
    assert sw.current == "rollout"
    sw.switch("rollout")  # same phase: nothing happens
    sw.switch("training")
    assert sw.current == "training"
    sw.close()
    assert sw.current is None
    sw.close()  # idempotent


def test_rllib_callbacks_class_is_an_rllib_callback() -> None:
    pytest.importorskip("ray.rllib")
    from ray.rllib.callbacks.callbacks import RLlibCallback

    import rlix.integrations.rllib as rr

    cls = rr.callbacks_class()
    assert issubclass(cls, RLlibCallback) and issubclass(cls, rr.RLixCallbacksMixin)
    assert rr.callbacks_class() is cls


def test_rllib_callbacks_class_pickles_by_reference_into_a_fresh_process() -> None:
    pytest.importorskip("ray.rllib")
    import pickle

    import rlix.integrations.rllib as rr

    blob = pickle.dumps(rr.callbacks_class())
    assert b"RLixCallbacks" in blob and len(blob) < 200  # a reference, not the class body
    code = (
        "import pickle, sys; cls = pickle.loads(sys.stdin.buffer.read()); "
        "print(cls.__module__, cls.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True, check=True)
    assert out.stdout.decode().split() == ["rlix.integrations.rllib", "RLixCallbacks"]
