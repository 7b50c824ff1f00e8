"""What is parked, where, with which checksums: persisted so it outlives the agent.

The parked bytes themselves stay with their owner (the client process keeps its
host copy in pinned memory, so an agent crash cannot lose them). What the agent
owns is the *record*: which processes of which pod are suspended, and the
checksums they reported when they parked. On restart the agent reloads the
records, and a resume still verifies against the checksums taken at suspend
time, not against whatever the client claims later.

One JSON file per pod under ``<state-dir>/suspended/``, written atomically
(temp file, fsync, rename), so a SIGKILL mid-write leaves the old record or the
new one, never half of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from rlix.core.agent_protocol import Location
from rlix.core.objects.metadata import is_uid


class ManifestError(ValueError):
    """A client's parked manifest is not in the documented shape."""


@dataclass(frozen=True, slots=True)
class ParkedEntry:
    name: str
    nbytes: int
    checksum: str
    offset: int | None = None  # position in the export (relocated entries only)


@dataclass(frozen=True, slots=True)
class Manifest:
    """What one client process parked (see docs/node-agent.md)."""

    where: Location
    entries: tuple[ParkedEntry, ...]
    size: int | None = None  # bytes of the export (relocation only)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)

    @property
    def relocated(self) -> bool:
        return self.where.agent_holds

    def moved_to(self, where: Location) -> Manifest:
        return Manifest(where=where, entries=self.entries, size=self.size)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"where": str(self.where), "entries": []}
        for e in self.entries:
            entry: dict[str, Any] = {"name": e.name, "nbytes": e.nbytes, "checksum": e.checksum}
            if e.offset is not None:
                entry["offset"] = e.offset
            doc["entries"].append(entry)
        if self.size is not None:
            doc["size"] = self.size
        return doc


def manifest_from_doc(doc: Any) -> Manifest:
    if not isinstance(doc, Mapping):
        raise ManifestError(f"manifest must be an object, got {type(doc).__name__}")
    try:
        where = Location.parse(doc.get("where"))
    except ValueError as exc:
        raise ManifestError(f"manifest 'where': {exc}") from None
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise ManifestError("manifest needs a list 'entries'")
    size = doc.get("size")
    if size is not None and not _count(size):
        raise ManifestError("'size' must be a non-negative integer")
    entries = []
    for i, e in enumerate(raw):
        if not isinstance(e, Mapping):
            raise ManifestError(f"entries[{i}] must be an object")
        name, nbytes, checksum = e.get("name"), e.get("nbytes"), e.get("checksum")
        offset = e.get("offset")
        if not isinstance(name, str) or not isinstance(checksum, str) or not checksum:
            raise ManifestError(f"entries[{i}] needs string 'name' and 'checksum'")
        if not _count(nbytes):
            raise ManifestError(f"entries[{i}] needs a non-negative integer 'nbytes'")
        if offset is not None:
            if not _count(offset):
                raise ManifestError(f"entries[{i}].offset must be a non-negative integer")
            if size is None or offset + nbytes > size:
                raise ManifestError(f"entries[{i}] ({name}) lies outside the {size}-byte export")
        entries.append(ParkedEntry(name, int(nbytes), checksum, offset))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ManifestError("manifest entry names must be unique")
    return Manifest(where=where, entries=tuple(entries), size=size)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(slots=True)
class SuspendedPod:
    uid: str
    namespace: str
    name: str
    since: str  # RFC 3339
    processes: dict[int, Manifest] = field(default_factory=dict)  # host pid -> manifest
    # Who parked it: "" for a suspension (the conductor, a person), PARKED_BY_GATE
    # for the phase gate's turn (not published as suspended; the gate restores it).
    by: str = ""
    # What it held on each GPU when the gate parked it (GPU -> MiB), so that an
    # agent restarted meanwhile knows the room its restore needs.
    held_mib: dict[int, int] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        doc = {
            "version": STATE_VERSION,
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "since": self.since,
            "processes": {str(pid): m.to_doc() for pid, m in self.processes.items()},
        }
        if self.by:
            doc["by"] = self.by
        if self.held_mib:
            doc["heldMiB"] = {str(gpu): mib for gpu, mib in sorted(self.held_mib.items())}
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> SuspendedPod:
        version = doc.get("version")
        if version not in (1, STATE_VERSION):
            raise ManifestError(f"unsupported state file version {version!r}")
        processes = doc["processes"]
        if version == 1:
            processes = {p: _from_v1(m) for p, m in processes.items()}
        return cls(
            uid=str(doc["uid"]),
            namespace=str(doc["namespace"]),
            name=str(doc["name"]),
            since=str(doc["since"]),
            processes={int(p): manifest_from_doc(m) for p, m in processes.items()},
            by=str(doc.get("by", "")),  # records from before the gate parked carry none
            held_mib={int(g): int(mib) for g, mib in doc.get("heldMiB", {}).items()},
        )


# ``SuspendedPod.by`` of a pod the phase gate parked for its partner's turn.
PARKED_BY_GATE = "phase-gate"


# Version 2 names where memory is with the protocol's Location (``self``,
# ``host``, ``gpu:<i>``); version 1, written by older agents, said ``host`` for
# the process's own pool and ``relocated-host`` / ``relocated-gpu:<i>`` for the
# agent's copies. Read both, so an agent upgrade strands no suspended pod.
STATE_VERSION = 2


def _from_v1(manifest: Any) -> Any:
    if not isinstance(manifest, Mapping):
        return manifest  # manifest_from_doc says what is wrong with it
    where = manifest.get("where")
    if where == "host":
        where = "self"
    elif isinstance(where, str):
        where = where.removeprefix("relocated-")
    return {**manifest, "where": where}


class StateStore:
    """Suspended-pod records under ``<state_dir>/suspended``."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir / "suspended"
        self._dir.mkdir(parents=True, exist_ok=True)

    def _path(self, uid: str) -> Path:
        if not is_uid(uid):
            raise ValueError(f"not a pod UID: {uid!r}")
        return self._dir / f"{uid}.json"

    def save(self, pod: SuspendedPod) -> None:
        path = self._path(pod.uid)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            json.dump(pod.to_doc(), f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        dir_fd = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)

    def delete(self, uid: str) -> None:
        self._path(uid).unlink(missing_ok=True)

    def load_all(self) -> tuple[dict[str, SuspendedPod], list[str]]:
        """Every record, and a problem line for each file that could not be read.

        A corrupt file is reported, not deleted: it may be the only trace of a
        suspended pod, and a human should look at it.
        """
        pods: dict[str, SuspendedPod] = {}
        problems: list[str] = []
        for path in sorted(self._dir.glob("*.json")):
            try:
                pod = SuspendedPod.from_doc(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{path}: {exc}")
                continue
            pods[pod.uid] = pod
        return pods, problems
