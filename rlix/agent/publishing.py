"""The publishing port: how the agent's observations reach the API server.

Kept to two typed calls (patch a node's annotations, patch a pod's annotations)
so the Kubernetes implementation (:mod:`rlix.agent.kube_publishing`) stays thin
enough to test against a real API server, and tests of everything else use the
in-memory or file-backed fakes here. A value of None deletes the annotation
(JSON merge-patch semantics).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

Annotations = Mapping[str, str | None]


class ObjectGoneError(Exception):
    """The object to patch no longer exists (the API server said 404).

    Retrying cannot help: a deleted pod does not come back under the same name
    and UID, so its pending annotations are dropped, not retried forever.
    """


class Publisher(Protocol):
    def patch_node_annotations(self, *, node: str, annotations: Annotations) -> None: ...

    def patch_pod_annotations(
        self, *, namespace: str, name: str, annotations: Annotations
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Patch:
    kind: str  # "node" | "pod"
    key: str  # node name or "namespace/name"
    annotations: Mapping[str, str | None]


class RecordingPublisher:
    """In-memory fake: keeps every patch, and the merged current annotations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.patches: list[Patch] = []
        self.current: dict[tuple[str, str], dict[str, str]] = {}

    def patch_node_annotations(self, *, node: str, annotations: Annotations) -> None:
        self._record("node", node, annotations)

    def patch_pod_annotations(self, *, namespace: str, name: str, annotations: Annotations) -> None:
        self._record("pod", f"{namespace}/{name}", annotations)

    def _record(self, kind: str, key: str, annotations: Annotations) -> None:
        with self._lock:
            self.patches.append(Patch(kind, key, dict(annotations)))
            merged = self.current.setdefault((kind, key), {})
            for k, v in annotations.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v


class FilePublisher(RecordingPublisher):
    """``--no-kube``: appends each patch as a JSON line, so another process
    (a test, a developer with ``tail -f``) can see what would be published."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def _record(self, kind: str, key: str, annotations: Annotations) -> None:
        super()._record(kind, key, annotations)
        line = json.dumps({"kind": kind, "key": key, "annotations": dict(annotations)})
        with self._lock, self._path.open("a") as f:
            f.write(line + "\n")


def read_published(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """Replay a :class:`FilePublisher` log into the current annotations."""
    current: dict[tuple[str, str], dict[str, str]] = {}
    if not path.exists():
        return current
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        merged = current.setdefault((entry["kind"], entry["key"]), {})
        for k, v in entry["annotations"].items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
    return current
