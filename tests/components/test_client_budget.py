"""The client's memory budget: read from the env the operator sets, applied to torch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import rlix
from rlix.client import budget
from rlix.core import names


def test_no_budget_outside_rlix_and_nothing_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(names.ENV_GPU_MEMORY_MIB, raising=False)
    assert rlix.memory_budget_mib() is None
    assert budget.budget_fraction(81920) is None
    assert rlix.cap_torch_memory() is None


@pytest.mark.parametrize("raw", ["lots", "-5", "0", "1.5", "40000,x", "40000,,1"])
def test_a_bad_budget_names_the_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(names.ENV_GPU_MEMORY_MIB, raw)
    with pytest.raises(budget.BudgetError, match=names.ENV_GPU_MEMORY_MIB):
        rlix.memory_budget_mib()


def test_the_fraction_is_the_budget_over_the_gpu_and_never_above_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(names.ENV_GPU_MEMORY_MIB, "40960")
    assert rlix.memory_budget_mib() == 40960
    assert budget.budget_fraction(81920) == 0.5
    assert budget.budget_fraction(20480) == 1.0
    with pytest.raises(ValueError, match="total_mib"):
        budget.budget_fraction(0)


def test_a_claims_cdi_spec_gives_one_budget_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet-prepared claim's CDI spec lists the consumed memory per GPU."""
    monkeypatch.setenv(names.ENV_GPU_MEMORY_MIB, "40000, 30000")
    assert budget.memory_budgets_mib() == (40000, 30000)
    assert rlix.memory_budget_mib() == 30000  # the smallest, when no GPU is named
    assert budget.memory_budget_mib(0) == 40000
    assert budget.memory_budget_mib(5) == 30000
    assert budget.budget_fraction(80000, 0) == 0.5


def test_torch_is_capped_at_the_budget_on_the_device_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GPU here: torch.cuda's device queries are replaced, the call we make is recorded."""
    import torch

    calls: list[tuple[float, int]] = []
    cuda: Any = torch.cuda
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=81920 * 2**20)
    )
    monkeypatch.setattr(cuda, "set_per_process_memory_fraction", lambda f, i: calls.append((f, i)))
    monkeypatch.setenv(names.ENV_GPU_MEMORY_MIB, "20480")
    assert rlix.cap_torch_memory() == 0.25
    assert rlix.cap_torch_memory("cuda:1") == 0.25
    assert calls == [(0.25, 0), (0.25, 1)]
