"""The operator's loop relists on its period, and a failed relist stops nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import cast

import pytest

from rlix.operator.admitting import Admitter
from rlix.operator.loop import run_loop
from rlix.operator.metrics import Metrics
from rlix.operator.reconciling import Reconciler
from rlix.operator.store import Store


class CountingAdmitter:
    """Counts the loop's calls; the first relist fails as a dropped connection would."""

    def __init__(self) -> None:
        self.runs = 0
        self.relists = 0
        self.metrics = Metrics()

    async def run(self) -> None:
        self.runs += 1

    async def relist(self) -> None:
        self.relists += 1
        if self.relists == 1:
            raise ConnectionError("connection reset by peer")


class IdleReconciler:
    def due(self) -> list[str]:
        return []

    async def reconcile(self, key: str) -> None:  # pragma: no cover - nothing is dirty
        raise AssertionError(key)


async def run_for(seconds: float, admitter: CountingAdmitter, **periods: float) -> None:
    task = asyncio.create_task(
        run_loop(
            Store(),
            cast(Admitter, admitter),
            cast(Reconciler, IdleReconciler()),
            resync_every_s=3600.0,
            **periods,
        )
    )
    await asyncio.sleep(seconds)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_loop_relists_on_its_period_and_survives_a_failed_relist(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admitter = CountingAdmitter()
    with caplog.at_level(logging.ERROR, logger="rlix.operator"):
        asyncio.run(run_for(2.5, admitter, relist_every_s=0.4, admission_every_s=0.1))
    # The first relist comes one period after the start (the admitter lists
    # before its first pass itself); the failure is logged and the next one runs.
    assert admitter.relists >= 2, admitter.relists
    assert admitter.runs >= 2
    assert any("relist failed" in r.getMessage() for r in caplog.records)


def test_no_relist_before_its_period() -> None:
    admitter = CountingAdmitter()
    asyncio.run(run_for(0.8, admitter, relist_every_s=300.0, admission_every_s=0.1))
    assert admitter.relists == 0 and admitter.runs >= 1
