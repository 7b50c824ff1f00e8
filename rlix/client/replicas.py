"""Which replicas of this job's rollout role run: asked of the node agent.

The conductor may suspend an elastic job's rollout replicas above its
``minReplicas`` in place (their pods stay; their memory is parked) and resume
them later (docs/conductor.md, "Elastic rollout"); it parks a job's whole
rollout for a higher-priority job. It writes which replicas
run on every pod of the job; the node agent on this pod's node hands that to
the pod's processes over its socket. A trainer asks here, or subscribes, and
routes rollout requests only to active replicas: a replica the conductor asks
to park is inactive at once, a parked one active again only once it is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rlix.client.link import AgentLink, AgentUnavailableError
from rlix.core import agent_protocol as proto
from rlix.core.suspension import ActiveReplicas, SuspensionError

log = logging.getLogger("rlix")


def ask(link: AgentLink, timeout_s: float) -> ActiveReplicas | None:
    """The agent's answer; None when it has none, or cannot answer in time."""
    try:
        reply = link.request(proto.OP_ACTIVE_REPLICAS).result(timeout=timeout_s)
    except (AgentUnavailableError, TimeoutError):
        return None
    if not reply.ok:  # an agent older than this op says unknown-op
        log.debug("rlix: active-replicas refused: %s", reply.error_message)
        return None
    doc = reply.body.get("activeReplicas")
    if not isinstance(doc, dict):
        return None
    try:
        return ActiveReplicas.from_doc(doc)
    except SuspensionError as exc:
        log.warning("rlix: unreadable active replicas from the agent: %s", exc)
        return None


class Watch:
    """Polls the agent and calls ``callback`` with each new answer (None included)."""

    def __init__(
        self,
        link: AgentLink,
        callback: Callable[[ActiveReplicas | None], None],
        interval_s: float,
    ) -> None:
        self._link = link
        self._callback = callback
        self._interval = interval_s
        self._stop = threading.Event()
        threading.Thread(target=self._loop, name="rlix-active-replicas", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        last: ActiveReplicas | None = None
        first = True
        while not self._stop.is_set():
            now = ask(self._link, timeout_s=max(self._interval, 1.0))
            if first or now != last:
                first, last = False, now
                try:
                    self._callback(now)
                except Exception:  # the trainer's callback must not end the watch
                    log.exception("rlix: the active-replicas callback failed")
            self._stop.wait(self._interval)
