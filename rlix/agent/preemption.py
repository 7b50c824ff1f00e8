"""Suspend and resume a pod in place: ask its processes to park their device
memory (cooperative hooks), or checkpoint them through the driver (no hooks),
record what was parked where, and bring it back with a checksum check.

The record is saved as each process's park reply arrives (not when the
controller's wait ends), so a late reply after a timeout is still recorded and
the pod stays resumable. Records are reloaded on agent restart.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from datetime import UTC, datetime
from typing import Any

from rlix.agent.connections import Connection, ConnectionClosedError
from rlix.agent.driver_checkpoint import Checkpointer, CheckpointUnsupportedError
from rlix.agent.gpus import GpuBackend
from rlix.agent.parking_state import (
    Manifest,
    ManifestError,
    StateStore,
    SuspendedPod,
    manifest_from_doc,
)
from rlix.agent.publication import BackgroundPublisher
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_SUSPENDED

log = logging.getLogger(__name__)

WHERE_DRIVER = "driver-checkpoint"


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Preemption:
    def __init__(
        self,
        *,
        store: StateStore,
        backend: GpuBackend,
        checkpointer: Checkpointer,
        publisher: BackgroundPublisher,
        now: Callable[[], datetime],
        timeout_s: float,
    ) -> None:
        self._store = store
        self._backend = backend
        self._checkpointer = checkpointer
        self._publisher = publisher
        self._now = now
        self._timeout_s = timeout_s
        self._lock = threading.RLock()
        self._sessions: dict[str, dict[int, Connection]] = {}
        self.suspended, self.load_problems = store.load_all()
        for pod in self.suspended.values():
            backend.set_parked(frozenset(pod.processes), True)
            log.info(
                "reloaded suspended pod %s/%s (%d processes)",
                pod.namespace,
                pod.name,
                len(pod.processes),
            )

    # -- sessions --------------------------------------------------------------
    def attach(self, conn: Connection) -> None:
        assert conn.caller.pod is not None
        with self._lock:
            self._sessions.setdefault(conn.caller.pod.uid, {})[conn.pid] = conn

    def detach(self, conn: Connection) -> None:
        assert conn.caller.pod is not None
        with self._lock:
            conns = self._sessions.get(conn.caller.pod.uid, {})
            if conns.get(conn.pid) is not conn:
                return  # a newer connection of the same process took over
            del conns[conn.pid]
            rec = self.suspended.get(conn.caller.pod.uid)
            parked = rec is not None and conn.pid in rec.processes
        if not parked:
            self._backend.process_gone(conn.pid)

    def sessions_doc(self) -> dict[str, dict[str, list[str]]]:
        """Connected processes per pod UID, with the hooks each announced."""
        with self._lock:
            return {
                uid: {str(pid): list(c.hooks) for pid, c in conns.items()}
                for uid, conns in self._sessions.items()
                if conns
            }

    def on_hello(self, conn: Connection, parked: Any) -> dict[str, Any]:
        """A (re)connecting client; if it says it is parked, make sure we know."""
        pod = conn.caller.pod
        assert pod is not None
        if parked is None:
            return {"suspended": False}
        try:
            manifest = manifest_from_doc(parked)
        except ManifestError as exc:
            raise proto.ProtocolError(proto.E_BAD_FIELD, f"parked: {exc}") from None
        with self._lock:
            rec = self.suspended.get(pod.uid)
            if rec is None or conn.pid not in rec.processes:
                # Our record is gone (state dir wiped?): adopt the client's own
                # manifest rather than strand a parked process.
                log.warning("adopting parked state reported by pid %d of %s", conn.pid, pod.key)
                self._record(conn, manifest)
        return {"suspended": True}

    # -- suspend -----------------------------------------------------------------
    def suspend_pod(self, uid: str) -> dict[str, Any]:
        with self._lock:
            if uid in self.suspended:
                since = self.suspended[uid].since
                raise proto.ProtocolError(
                    proto.E_CONFLICT, f"pod {uid} already suspended since {since}"
                )
            conns = list(self._sessions.get(uid, {}).values())
        if not conns:
            raise proto.ProtocolError(
                proto.E_NOT_FOUND, f"no process of pod {uid} is connected to this agent"
            )
        futures: dict[Future[proto.Reply], Connection] = {}
        errors: list[str] = []
        for conn in conns:
            if conn.hooks:
                fut = conn.request(proto.OP_SUSPEND)
                fut.add_done_callback(functools.partial(self._on_parked, conn))
                futures[fut] = conn
            else:
                errors.extend(self._driver_suspend(conn))
        done, not_done = wait_futures(futures, timeout=self._timeout_s)
        for fut in not_done:
            errors.append(
                f"pid {futures[fut].pid}: no park reply within {self._timeout_s}s "
                "(it parks at its next phase boundary; the record is saved when it does)"
            )
        for fut in done:
            reply = _result(fut)
            if isinstance(reply, str):
                errors.append(f"pid {futures[fut].pid}: {reply}")
        with self._lock:
            rec = self.suspended.get(uid)
            parked = {pid: m.where for pid, m in rec.processes.items()} if rec else {}
        if errors:
            raise proto.ProtocolError(proto.E_FAILED, "; ".join(errors))
        return {"pod_uid": uid, "parked": {str(p): w for p, w in parked.items()}}

    def _driver_suspend(self, conn: Connection) -> list[str]:
        try:
            self._checkpointer.suspend(conn.pid)
        except CheckpointUnsupportedError as exc:
            return [
                f"pid {conn.pid} registered no offload hooks and transparent suspend is "
                f"unsupported: {exc}"
            ]
        except Exception as exc:
            return [f"pid {conn.pid}: driver checkpoint failed: {exc}"]
        self._record(conn, Manifest(where=WHERE_DRIVER, entries=()))
        return []

    def _on_parked(self, conn: Connection, fut: Future[proto.Reply]) -> None:
        reply = _result(fut)
        if isinstance(reply, str):
            return
        try:
            manifest = manifest_from_doc(reply.body.get("manifest"))
        except ManifestError as exc:
            log.error("pid %d sent a bad park manifest: %s", conn.pid, exc)
            return
        self._record(conn, manifest)

    def _record(self, conn: Connection, manifest: Manifest) -> None:
        pod = conn.caller.pod
        assert pod is not None
        with self._lock:
            rec = self.suspended.get(pod.uid)
            if rec is None:
                since = rfc3339(self._now())
                rec = SuspendedPod(uid=pod.uid, namespace=pod.namespace, name=pod.name, since=since)
                self.suspended[pod.uid] = rec
            rec.processes[conn.pid] = manifest
            self._store.save(rec)
        self._backend.set_parked(frozenset({conn.pid}), True)
        if pod.namespace:
            self._publisher.pod(pod.namespace, pod.name, {ANNOTATION_SUSPENDED: "true"})

    # -- resume ----------------------------------------------------------------
    def resume_pod(self, uid: str) -> dict[str, Any]:
        with self._lock:
            rec = self.suspended.get(uid)
            if rec is None:
                raise proto.ProtocolError(proto.E_NOT_FOUND, f"pod {uid} is not suspended")
            conns = dict(self._sessions.get(uid, {}))
            work = dict(rec.processes)
        errors: list[str] = []
        resumed: list[int] = []
        futures: dict[Future[proto.Reply], int] = {}
        for pid, manifest in work.items():
            conn = conns.get(pid)
            if manifest.where == WHERE_DRIVER:
                try:
                    self._checkpointer.resume(pid)
                    resumed.append(pid)
                except Exception as exc:
                    errors.append(f"pid {pid}: driver restore failed: {exc}")
            elif conn is None:
                errors.append(
                    f"pid {pid} is not connected (yet); its parked copy lives in that "
                    "process, retry once it reconnects"
                )
            else:
                futures[conn.request(proto.OP_RESUME, manifest=manifest.to_doc())] = pid
        done, not_done = wait_futures(futures, timeout=self._timeout_s)
        errors += [f"pid {futures[f]}: no resume reply within {self._timeout_s}s" for f in not_done]
        for fut in done:
            pid = futures[fut]
            reply = _result(fut)
            if isinstance(reply, str):
                errors.append(f"pid {pid}: {reply}")
                continue
            problem = _verify(work[pid], reply.body.get("checksums"))
            if problem:
                errors.append(f"pid {pid}: integrity check failed: {problem}")
            else:
                resumed.append(pid)
        self._finish_resume(rec, resumed)
        if errors:
            raise proto.ProtocolError(proto.E_FAILED, "; ".join(errors))
        return {"pod_uid": uid, "resumed": sorted(resumed)}

    def _finish_resume(self, rec: SuspendedPod, resumed: list[int]) -> None:
        with self._lock:
            for pid in resumed:
                rec.processes.pop(pid, None)
            if rec.processes:
                self._store.save(rec)  # keep what is still parked
            else:
                self._store.delete(rec.uid)
                self.suspended.pop(rec.uid, None)
        self._backend.set_parked(frozenset(resumed), False)
        if not rec.processes and rec.namespace:
            self._publisher.pod(rec.namespace, rec.name, {ANNOTATION_SUSPENDED: None})


def _result(fut: Future[proto.Reply]) -> proto.Reply | str:
    """The reply, or a one-line reason why there is none / it is an error."""
    try:
        reply = fut.result(timeout=0)
    except (ConnectionClosedError, FutureTimeout) as exc:
        return f"no reply: {exc}"
    if not reply.ok:
        return f"{reply.error_code}: {reply.error_message}"
    return reply


def _verify(manifest: Manifest, checksums: Any) -> str | None:
    """Compare the checksums a client computed after restoring with the record."""
    if not isinstance(checksums, dict):
        return "resume reply has no 'checksums' object"
    bad = [e.name for e in manifest.entries if checksums.get(e.name) != e.checksum]
    extra = set(checksums) - {e.name for e in manifest.entries}
    if bad or extra:
        return f"mismatched {sorted(bad)}, unexpected {sorted(extra)}"
    return None
