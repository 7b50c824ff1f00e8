"""Which replicas of each pod's elastic job run, as the conductor last wrote it.

The conductor writes ``rlix.io/active-replicas`` on every pod of a job with an
elastic rollout role (docs/conductor.md, "Elastic rollout"). The agent's
conducting loop lists this node's pods every second anyway; it hands each
pod's value to this book, and a process in the pod reads it over the socket
(``active-replicas``), so the trainer learns which replicas to route work to
without any new path into the node: the API server stays the only channel.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from rlix.core.suspension import ANNOTATION_ACTIVE_REPLICAS, ActiveReplicas, SuspensionError


class Rosters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = {}  # pod uid -> the annotation's raw JSON

    def update(self, annotations_by_uid: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the book with what this node's pods carry now."""
        fresh = {
            uid: raw
            for uid, notes in annotations_by_uid.items()
            if (raw := notes.get(ANNOTATION_ACTIVE_REPLICAS))
        }
        with self._lock:
            self._by_uid = fresh

    def of(self, uid: str) -> ActiveReplicas | None:
        """The pod's roster; None when its job is not elastic, or the value is malformed."""
        with self._lock:
            raw = self._by_uid.get(uid)
        if raw is None:
            return None
        try:
            return ActiveReplicas.parse(raw)
        except SuspensionError:
            return None
