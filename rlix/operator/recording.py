"""Writing what the operator decided: status patches and Events, each only on change.

At a thousand jobs, rewriting an unchanged status on every pass would be the
operator's main load on the API server, so a write happens only when something
a reader cares about changed. Events are for transitions a human should see in
``kubectl describe`` (queued, admitted, pod failed), not for every pass.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from rlix.core.rljob import RLJobStatus
from rlix.operator.kube import Kube
from rlix.operator.statuses import same_ignoring_times
from rlix.operator.store import Store

# Fields cleared by writing null: a JSON merge patch leaves absent keys alone.
_NULLABLE = [
    (name, info.alias or name)
    for name, info in RLJobStatus.model_fields.items()
    if info.default is None
]


def merge_patch(status: RLJobStatus) -> dict[str, Any]:
    body = status.model_dump(by_alias=True, exclude_none=True, mode="json")
    for name, alias in _NULLABLE:
        if getattr(status, name) is None:
            body[alias] = None
    return body


class Recorder:
    def __init__(self, store: Store, kube: Kube, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._kube = kube
        self._clock = clock

    async def status(self, key: str, old: RLJobStatus, new: RLJobStatus) -> bool:
        """Patch the job's status if it changed; True when written."""
        if same_ignoring_times(old, new):
            return False
        body = self._store.jobs.get(key)
        if body is None:
            return False
        meta = body["metadata"]
        result = await self._kube.patch_status(meta["namespace"], meta["name"], merge_patch(new))
        if result is not None:
            # The response is newer than anything the watch has delivered yet.
            self._store.put_job(result)
        return True

    async def event(self, key: str, kind: str, reason: str, message: str) -> None:
        body = self._store.jobs.get(key)
        if body is not None:
            await self._kube.event(body, kind, reason, message, self._clock())
