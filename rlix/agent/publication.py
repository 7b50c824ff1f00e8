"""Publishing off the request path: phase reports are answered at socket speed
while a worker thread carries the annotations to the API server.

Patches to the same object coalesce (the newest value of each annotation
wins), so a trainer that switches phase faster than the API server answers
costs one patch per flush, not one per switch; and an API server outage slows
nothing but the publication itself. The worker also waits a moment
(``COALESCE_S``) after the first submission of a batch: under the phase gate a
trainer reports idle as it leaves a block and its next phase a moment later,
and without the wait most block boundaries published an idle the pod is
not really in (the RLJob's status and printer column read it) and cost a
patch of its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from rlix.agent.publishing import ObjectGoneError, Publisher

log = logging.getLogger(__name__)

# How long the worker gathers submissions before it publishes them: longer
# than a trainer takes from one phase block to the next, far shorter than
# anything that reads the annotations reacts in.
COALESCE_S = 0.05


class BackgroundPublisher:
    def __init__(
        self, port: Publisher, *, retry_s: float = 1.0, coalesce_s: float = COALESCE_S
    ) -> None:
        self._port = port
        self._retry_s = retry_s
        self._coalesce_s = coalesce_s
        self._hurry = 0  # flushes waiting: publish without gathering
        self._cv = threading.Condition()
        self._pending: dict[tuple[str, str], dict[str, str | None]] = {}
        self._in_flight = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rlix-publisher", daemon=True)
        self._thread.start()

    def pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._submit(("pod", f"{namespace}/{name}"), annotations)

    def node(self, node: str, annotations: Mapping[str, str | None]) -> None:
        self._submit(("node", node), annotations)

    def _submit(self, key: tuple[str, str], annotations: Mapping[str, str | None]) -> None:
        with self._cv:
            self._pending.setdefault(key, {}).update(annotations)
            self._cv.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far was published (tests, shutdown)."""
        with self._cv:
            self._hurry += 1
            self._cv.notify_all()
            try:
                return self._cv.wait_for(lambda: not self._pending and not self._in_flight, timeout)
            finally:
                self._hurry -= 1

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending or self._stopped)
                if self._stopped and not self._pending:
                    return
                gathered = time.monotonic() + self._coalesce_s
                while not (self._stopped or self._hurry):
                    left = gathered - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                batch, self._pending = self._pending, {}
                self._in_flight = len(batch)
            failed = {}
            for (kind, key), values in batch.items():
                try:
                    if kind == "node":
                        self._port.patch_node_annotations(node=key, annotations=values)
                    else:
                        namespace, name = key.split("/", 1)
                        self._port.patch_pod_annotations(
                            namespace=namespace, name=name, annotations=values
                        )
                except ObjectGoneError as exc:
                    log.info("%s %s is gone (%s): its annotations are dropped", kind, key, exc)
                except Exception as exc:  # the API server may be down; keep the data
                    log.warning("publishing %s %s failed (%s); will retry", kind, key, exc)
                    failed[(kind, key)] = values
            with self._cv:
                for k, ann in failed.items():
                    # Newer submissions win over the retried older values.
                    self._pending[k] = {**ann, **self._pending.get(k, {})}
                self._in_flight = 0
                self._cv.notify_all()
                if failed and not self._stopped:
                    self._cv.wait(self._retry_s)
