"""The operator's one background task: admission passes, then per-job reconciles.

Watch handlers only update the store and set ``wakeup``; this loop does the
work, so a burst of a thousand watch events becomes a few batched passes
instead of a thousand interleaved ones. A pass that fails is logged and the
next one retries: every step is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

from rlix.core.rljob import JobState
from rlix.operator.admitting import Admitter
from rlix.operator.conducting import Conductor
from rlix.operator.reconciling import Reconciler
from rlix.operator.store import Store

log = logging.getLogger("rlix.operator")


async def run_loop(
    store: Store,
    admitter: Admitter,
    reconciler: Reconciler,
    *,
    admission_every_s: float = 2.0,
    resync_every_s: float = 30.0,
    concurrency: int = 64,
    conductor: Conductor | None = None,
    conduct_every_s: float = 1.0,
    relist_every_s: float = 300.0,
) -> None:
    last_admission = last_resync = last_conduct = 0.0
    # The admitter lists before its first pass; the next relist is one period on.
    last_relist = time.monotonic()
    gate = asyncio.Semaphore(concurrency)

    async def one(key: str) -> None:
        async with gate:
            try:
                await reconciler.reconcile(key)
            except Exception:
                store.dirty.add(key)  # retried on the next pass
                log.exception("reconciling %s failed", key)

    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(store.wakeup.wait(), timeout=0.5)
        store.wakeup.clear()
        now = time.monotonic()
        if now - last_relist >= relist_every_s:
            # The resync below revisits what the store holds; only a list can
            # show what it holds but the API server no longer does.
            last_relist = now
            try:
                await admitter.relist()
            except Exception:
                log.exception("relist failed")
        if store.queue_changed or now - last_admission >= admission_every_s:
            store.queue_changed = False
            last_admission = now
            try:
                await admitter.run()
            except Exception:
                store.queue_changed = True
                log.exception("admission pass failed")
        if now - last_resync >= resync_every_s:
            # A periodic full pass catches anything a lost watch event hid.
            last_resync = now
            store.dirty.update(store.jobs)
            _count_states(store, admitter)
        keys = store.dirty | set(reconciler.due())
        store.dirty = set()
        if keys:
            await asyncio.gather(*(one(k) for k in sorted(keys)))
        if conductor is not None and now - last_conduct >= conduct_every_s:
            # After the reconciles: the conductor's condition lands on statuses
            # they just wrote, and its writes are seen by the next pass.
            last_conduct = now
            try:
                await conductor.run()
            except Exception:
                log.exception("conductor pass failed")


def _count_states(store: Store, admitter: Admitter) -> None:
    counts: Counter[str] = Counter()
    for key in store.jobs:
        job, _ = store.job(key)
        state = job.status.state if job is not None else None
        counts[state.value if state is not None else "Queued"] += 1
    for state in JobState:
        admitter.metrics.jobs.labels(state=state.value).set(counts[state.value])
